"""`python -m bench run`: validate the sweep, then run it as pytest-benchmark tests into one results file."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from bench.results import ResultsError, entries, read_run
from bench.shapes import DTYPES, ShapeError, parse_mask
from bench.suite import spec as sweeps

# glibc malloc returns big blocks to the OS on free and page-faults them in again on the next call, which
# makes naive/math attention's S x S intermediates bimodally slow; these settings keep them in the heap.
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736"}

help = "run a benchmark sweep (a named profile, axes overridable) and write a results file"
SUITE = Path(__file__).resolve().parent.parent / "suite"


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _words(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="default", help="quick | default | heads | decode | full (default: default)")
    p.add_argument("--backend", type=_words, help="comma-separated backends, e.g. naive,sdpa-flash")
    p.add_argument("--heads", type=_ints, help="query heads, e.g. 8 or 8,16")
    p.add_argument("--kv-heads", type=_ints, help="KV heads, e.g. 8,2,1 (MHA, GQA, MQA)")
    p.add_argument("--seq", type=_ints, help="prefill sequence lengths")
    p.add_argument("--decode-kv", type=_ints, help="KV-cache lengths for decode")
    p.add_argument("--decode-q", type=_ints, help="queries per decode step (1; 4 for speculative decoding)")
    p.add_argument("--batch", type=_ints)
    p.add_argument("--head-dim", type=_ints)
    p.add_argument("--dtype", type=_words, help="fp32,bf16,fp16")
    p.add_argument("--mask", type=_words, help="none,causal,window:256")
    p.add_argument("--phase", type=_words, help="prefill,decode")
    p.add_argument("--pass", dest="passes", type=_words, help="fwd,fwd+bwd")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when present, else cpu")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice, recorded)")
    p.add_argument("--budget", type=float, help="seconds of timing per case before it is marked noisy")
    p.add_argument("--out", type=Path, help="results file (default: results/<run-id>.json)")
    p.add_argument("--resume", action="store_true", help="continue the sweep in --out, skipping finished cases")
    p.add_argument("--shard", help="K/N: run every N-th case starting at the K-th (1-based)")
    p.add_argument("--malloc", choices=["default", "tuned"], default="default",
                   help="tuned: restart with glibc malloc kept from returning large blocks to the OS (CPU)")
    p.add_argument("--list", action="store_true", help="print the case ids and exit")
    p.add_argument("--report", action="store_true", help="build the report from the results file at the end")


def build_sweep(args: argparse.Namespace, device: str) -> sweeps.Sweep:
    base = sweeps.profile(args.profile, device)
    for dtype in args.dtype or ():
        if dtype not in DTYPES:
            raise ShapeError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    for mask in args.mask or ():
        parse_mask(mask)
    for phase in args.phase or ():
        if phase not in sweeps.PHASES:
            raise ShapeError(f"unknown phase {phase!r}; known: {', '.join(sweeps.PHASES)}")
    for pass_ in args.passes or ():
        if pass_ not in sweeps.PASSES:
            raise ShapeError(f"unknown pass {pass_!r}; known: {', '.join(sweeps.PASSES)}")
    if args.budget is not None and args.budget <= 0:
        raise ShapeError(f"--budget {args.budget} must be positive")
    return base.with_axes(backends=args.backend, heads=args.heads, kv_heads=args.kv_heads, seqs=args.seq,
                          batches=args.batch, head_dims=args.head_dim, dtypes=args.dtype, masks=args.mask,
                          phases=args.phase, passes=args.passes, decode_kv=args.decode_kv, decode_q=args.decode_q,
                          budget_s=args.budget, d_model=None if args.head_dim else base.d_model,
                          tokens_per_batch=None if args.batch else base.tokens_per_batch)


def _check_writable(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".probe-"):
            pass
    except OSError as err:
        raise ShapeError(f"cannot write results to {path}: {err.strerror or err}") from None


def run(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ShapeError("--device cuda: torch sees no CUDA device here")
    if args.threads is not None and args.threads < 1:
        raise ShapeError(f"--threads {args.threads} must be at least 1")
    if args.malloc == "tuned" and any(os.environ.get(k) != v for k, v in TUNED_MALLOC.items()):
        _restart_with(TUNED_MALLOC)
    sweep = build_sweep(args, device)
    cases = sweeps.cases(sweep, device)
    if args.shard:
        cases = sweeps.shard(cases, args.shard)
    if args.list:
        print("\n".join(c.id for c in cases))
        return 0
    sweep_id = sweeps.sweep_id(cases)
    run_id = f"{dt.datetime.now():%Y%m%d-%H%M%S}-{args.profile}-{device}" + (
        f"-shard{args.shard.replace('/', 'of')}" if args.shard else "")
    out: Path = args.out or Path("results") / f"{run_id}.json"
    done: list[str] = []
    if args.resume:
        if args.out is None:
            raise ShapeError("--resume needs --out, the results file to continue")
        try:
            previous = read_run(out)
        except ResultsError as err:
            raise ShapeError(f"--resume: {err}") from None
        if previous["attnbench"].get("sweep_id") != sweep_id:
            theirs = previous["attnbench"].get("sweep_id")
            raise ShapeError(f"--resume: {out} is from another sweep (sweep_id {theirs} != {sweep_id}); "
                             "run the same profile, axes and shard")
        done = [e["extra_info"]["case_id"] for e in entries(previous)]
    elif out.exists():
        raise ShapeError(f"{out} exists; pass --resume to continue it, or another --out")
    _check_writable(out)

    axes = {k: v for k, v in vars(sweep).items() if k != "notes"}
    spec = {"out": str(out.resolve()), "device": device, "profile": args.profile, "run_id": run_id,
            "sweep_id": sweep_id, "budget_s": sweep.budget_s, "threads": args.threads, "resume": args.resume,
            "axes": axes, "cases": [sweeps.case_to_dict(c) for c in cases], "done": done}
    print(f"{len(cases)} cases ({len(cases) - len(done)} to run), profile {args.profile} on {device} -> {out}")
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        code = _pytest(spec_path)
    print(f"results: {out}")
    if args.report and code in (0, 1):
        from bench.report import build_report

        print(f"report: {build_report([out], None)}")
    return code


def _restart_with(env: dict[str, str]) -> None:
    """glibc reads MALLOC_* only at start-up, so the process restarts itself (as `python -m bench`) with them set."""
    if not sys.argv[0].endswith(("__main__.py", "attnbench")):  # `python -m bench` or the console script
        raise ShapeError("--malloc tuned restarts the process; from Python, set "
                         + " ".join(f"{k}={v}" for k, v in env.items()) + " before starting it")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], {**os.environ, **env})


def _pytest(spec_path: Path) -> int:
    import pytest

    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # keep the profiler's start/stop chatter off the terminal
    code = pytest.main([
        str(SUITE / "bench_attention.py"), "-c", str(SUITE / "pytest.ini"), "--rootdir", str(SUITE),
        "-p", "bench.suite.plugin", f"--attn-spec={spec_path}", "-q", "--no-header", "-rfE",
        "--benchmark-timer=bench.suite.replay.clock", "--benchmark-columns=median,iqr,rounds",
        "--benchmark-sort=name", "--benchmark-group-by=group",
    ])
    sys.stdout.flush()
    if code == pytest.ExitCode.INTERRUPTED:
        return 130
    return 1 if code == pytest.ExitCode.TESTS_FAILED else int(code)
