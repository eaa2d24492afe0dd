"""Case statuses: every case ends in exactly one, and every part of the project names them with these words."""

from __future__ import annotations

STATUSES: tuple[str, ...] = ("ok", "unsupported", "oom", "error", "incorrect")
NOT_OK: tuple[str, ...] = STATUSES[1:]
FAILING: tuple[str, ...] = ("oom", "incorrect", "error")  # ok -> one of these is a regression

# What a reader sees: the long word in legends and tables, the short one in a heatmap cell, the loud one in the
# progress line (failures in capitals so they stand out of a scrolling terminal).
LABELS: dict[str, str] = {"ok": "ok", "unsupported": "unsupported", "oom": "out of memory", "error": "error",
                          "incorrect": "incorrect"}
SHORT_LABELS: dict[str, str] = {"ok": "ok", "unsupported": "unsup.", "oom": "OOM", "error": "error",
                                "incorrect": "wrong"}
PROGRESS_LABELS: dict[str, str] = {"ok": "ok", "unsupported": "unsupported", "oom": "OOM", "error": "ERROR",
                                   "incorrect": "INCORRECT"}
