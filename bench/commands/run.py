"""`python -m bench run`: check the sweep, then run it as pytest-benchmark tests into one results file.

The options are bench.engine.options's (the same ones `pytest --pyargs bench.suite --attn-...` takes); this
module adds what only the friendly front end does: --list, --malloc, --report, --tables and the closing summary.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.engine import options
from bench.engine.queue import QUEUE_ENV
from bench.errors import UsageError
from bench.launch import devices as devices_mod
from bench.launch import slurm

# glibc malloc returns big blocks to the OS on free and page-faults them in again on the next call, which
# makes naive/math attention's S x S intermediates bimodally slow; these settings keep them in the heap.
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736"}

help = "run a benchmark sweep (a named profile, axes overridable) and write a results file"
PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # node ids read bench/suite/test_attention.py::... from here
SUITE = PACKAGE_PARENT / "bench" / "suite"


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.add_options(p.add_argument)
    for opt in options.LAUNCH_OPTIONS:
        p.add_argument(f"--{opt.flag}", dest=opt.name, help=opt.help, **opt.kwargs)
    p.add_argument("--malloc", choices=["default", "tuned"], default="default",
                   help="tuned: restart with glibc malloc kept from returning large blocks to the OS (CPU)")
    p.add_argument("--list", action="store_true", help="print the case ids and exit")
    p.add_argument("--report", action="store_true", help="build the report from the results file at the end")
    p.add_argument("--tables", action="store_true", help="also print pytest-benchmark's tables of every case")


def run(args: argparse.Namespace) -> int:
    if args.malloc == "tuned" and any(os.environ.get(k) != v for k, v in TUNED_MALLOC.items()):
        _restart_with(TUNED_MALLOC)
    values = {name: getattr(args, name) for name in options.option_names()}
    launch = {opt.name: getattr(args, opt.name) for opt in options.LAUNCH_OPTIONS}
    job = slurm.check(values, launch)  # {} without --launcher
    devices = devices_mod.parse_devices(launch["devices"]) if launch["devices"] else None
    if devices:
        if values.get("device") == "cpu":
            raise UsageError("--devices lists CUDA devices; it cannot run with --device cpu")
        devices_mod.check_devices(devices)  # before the plan: the error names the missing device
        values["device"] = "cuda"
    if job and values.get("resume"):
        raise UsageError("--resume with --launcher: run the same command again; it resubmits what is missing")
    plan = options.plan(values, default_out=not args.list and not job, listing=args.list or bool(job),
                        here=job.get("launcher") != "slurm")
    if args.list:
        print("\n".join(c.id for c in plan.cases))
        return 0
    out = plan.out
    if job:
        out = Path(values["out"]) if values.get("out") else slurm.default_out(plan, job["shards"])
        if out.exists():
            raise UsageError(f"{out} exists: these shards are merged already; pass another --out")
    values["out"] = out
    where = f"{len(devices)} devices ({', '.join(devices)})" if devices else plan.device
    where += f", {job['shards']} shards ({job['launcher']})" if job else ""
    print(f"{len(plan.cases)} cases ({len(plan.cases) - len(plan.done)} to run), profile {plan.profile} on "
          f"{where} -> {out}", flush=True)
    if job:
        code, merged = slurm.launch(values, plan, job, out)
        if not merged:
            return code
    elif devices:
        code = devices_mod.run_on_devices(values, plan, devices, tables=args.tables)
    else:
        code = _pytest([*options.as_flags(values, "attn-"), f"--attn-run-id={plan.run_id}"], tables=args.tables)
    report = None
    if (args.report or job) and code in (0, 1):
        from bench.report import build_report

        report = build_report([out], None)
    if out.exists() and QUEUE_ENV not in os.environ:  # a --devices worker: the launcher sums up the whole run
        from bench.engine.summary import summary_lines

        print("\n".join(summary_lines(out, report)))
    return code


def _restart_with(env: dict[str, str]) -> None:
    """glibc reads MALLOC_* only at start-up, so the process restarts itself (as `python -m bench`) with them set."""
    if not sys.argv[0].endswith(("__main__.py", "attnbench")):  # `python -m bench` or the console script
        raise UsageError("--malloc tuned restarts the process; from Python, set "
                         + " ".join(f"{k}={v}" for k, v in env.items()) + " before starting it")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], {**os.environ, **env})


def _pytest(attn_flags: list[str], tables: bool) -> int:
    import pytest

    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # keep the profiler's start/stop chatter off the terminal
    code = pytest.main([
        "--pyargs", "bench.suite", "-c", str(SUITE / "pytest.ini"), "--rootdir", str(PACKAGE_PARENT),
        "-p", "bench.suite.plugin", *attn_flags, "-q", "--no-header", "-rfE", "--assert=plain",
        "--benchmark-columns=median,iqr,rounds", "--benchmark-sort=name", "--benchmark-group-by=group",
        *([] if tables else ["--benchmark-quiet"]),
    ])
    sys.stdout.flush()
    if code == pytest.ExitCode.INTERRUPTED:
        return 130
    return 1 if code == pytest.ExitCode.TESTS_FAILED else int(code)
