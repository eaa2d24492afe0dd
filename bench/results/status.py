"""Case statuses: every case ends in exactly one, and every part of the project names them with these words.

  ok           checked against the float64 reference, then timed
  unsupported  the backend cannot run this case here (the reason says why); not a failure
  oom          out of memory (or predicted to need more than the machine has)
  error        the backend raised (the message is the reason)
  incorrect    its output (or gradients) differ from the reference beyond the tolerance, or its timing is not to be
               believed (it wrote into its inputs, drifted, or ran faster than the machine can)
  skipped      not run: it did not fit the run's --time-budget (the reason gives its predicted time)
  timeout      stopped past its --case-timeout; the worker running it was ended
  crashed      the worker running it died (a signal, an abort, an exit); the reason names it and its last stderr
"""

from __future__ import annotations

STATUSES: tuple[str, ...] = ("ok", "unsupported", "oom", "error", "incorrect", "skipped", "timeout", "crashed")
NOT_OK: tuple[str, ...] = STATUSES[1:]
# ok -> one of these is a regression (skipped is a choice of the run, not of the code: never one)
FAILING: tuple[str, ...] = ("oom", "incorrect", "error", "timeout", "crashed")
EXIT_1: tuple[str, ...] = ("error", "incorrect", "timeout", "crashed")  # statuses that make a run exit 1

# What a reader sees: the long word in legends and tables, the short one in a heatmap cell, the loud one in the
# progress line (failures in capitals so they stand out of a scrolling terminal).
LABELS: dict[str, str] = {"ok": "ok", "unsupported": "unsupported", "oom": "out of memory", "error": "error",
                          "incorrect": "incorrect", "skipped": "skipped (time budget)", "timeout": "timed out",
                          "crashed": "crashed"}
SHORT_LABELS: dict[str, str] = {"ok": "ok", "unsupported": "unsup.", "oom": "OOM", "error": "error",
                                "incorrect": "wrong", "skipped": "skip", "timeout": "time", "crashed": "crash"}
PROGRESS_LABELS: dict[str, str] = {"ok": "ok", "unsupported": "unsupported", "oom": "OOM", "error": "ERROR",
                                   "incorrect": "INCORRECT", "skipped": "skipped", "timeout": "TIMEOUT",
                                   "crashed": "CRASHED"}
