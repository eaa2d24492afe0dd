"""One side of an A/B comparison: a process that imports ONE revision's attnbench and measures cases on request.

Started by bench.regress.ab.side as `python <this file>` with PYTHONPATH set to that revision's tree first, so `import
bench` is that revision's code. This file comes from the current tree (the revision may predate it), so it imports
nothing of attnbench at module level and relies only on this interface of the revision it measures:

  bench.engine.options.plan(RunRequest.of(values)) -> .cases (each with .id), .device, .threads,
                                                 .sweep.case_budget_s (revisions before 2026-12-04 take the values
                                                 themselves, and name it budget_s: RENAMED)
  bench.measure.calibrate.calibrate(device)   -> a Calibration (older revisions: {"gemm_flops_per_s", ...})
  bench.measure.environment.fingerprint(device), .git_commit()
  bench.engine.session.Session(plan, case_budget_s=..., say=...) .open(calibration=...) .measure(case) -> an Entry
                                                 (.record, .samples; older revisions: (record, entry dict))
  or, in revisions before the session, bench.engine.runner.Runner(calibration, case_budget_s=...).run(case) -> .record,
  .samples (seconds per call)
(revisions before the engine package kept plan and Runner in bench.suite.options and bench.suite.runner: WHERE)

The engine checks every case against the float64 reference before timing it, so each side checks its own code.
Missing pieces: the worker answers {"fatal": reason} and exits 2.

Protocol: one JSON object per line. The parent writes a request on stdin, the worker writes exactly one answer on
its protocol stream (the original stdout; anything else the revision prints goes to stderr):
  {"cmd": "plan", "values": {...}, "slice_budget_s": x | null, "slices": n, "min_slice_s": x | null,
   "calibration": {...} | absent (a restarted side's: its first worker's answer, not measured again)}
      -> {"ok": true, "cases": [ids], "device", "fingerprint", "calibration", "commit", "bench_file", "case_budget_s",
          "retime"}
  {"cmd": "run", "case": id, "retime": bool}  -> {"ok": true, "record": {...}, "samples": [...], "retimed": bool}
  {"cmd": "quit"}             -> {"ok": true}, then exit 0
A request the worker cannot serve (bad input, unknown case): {"ok": false, "error": one line}.

Time-only slices ("retime", when the plan's answer says `"retime": true`): the first slice of a case runs the whole
engine (check against float64, warm-up, every timing mode, the kernel profile); the worker then keeps that case's
timed call (the Runner's keep_last), and a later slice of the same case, asked with retime, only times it again in
its headline mode with the revision's own timer (bench.measure.modes.headline_samples, which rotates a case's cold
inputs as its runs do; in a revision without it, bench.measure.timer: time_cpu on CPU, time_cold on CUDA). The
check and the profile describe the case, not the moment: repeating them in every slice spent two thirds of an A/B's
time outside the timed rounds, and spread each block's A and B slices further apart in time.
"""

from __future__ import annotations

import inspect
import json
import os
import sys

EXIT_UNUSABLE = 2
# names a later revision gave to a value of the request: new -> what revisions before it take
RENAMED = {"case_budget_s": "budget_s"}
# Where each name lives: this tree's module first, then where revisions before the engine package kept it.
WHERE = {
    "plan": (("bench.engine.options", "bench.suite.options"), "plan"),
    "Runner": (("bench.engine.runner", "bench.suite.runner"), "Runner"),
    "calibrate": (("bench.measure.calibrate",), "calibrate"),
    "fingerprint": (("bench.measure.environment",), "fingerprint"),
    "git_commit": (("bench.measure.environment",), "git_commit"),
}


def _protocol_stream():
    """The original stdout for answers; fd 1 then points at stderr, so stray prints cannot break the protocol."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return out


def _fatal(out, reason: str) -> None:
    out.write(json.dumps({"ok": False, "fatal": reason}) + "\n")
    out.flush()
    sys.exit(EXIT_UNUSABLE)


def _interface(out, tree: str):
    """The revision's functions this worker needs, or a fatal answer naming what is missing."""
    try:
        import bench
    except Exception as err:  # noqa: BLE001 - any failure to import the revision makes it unusable
        _fatal(out, f"cannot import bench from {tree}: {type(err).__name__}: {err}")
    here = os.path.realpath(os.path.dirname(bench.__file__))
    # attnbench's own revisions: bench from the revision's tree; a user's repository: from the attnbench given
    expected = os.environ.get("ATTNBENCH_AB_BENCH") or tree
    if not here.startswith(os.path.realpath(expected) + os.sep):
        _fatal(out, f"imported bench from {here}, not from {expected}")
    names = {}
    for modules, attr in WHERE.values():
        tried = []
        for module in modules:  # this revision's home of the name first, then older revisions' homes
            try:
                names[attr] = getattr(__import__(module, fromlist=[attr]), attr)
                break
            except Exception as err:  # noqa: BLE001
                tried.append(f"{module}.{attr}: {type(err).__name__}: {err}")
        else:
            _fatal(out, f"the revision's code lacks {attr} ({'; '.join(tried)})")
    names["RunRequest"] = getattr(sys.modules.get(names["plan"].__module__), "RunRequest", None)  # optional, newer
    try:  # optional: revisions before the engine's session measure through their Runner
        names["Session"] = __import__("bench.engine.session", fromlist=["Session"]).Session
    except Exception:  # noqa: BLE001
        names["Session"] = None
    return names, here


def _renamed(api: dict) -> bool:
    """Whether the revision still names the per-case timing budget budget_s (RENAMED's old names)."""
    takes = api.get("Session") or api["Runner"]
    return "case_budget_s" not in inspect.signature(takes).parameters


def _plan(api: dict, request: dict, state: dict) -> dict:
    old = _renamed(api)
    values = {RENAMED.get(k, k) if old else k: v for k, v in request["values"].items()}
    asked = api["RunRequest"].of(values) if api["RunRequest"] else values
    try:
        try:
            plan = api["plan"](asked, default_out=False)
        except TypeError:  # an older plan() without default_out
            plan = api["plan"](asked)
    except ValueError as err:  # bench.errors.InputError: the values are bad input for this revision
        return {"ok": False, "error": str(err)}
    torch = sys.modules.get("torch")  # the revision's code imported it (a revision without torch has nothing to set)
    if torch is not None:
        torch.manual_seed(0)
        if plan.threads:
            torch.set_num_threads(plan.threads)
    # the case's time budget is shared by its slices: each side times a case `slices` times
    per_case = getattr(plan.sweep, "budget_s" if old else "case_budget_s")
    budget = request.get("slice_budget_s") or max(per_case / max(1, int(request.get("slices") or 1)),
                                                  float(request.get("min_slice_s") or 0))
    keyword = {"budget_s" if old else "case_budget_s": budget}
    calibration = _calibration(api, plan.device, request.get("calibration"))
    try:
        if api.get("Session"):  # the engine's session, as `bench run` measures (no results file)
            session = api["Session"](plan, **keyword, say=lambda line: print(line, file=sys.stderr))
            session.open(calibration=calibration)
            state["runner"] = lambda case: _from_session(session, case)
            state["engine"] = getattr(session, "runner", None)
        else:  # a revision from before the session: its Runner
            runner = api["Runner"](calibration, **keyword)
            state["runner"] = lambda case: (lambda o: (dict(o.record), list(o.samples)))(runner.run(case))
    except TypeError as err:
        _fatal(state["out"], f"the revision's engine does not take (plan or calibration, case_budget_s=...): {err}")
    state["cases"] = {c.id: c for c in plan.cases}
    state["timer"] = _retimer(state.get("engine"), plan.device, budget)
    return {"ok": True, "retime": state["timer"] is not None, "cases": list(state["cases"]), "device": plan.device,
            "fingerprint": api["fingerprint"](plan.device),
            # a bench.results.meta.Calibration, or an older revision's dict: the pipe carries the file's form
            "calibration": calibration.to_dict() if hasattr(calibration, "to_dict") else calibration,
            "commit": api["git_commit"](), "bench_file": state["bench_dir"], "case_budget_s": budget,
            "threads": torch.get_num_threads() if torch is not None else None}


def _calibration(api: dict, device: str, given: dict | None):
    """The machine's ceilings: measured, or `given` (the side's first worker's, sent back to the fresh workers that
    replace it: the same machine, so a restart need not spend seconds measuring them again). A revision whose
    calibrate returns a class with from_dict takes that; an older one the dict itself."""
    if given is None:
        return api["calibrate"](device)
    cls = getattr(sys.modules.get(api["calibrate"].__module__), "Calibration", None)
    return cls.from_dict(given) if hasattr(cls, "from_dict") else given


def _run(request: dict, state: dict) -> dict:
    case = state.get("cases", {}).get(request.get("case"))
    if case is None or "runner" not in state:
        return {"ok": False, "error": f"unknown case {request.get('case')!r} (or no plan yet)"}
    kept = state.get("kept")
    if request.get("retime") and kept is not None and kept[0] == case.id:
        return {"ok": True, "record": kept[1], "samples": state["timer"](kept[2], kept[3]), "retimed": True}
    engine = state.get("engine")
    if state.get("timer") is not None:
        engine.keep_last, engine.last = True, None
    record, samples = state["runner"](case)
    # keep only the last case's call: its inputs stay in memory until the next case replaces them
    last = getattr(engine, "last", None) if state.get("timer") is not None else None
    state["kept"] = (case.id, record, last[0], _one_call_s(samples)) if last and samples else None
    return {"ok": True, "record": record, "samples": samples, "retimed": False}


def _one_call_s(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2]


def _retimer(engine, device: str, case_budget_s: float):
    """(fn, one_call_s) -> the headline mode's samples, from the revision's timer; None when the revision's runner
    cannot keep its last call or its timer lacks the functions (every slice then runs the whole engine)."""
    if engine is None or not hasattr(engine, "keep_last"):
        return None
    try:
        modes = __import__("bench.measure.modes", fromlist=["time_case"])
        timer = __import__("bench.measure.timer", fromlist=["time_cpu"])
        time_mode = timer.time_cold if device == "cuda" else timer.time_cpu
    except Exception:  # noqa: BLE001
        return None
    headline = getattr(modes, "headline_samples", None)
    if headline is not None:  # a revision that times cold inputs cold: its headline mode, rotated as its runs are
        cold, cache = getattr(engine, "cold", None), getattr(engine, "cache", None)

        def retime_headline(fn, one_call_s: float) -> list[float]:
            fn()  # one untimed call: the other side ran in between and left its own data in the caches
            return list(headline(fn, device, one_call_s, case_budget_s, cold, cache(device) if cache else None))
        return retime_headline

    def retime(fn, one_call_s: float) -> list[float]:
        fn()  # one untimed call: the other side ran in between and left its own data in the caches
        timing = time_mode(fn, case_budget_s) if device == "cuda" else time_mode(fn, one_call_s, case_budget_s)
        return list(timing.samples)

    return retime


def _from_session(session, case) -> tuple[dict, list[float]]:
    result = session.measure(case)
    if not isinstance(result, tuple):  # an Entry
        return result.record.to_dict(), list(result.samples)
    record, entry = result  # revisions before 2026-12-04: (record, the entry's dict)
    return dict(record), list((entry.get("stats") or {}).get("data") or [])


def pin(cpus: str | None) -> None:
    """Every thread of this process onto `cpus` (ATTNBENCH_AB_CPUS: bench.regress.ab.engine.pinned), before anything
    is measured; the threads torch starts later inherit it from them. After the imports, not before: the two sides
    start at once, and pinned from the start their imports would queue for the same core."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    mask = {int(c) for c in cpus.split(",")}
    tasks = "/proc/self/task"  # the threads already started (torch's import starts one): each is pinned by its id
    for tid in os.listdir(tasks) if os.path.isdir(tasks) else ["0"]:
        os.sched_setaffinity(int(tid), mask)


def main() -> None:
    # the directory of this file must not shadow the revision's modules
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    tree = os.environ.get("ATTNBENCH_AB_TREE", "")
    out = _protocol_stream()
    api, bench_dir = _interface(out, tree)
    pin(os.environ.get("ATTNBENCH_AB_CPUS"))
    state = {"out": out, "bench_dir": bench_dir}
    import gc

    gc.freeze()  # the imports live to the end: keep the collector from rescanning them between rounds
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        cmd = request.get("cmd")
        if cmd == "quit":
            out.write(json.dumps({"ok": True}) + "\n")
            return
        answer = _plan(api, request, state) if cmd == "plan" else _run(request, state) if cmd == "run" else \
            {"ok": False, "error": f"unknown command {cmd!r}"}
        out.write(json.dumps(answer, default=str, allow_nan=True) + "\n")


if __name__ == "__main__":
    main()
