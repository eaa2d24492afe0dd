"""`python -m bench run`: check the sweep, then run it through the engine's session into one results file.

The options are bench.engine.options's (the same ones `pytest --pyargs bench.suite --attn-...` takes); this
module adds what only the friendly front end does: --list, --malloc, --report, --tables, the launchers, the
closing summary and, on Ctrl-C, the one line that says what is kept and how to resume.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from bench.engine import interrupt, options
from bench.engine.queue import worker_of_launcher
from bench.engine.session import Session
from bench.errors import UsageError
from bench.launch import devices as devices_mod
from bench.launch import slurm
from bench.launch.spec import launch_spec
from bench.measure.environment import THP_KEY, THP_MODE, allocator_settings
from bench.results import ResultsError, read_run

# glibc malloc returns big blocks to the OS on free and page-faults them in again on the next call; whether a block
# counts as big moves with what the process freed before (its dynamic mmap threshold), so naive/math attention's
# large intermediates take one time in one worker and 2-4x it in the next. The MALLOC_* settings keep them in the heap.
# THP_MEM_ALLOC_ENABLE asks torch to put its blocks of 2 MiB or more on transparent huge pages (where the kernel's
# mode is madvise or always): on 4 KiB pages a ragged decode batch over its cold copies of a paged KV cache read a
# different time in every process (between six fresh processes, log-sd 6-11%; on huge pages 3-6%, and 7-23% faster),
# as the TLB and where the pages land in the cache change with each allocation. A serving engine's KV pool is one
# large block allocated once, as these are.
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736",
                "THP_MEM_ALLOC_ENABLE": "1"}

HANDED_OPTIONS = ("out", "resume", "trace", "device")  # a --planned worker's own (device: what --devices sets)

help = "run a benchmark sweep (a named profile, axes overridable) and write a results file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.add_options(p.add_argument)
    for opt in options.LAUNCH_OPTIONS:
        p.add_argument(f"--{opt.flag}", dest=opt.name, help=opt.help, **opt.kwargs)
    p.add_argument("--malloc", choices=["default", "tuned"],
                   help="allocator of the processes that measure (CPU): tuned (default) keeps large blocks in glibc's "
                        "heap, so a case's time does not depend on what its worker allocated before, and puts torch's "
                        "blocks of 2 MiB or more on transparent huge pages; default: the environment's MALLOC_* and "
                        "THP_MEM_ALLOC_ENABLE as they are")
    p.add_argument("--list", action="store_true", help="print the case ids and exit")
    p.add_argument("--plan", action="store_true",
                   help="print the plan (per question: answered or not; each case's predicted seconds) and exit")
    p.add_argument("--gpu", help="with --plan: plan for this GPU from its spec sheet (e.g. H200), not the ceilings "
                                 "measured here")
    p.add_argument("--in-process", action="store_true",
                   help="run the cases in this process, not a worker (no --case-timeout, no crash isolation): "
                        "for a debugger")
    p.add_argument("--planned", type=Path, metavar="FILE",
                   help="run the cases a launcher planned (its --devices workers and Slurm jobs), with --out")
    p.add_argument("--report", action="store_true", help="build the report from the results file at the end")
    p.add_argument("--tables", action="store_true", help="also print a table of every case (median, IQR, rounds)")


def run(args: argparse.Namespace) -> int:
    if args.malloc != "default":
        _tune_malloc(in_process=args.in_process, asked=args.malloc == "tuned")
    request = options.RunRequest.from_args(args)
    spec = launch_spec({opt.name: getattr(args, opt.name) for opt in options.LAUNCH_OPTIONS}, request)
    if spec.devices:
        devices_mod.check_devices(spec.devices)  # before the plan: the error names the missing device
        request = dataclasses.replace(request, device="cuda")
    if args.gpu and not args.plan:
        raise UsageError("--gpu goes with --plan (it plans for a GPU from its spec sheet)")
    preview = args.list or args.plan
    if args.planned:
        plan = _handed(args.planned, request)
    else:
        plan = options.plan(request, default_out=not preview and not spec.launcher,
                            listing=preview or bool(spec.launcher), here=spec.launcher != "slurm")
    if args.list:
        print("\n".join(c.id for c in plan.cases))
        return 0
    if args.plan:
        print("\n".join(_preview(plan, args.gpu)))
        return 0
    out = plan.out
    if spec.launcher:
        out = request.out or slurm.default_out(plan, spec.shards)
        if out.exists():
            raise UsageError(f"{out} exists: these shards are merged already; pass another --out")
    queue, ran_on = worker_of_launcher(os.environ)  # a --devices worker: its launcher sums up the whole run
    where = f"{len(spec.devices)} devices ({', '.join(spec.devices)})" if spec.devices else plan.device
    where += f", {spec.shards} shards ({spec.launcher})" if spec.launcher else ""
    # a launcher's rerun keeps its shards'
    kept = slurm.kept_cases(out, spec.shards) if spec.launcher else len(plan.done)
    print(f"{len(plan.cases)} cases ({len(plan.cases) - kept} to run), profile {plan.profile} on "
          f"{where} -> {out}", flush=True)
    if plan.device == "cpu" and (note := huge_pages_note(allocator_settings())):
        print(f"note: {note}", flush=True)
    if spec.launcher:
        code, merged = slurm.launch(plan, spec, out, request.trace)
        if not merged:
            return code
    elif spec.devices:
        code = devices_mod.run_on_devices(plan, spec.devices, request.trace)
    else:
        from bench.engine.console import console_for

        console = console_for(sys.stdout) if queue is None else None
        code = Session(plan, trace_dir=request.trace, isolate=not args.in_process, console=console,
                       queue=queue, ran_on=ran_on).run()
    worker = queue is not None
    if code == 130:
        if not worker:
            print(interrupted_line(request, plan, out, bool(spec.launcher)), file=sys.stderr, flush=True)
        return 130
    report = None
    if (args.report or spec.launcher) and code in (0, 1):
        try:
            interrupt.stage("report")
            from bench.report import build_report

            report = build_report([out], None)
        except KeyboardInterrupt:
            print(f"interrupted while building the report: every case is in {out}; build it with: "
                  f"python -m bench report {out}", file=sys.stderr, flush=True)
            return 130
    if out.exists() and not worker:
        from bench.report.summary import summary_lines, table_lines

        print("\n".join([*(table_lines(out) if args.tables else []), *summary_lines(out, report)]))
    return code


def _preview(plan: options.Plan, gpu: str | None) -> list[str]:
    """--plan: the ceilings measured here, or a GPU's spec sheet (--gpu, or a CUDA plan on a machine without one)."""
    import torch

    from bench.engine.preview import preview_lines
    from bench.measure import calibrate
    from bench.measure.spec_sheets import spec_calibration

    if gpu or (plan.device == "cuda" and not torch.cuda.is_available()):
        ceilings = spec_calibration(gpu or "H200")
    else:
        print(f"calibrating {plan.device} (GEMM and copy ceilings)...", flush=True)
        if plan.threads:  # with the threads the run's cases get, or the predictions are theirs, not the run's
            torch.set_num_threads(plan.threads)
        ceilings = calibrate.calibrate(plan.device, plan.sweep.dtypes)
    return preview_lines(plan, ceilings)


def _handed(path: Path, request: options.RunRequest) -> options.Plan:
    """--planned: a launcher's planned cases, with this worker's --out, --resume and --trace and nothing else."""
    given = [name for name in request.given() if name not in HANDED_OPTIONS]
    if given:
        raise UsageError(f"--planned runs the cases its launcher planned; it takes no --{given[0].replace('_', '-')}")
    return options.planned(path, request.out, request.resume)


def interrupted_line(request: options.RunRequest, plan: options.Plan, out: Path, launched: bool) -> str:
    """What a Ctrl-C leaves: how many cases the results file keeps, and the command that continues the run."""
    try:
        kept = len(read_run(out).entries()) if out.exists() else 0
    except ResultsError:
        kept = 0
    if launched:
        return (f"interrupted: {kept} of {len(plan.cases)} cases kept; run the same command again to resubmit "
                "what is missing")
    command = " ".join(["python -m bench run", *request.command_line(drop=("out", "resume")), f"--out {out}"])
    if not out.exists():  # stopped before the results file was started (calibration)
        return f"interrupted before any case ran; nothing written; start again with: {command}"
    return f"interrupted: {kept} of {len(plan.cases)} cases kept in {out}; resume with: {command} --resume"


def huge_pages_note(allocator: dict[str, str]) -> str | None:
    """A line where torch was asked for huge pages (the tuned allocator) but the kernel's THP mode is `never`: the large
    blocks stay on 4 KiB pages, so cases that read scattered large blocks (a cold ragged batch) carry their noise."""
    if allocator.get("THP_MEM_ALLOC_ENABLE") != "1" or allocator.get(THP_KEY) != "never":
        return None
    return (f"transparent huge pages are off on this machine ({THP_MODE} reads never): torch's large blocks stay on "
            "4 KiB pages, where a cold ragged batch's time moves between processes (log-sd 6-11% against 3-6% on huge "
            f"pages, 2-core AMD EPYC); `echo madvise > {THP_MODE}` as root turns them on")


def _tune_malloc(in_process: bool, asked: bool) -> None:
    """The tuned allocator where cases run (glibc reads MALLOC_* only at a process's start): each worker inherits it
    from this process's environment; a run in this process restarts it with them set. Called from Python, a run in this
    process cannot restart: it keeps glibc's settings (the results' environment says which), unless --malloc tuned
    was asked for by name."""
    if not in_process:
        os.environ.update(TUNED_MALLOC)
    elif any(os.environ.get(k) != v for k, v in TUNED_MALLOC.items()) and (asked or _restartable()):
        _restart_with(TUNED_MALLOC)


def _restartable() -> bool:
    """Started as `python -m bench` or the console script; not another program's `python -m` (pytest's), which a
    restart as `python -m bench` would replace."""
    arg0 = Path(sys.argv[0])
    own = Path(__file__).resolve().parents[1] / "__main__.py"
    return arg0.name == "attnbench" or (arg0.name == "__main__.py" and arg0.resolve() == own)


def _restart_with(env: dict[str, str]) -> None:
    """glibc reads MALLOC_* only at start-up, so the process restarts itself (as `python -m bench`) with them set."""
    if not _restartable():
        raise UsageError("--malloc tuned restarts the process; from Python, set "
                         + " ".join(f"{k}={v}" for k, v in env.items()) + " before starting it")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], {**os.environ, **env})
