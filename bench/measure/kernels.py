"""What ran inside a call: torch.profiler over a few calls gives the time of the kernels (CUDA, through CUPTI) or
ops (CPU) themselves per call, the biggest of them by name, and which kernel SDPA chose.

Each profiled call runs inside a record_function marker (MARKER) and is followed by a synchronize, so the events
of call i are those that start in [marker i's start, marker i+1's start).
- CUDA: a call's kernel time is the sum of its device events (kernels, memcpy, memset) — no launch overhead.
- CPU: a call's op time is the sum of the self times of its aten ops (on any thread: a CPU backward runs its
  ops in the autograd engine), i.e. the call without the Python between the ops (the harness's closure, the
  backend's glue). warm - kernel is then the Python and dispatch overhead.
The profiler itself adds about a microsecond per op; that is small against any op worth timing.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import record_function

from bench.measure.memory import profiled

MARKER = "attnbench.call"
# calls profiled: PROFILED_S of them, within [MIN_CALLS, MAX_CALLS]: one call of a slow case names its kernels and
# their shares as well as three (its launch overhead is nil), and more of a microsecond one average the launches.
# The profile was 16% of a default run's time on a 2-core Xeon at (3, 20, 0.05 s), a third of it torch building
# its events: more than the claims' deciding got.
MIN_CALLS, MAX_CALLS = 1, 20
PROFILED_S = 0.02
TOP_KERNELS = 5  # rows kept in a record: a handful, so results files stay small
NAME_CHARS = 160  # CUDA kernel names are long C++ templates; their head names them

# The op each SDPA kernel runs as (forward); the profiler shows it on CPU and CUDA alike.
SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
}


@dataclass(frozen=True)
class KernelRow:
    name: str
    calls: float  # launches (or op calls) per profiled call
    seconds_per_call: float  # its own time in a call, median over the profiled calls (self time; a kernel's duration)
    total_seconds_per_call: float  # CPU: with the ops it called; CUDA: the same as seconds_per_call


@dataclass(frozen=True)
class KernelProfile:
    samples: list[float]  # kernel (op) seconds of each profiled call
    wall_s: list[float]  # the host's seconds of each profiled call, profiler included
    rows: list[KernelRow]  # every kernel or op, biggest own time first
    sdpa_kernel: str | None  # flash | efficient | cudnn | math | ... when an SDPA op ran, else None
    device: str

    def top(self, n: int = TOP_KERNELS) -> list[dict]:
        return [{"name": r.name[:NAME_CHARS], "calls": r.calls, "seconds_per_call": r.seconds_per_call}
                for r in self.rows[:n]]


def calls_to_profile(one_call_s: float) -> int:
    return max(MIN_CALLS, min(MAX_CALLS, math.ceil(PROFILED_S / max(one_call_s, 1e-9))))


def sdpa_choice(op_names: set[str]) -> str | None:
    """Which SDPA kernel ran, from the ops' names: forward ops only (backward ops name the same kernel)."""
    chosen = sorted({kind for name, kind in SDPA_OPS.items() if name in op_names})
    return "+".join(chosen) if chosen else None


def _is_device(event: object) -> bool:
    return getattr(event, "device_type", None) not in (None, torch.autograd.DeviceType.CPU)


def profile_calls(fn: Callable[[], object], device: str, calls: int, trace: Path | None = None) -> KernelProfile:
    """Profile `calls` calls of fn (already warmed up); trace: also write the Chrome / Perfetto trace there."""
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    sync()
    with profiled(device) as prof:
        for _ in range(calls):
            with record_function(MARKER):
                fn()
            sync()
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    return summarize_events(list(prof.function_events), device)


def summarize_events(events: list, device: str) -> KernelProfile:
    """Per-call kernel time, the kernel table and SDPA's choice from the profiler's events (FunctionEvent)."""
    markers = sorted((e for e in events if e.name == MARKER and not _is_device(e)), key=lambda e: e.time_range.start)
    if not markers:
        raise RuntimeError("the profiler recorded no call markers")
    starts = [m.time_range.start for m in markers] + [math.inf]
    per_call = [0.0] * len(markers)
    n = len(markers)
    own: dict[str, list[float]] = defaultdict(lambda: [0.0] * n)  # per name, per call
    total: dict[str, list[float]] = defaultdict(lambda: [0.0] * n)
    count: dict[str, int] = defaultdict(int)
    op_names: set[str] = set()
    for e in events:
        if e.name == MARKER or getattr(e, "is_user_annotation", False) or getattr(e, "is_async", False):
            continue
        on_device = _is_device(e)
        if not on_device:
            op_names.add(e.name)
        if on_device != (device == "cuda"):
            continue  # on CUDA the kernels count, not the host's runtime calls; on CPU the ops
        i = _call_of(starts, e.time_range.start)
        if i is None:
            continue
        seconds = (e.time_range.end - e.time_range.start) / 1e6 if on_device else e.self_cpu_time_total / 1e6
        per_call[i] += seconds
        own[e.name][i] += seconds
        total[e.name][i] += seconds if on_device else e.cpu_time_total / 1e6
        count[e.name] += 1
    # the median over the calls, as for every timing: one preempted call must not reorder the table
    rows = sorted((KernelRow(name, count[name] / n, statistics.median(own[name]), statistics.median(total[name]))
                   for name in own),
                  key=lambda r: -r.seconds_per_call)
    wall = [(m.time_range.end - m.time_range.start) / 1e6 for m in markers]
    return KernelProfile(per_call, wall, rows, sdpa_choice(op_names), device)


def _call_of(starts: list[float], t: float) -> int | None:
    """Index of the call whose window [starts[i], starts[i+1]) holds time t (starts ends with inf)."""
    i = bisect.bisect_right(starts, t) - 1
    return i if 0 <= i < len(starts) - 1 else None
