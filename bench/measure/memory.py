"""Peak memory of one call above what was allocated before it: measured, never computed.

CUDA: torch's allocator statistics (max_memory_allocated, peaks reset per case).
CPU: the profiler's allocation events, whose 'Total Allocated' is the running total of torch's CPU
allocations; the peak of that series above its starting level is the call's peak.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch


def peak_cuda(fn: Callable[[], object]) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


@contextmanager
def quiet_profiler() -> Iterator[None]:
    """The CPU profiler prints a line on every start and stop to fd 2 (torch 2.13's Kineto, whatever
    KINETO_LOG_LEVEL says): silence that fd while it runs, so a sweep's terminal keeps only our lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def profiled(device: str = "cpu", memory: bool = False) -> Iterator[torch.autograd.profiler.profile]:
    """The Kineto profiler (CPU ops, and CUDA kernels through CUPTI on "cuda"), quiet; its events are
    `.function_events` once the block ends. torch.autograd.profiler.profile, what torch.profiler.profile wraps:
    the wrapper's start asks hasattr(torch, "_inductor"), which imports torch._dynamo (2 s) in every process."""
    with quiet_profiler(), torch.autograd.profiler.profile(use_kineto=True, use_cpu=True, profile_memory=memory,
                                                           use_device="cuda" if device == "cuda" else None) as prof:
        yield prof


def peak_cpu(fn: Callable[[], object]) -> int:
    with profiled(memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(trace)
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
    cpu = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0]
    if not cpu:
        return 0
    start = cpu[0]["Total Allocated"] - cpu[0]["Bytes"]
    return max(0, max(a["Total Allocated"] for a in cpu) - start)


def peak_bytes(fn: Callable[[], object], device: str) -> int:
    return peak_cuda(fn) if device == "cuda" else peak_cpu(fn)


def available_cpu_bytes() -> int | None:
    """MemAvailable from /proc/meminfo: what the kernel can give without swapping (None off Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cuda_memory_snapshot(fn: Callable[[], object], path: str) -> None:
    """One call with the CUDA allocator's history on, dumped for https://pytorch.org/memory_viz. The one place
    that uses these underscored torch.cuda.memory functions (documented there, but still marked private)."""
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        fn()
        torch.cuda.synchronize()
        torch.cuda.memory._dump_snapshot(path)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
