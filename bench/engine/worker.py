"""The process a case runs in (`python -m bench.engine.worker`), so that a case that hangs or takes its process down
(a segfault in a compiled kernel, an abort, a CUDA context poisoned by an illegal memory access) ends that case
only. bench.engine.isolate starts it and talks to it; it measures with the engine's Runner, as an in-process run
would.

`--threads N` (the run's --threads) sets torch's CPU threads before anything is measured.
Protocol: one JSON object per line. Requests on stdin, one answer each on the protocol stream (the original stdout;
anything else printed goes to stderr, which the parent relays and keeps the last lines of):
  {"cmd": "facts", "device", "profile"}                            -> {"fingerprint": {...}, "environment": {...}}
  {"cmd": "calibrate", "device", "dtypes"}                         -> {"calibration": {...}}
  {"cmd": "kv", "device"}                                          -> {"kv_measured": [...]}
  {"cmd": "runner", "calibration", "gpu_name", "case_budget_s", "trace_dir", "threads", "cold"}
                                                                   -> {"threads": torch's threads}
  {"cmd": "run", "case": {"backend", "shape": {...}, "phase", "pass_", "device"}}  -> {"record", "samples"}
  {"cmd": "slice", "case": {...}, "check": bool}                  -> {"median_s"} or {"error"} (Runner.slice)
The worker ignores SIGINT: Ctrl-C is the parent's to handle (it ends the worker when it stops).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any


def _protocol_stream():
    """The original stdout for answers; fd 1 then points at stderr, so stray prints cannot break the protocol."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return out


def serve(request: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    cmd = request["cmd"]
    if cmd == "facts":
        from bench.engine.execute import facts_here

        return facts_here(request["device"], request["profile"])
    if cmd == "calibrate":
        from bench.measure.calibrate import calibrate

        return {"calibration": calibrate(request["device"], tuple(request.get("dtypes") or ())).to_dict()}
    if cmd == "kv":
        from bench.models.kvcache import measured_presets

        return {"kv_measured": measured_presets(request["device"])}
    if cmd == "runner":
        import gc
        from pathlib import Path

        import torch

        from bench.engine.runner import Runner
        from bench.measure.cold import ColdPlan
        from bench.results.meta import Calibration

        torch.manual_seed(0)
        if request.get("threads"):
            torch.set_num_threads(int(request["threads"]))
        trace = request.get("trace_dir")
        state["runner"] = Runner(Calibration.from_dict(request["calibration"]), request.get("gpu_name"),
                                 case_budget_s=request["case_budget_s"], trace_dir=Path(trace) if trace else None,
                                 cold=ColdPlan(**request["cold"]) if request.get("cold") else None)
        gc.freeze()  # what is alive now lives to the end: keep the collector from rescanning it between rounds
        return {"threads": torch.get_num_threads()}
    if cmd == "run":
        from bench.problem.case import Case

        outcome = state["runner"].run(Case.from_dict(request["case"]))
        return {"record": outcome.record.to_dict(), "samples": list(outcome.samples)}
    if cmd == "slice":
        from bench.problem.case import Case

        try:
            return {"median_s": state["runner"].slice(Case.from_dict(request["case"]), request.get("check", True))}
        except Exception as err:  # noqa: BLE001 - a block that cannot time its case is dropped, not the run
            return {"error": f"{type(err).__name__}: {err}"[:500]}
    return {"error": f"unknown command {cmd!r}"}


def main() -> None:
    from bench.engine import interrupt
    from bench.engine.execute import prepare_torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupt.in_worker = True
    out = _protocol_stream()
    prepare_torch(int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else None)
    state: dict[str, Any] = {}
    for line in sys.stdin:
        if line.strip():
            answer = serve(json.loads(line), state)
            out.write(json.dumps(answer, default=str, allow_nan=True) + "\n")


if __name__ == "__main__":
    main()
