"""`python -m bench profile`: one case under torch.profiler — its kernel table, which SDPA kernel ran, its peak
memory, and a trace file (DIR/trace.json, for https://ui.perfetto.dev or chrome://tracing); on CUDA also an
allocator snapshot (DIR/memory_snapshot.pickle, for https://pytorch.org/memory_viz).

The case is a case id (as in results files) or the same axis flags as `bench run`; unset axes take one value each
(PROFILE_BASE), so `--backend sdpa-flash --seq 1024` names one case. The case is checked against the float64
reference and timed in every mode first by the engine's session, exactly as in a sweep (no results file).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from pathlib import Path

import torch

from bench.backends import get_backend
from bench.engine import options, sweeps
from bench.engine.session import Session
from bench.errors import UsageError
from bench.kinds.axes import seconds
from bench.measure.calibrate import MAIN_DTYPE
from bench.measure.memory import cuda_memory_snapshot
from bench.problem.columns import INT_COLUMNS, shape_from_fields
from bench.problem.shapes import ShapeError
from bench.report.units import fmt_bytes, fmt_seconds
from bench.results.meta import Calibration

help = "profile one case: kernel table, SDPA's kernel, peak memory, a Perfetto trace (and a CUDA memory snapshot)"
# one value per axis unless given: a single MHA prefill case
PROFILE_BASE = sweeps.Sweep(backends=("sdpa",), kv_heads=None, seqs=(1024,), decode_kv=(4096,), case_budget_s=0.5)
NO_CEILINGS = Calibration(math.nan, math.nan)  # percentages are not printed here


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("case_id", nargs="?", help="a case id, e.g. sdpa/mha/b1-hq8-hkv8-q1024-kv1024-d64/fp32/causal/"
                   "prefill/fwd/cpu (else the axis flags name the case)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when present, else cpu")
    p.add_argument("--out", type=Path, required=True, help="folder for trace.json (and memory_snapshot.pickle)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    for f in sweeps.axis_fields():
        p.add_argument(f"--{f.metadata['flag']}", dest=f.name, default=None, help=f.metadata["help"])


def case_from_id(text: str) -> sweeps.Case:
    """A case id back to its case; refused unless the case spells the same id again."""
    parts = text.strip().split("/")
    if len(parts) != 8:
        raise UsageError(f"case id {text!r}: expected backend/variant/shape/dtype/mask/phase/pass/device")
    backend, _, dims, dtype, mask_text, phase, pass_, device = parts
    # a later field's value may hold dashes (model=llama-3-8b): those fields split where a name= follows a dash
    sized, *later_text = re.split(r"-(?=[a-z_]+=)", dims, maxsplit=1)
    head, *extra = sized.split("-")
    try:
        if len(extra) != 5:
            raise ValueError(f"{dims}: expected six sizes (b, hq, hkv, q, kv, d) before any name=value")
        sizes = {}
        for token, name in zip([head, *extra[:5]], ("batch", "n_heads", "n_kv_heads", "seq_q", "seq_kv", "head_dim"),
                               strict=True):
            prefix = {"batch": "b", "n_heads": "hq", "n_kv_heads": "hkv", "seq_q": "q", "seq_kv": "kv",
                      "head_dim": "d"}[name]
            if not token.startswith(prefix):
                raise ValueError(token)
            sizes[name] = int(token[len(prefix):])
        later = dict(token.split("=", 1) for token in re.split(r"-(?=[a-z_]+=)", *later_text)) if later_text else {}
        later = {k: int(v) if k in INT_COLUMNS else v for k, v in later.items()}
        shape = shape_from_fields({**sizes, "dtype": dtype, "mask": mask_text, **later})
    except (ValueError, TypeError, ShapeError) as err:
        raise UsageError(f"case id {text!r}: cannot read its shape ({err})") from None
    case = sweeps.Case(backend, shape, phase, pass_, device)
    if case.id != text.strip():
        raise UsageError(f"case id {text!r} is not one attnbench writes (it reads back as {case.id})")
    get_backend(backend)
    return case


def case_from_axes(args: argparse.Namespace, device: str) -> sweeps.Case:
    given = {}
    for f in sweeps.axis_fields():
        value = getattr(args, f.name)
        if value is not None:
            try:
                given[f.name] = f.metadata["parse"](value)
            except UsageError as err:
                raise UsageError(f"--{f.metadata['flag']}: {err}") from None
    base = dataclasses.replace(PROFILE_BASE, dtypes=(MAIN_DTYPE[device],))
    found = sweeps.cases(base.with_axes(**given), device)
    if len(found) != 1:
        raise UsageError(f"the axes name {len(found)} cases ({', '.join(c.id for c in found[:3])}"
                         f"{', ...' if len(found) > 3 else ''}); profile takes one: give one value per axis")
    return found[0]


def run(args: argparse.Namespace) -> int:
    if args.case_id:
        case = case_from_id(args.case_id)
        device = case.device
    else:
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        case = case_from_axes(args, device)
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    plan = options.plan_of([case], PROFILE_BASE, device, "profile", args.threads)
    session = Session(plan, trace_dir=out, case_budget_s=case_budget(args), say=lambda line: None)
    session.open(calibration=NO_CEILINGS)
    runner = session.runner
    runner.keep_last = True
    record = session.measure(case).record
    print(f"case {case.id}")
    if record.status != "ok" or runner.last is None:
        print(f"{record.status}: {record.reason}")
        return 1
    fn, timing = runner.last
    trace = out / "trace.json"
    runner.trace_path(case).replace(trace)
    for line in report_lines(record, timing):
        print(line)
    print(f"trace: {trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    if device == "cuda":
        snapshot = out / "memory_snapshot.pickle"
        cuda_memory_snapshot(fn, str(snapshot))
        print(f"memory snapshot: {snapshot} (drag it onto https://pytorch.org/memory_viz)")
    return 0


def case_budget(args: argparse.Namespace) -> float:
    return seconds(args.case_budget_s) if args.case_budget_s else PROFILE_BASE.case_budget_s


def report_lines(record: dict, timing) -> list[str]:
    """The kernel table (name, calls, total and self time, % of the call) and the case's other facts."""
    kernel = timing.kernel
    wall = sum(kernel.wall_s) / len(kernel.wall_s)
    label = "kernel (per call)" if kernel.device == "cuda" else "op (per call)"
    lines = [f"{label:<80} {'calls':>6} {'total':>10} {'self':>10} {'% call':>6}"]
    for row in kernel.rows[:20]:
        lines.append(f"{row.name[:80]:<80} {row.calls:6.1f} {fmt_seconds(row.total_seconds_per_call):>10} "
                     f"{fmt_seconds(row.seconds_per_call):>10} {100 * row.seconds_per_call / wall:6.1f}")
    if len(kernel.rows) > 20:
        lines.append(f"... {len(kernel.rows) - 20} more in the trace")
    medians = {mode: fmt_seconds(t["median_s"]) for mode, t in (record.timings or {}).items()}
    lines += [
        "timings (median per call): " + ", ".join(f"{m} {v}" for m, v in medians.items()),
        f"headline: {fmt_seconds(record.median_s)} ({record.timer}); outside the kernels: "
        f"{record.overhead_pct:.0f}% of a warm call; launch bound: {record.launch_bound}"
        if record.overhead_pct is not None else f"headline: {fmt_seconds(record.median_s)}",
        f"sdpa kernel: {record.sdpa_kernel or '— (not an sdpa backend, or no SDPA op ran)'}",
        f"peak memory above the inputs: {fmt_bytes(record.peak_mem_bytes)} "
        f"(model: {fmt_bytes(record.model_mem_bytes) if record.model_mem_bytes else '—'})",
    ]
    if record.reason:
        lines.append(f"note: {record.reason}")
    return lines
