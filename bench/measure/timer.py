"""Timers. Each returns per-call seconds for every round; rounds are added until the median is known to
the target precision or the case's time budget runs out (then the case is marked noisy).

CPU: time.perf_counter around `calls` calls, so that a round lasts at least MIN_ROUND_S.
CUDA: device time from CUDA events around `calls` calls; between rounds the L2 cache is flushed by
writing a buffer larger than L2, outside the timed region.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.measure.stats import summarize

MIN_ROUND_S = 2e-3  # rounds shorter than this are dominated by timer and launch overhead
MIN_ROUNDS = 7
MAX_ROUNDS = 1000


@dataclass(frozen=True)
class Timing:
    samples: list[float]  # seconds per call, one per round
    calls_per_round: int
    noisy: bool  # the budget ran out before the CI reached the target
    timer: str


def _calls_per_round(one_call_s: float) -> int:
    return max(1, min(1000, round(MIN_ROUND_S / max(one_call_s, 1e-9))))


def _adaptive(measure_round: Callable[[int], float], one_call_s: float, budget_s: float, target: float,
              timer: str) -> Timing:
    calls = _calls_per_round(one_call_s)
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < MAX_ROUNDS:
        samples.append(measure_round(calls) / calls)
        if len(samples) < MIN_ROUNDS:
            continue
        if summarize(samples).rel_ci_half_width <= target:
            return Timing(samples, calls, False, timer)
        if time.perf_counter() - start > budget_s:
            break
    return Timing(samples, calls, summarize(samples).rel_ci_half_width > target, timer)


def time_cpu(fn: Callable[[], object], one_call_s: float, budget_s: float = 2.0, target: float = 0.03) -> Timing:
    def measure_round(calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0

    return _adaptive(measure_round, one_call_s, budget_s, target, "perf_counter")


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    """A buffer twice the L2 size; writing it evicts the inputs from L2."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20) or 64 << 20
    return torch.empty(2 * l2, dtype=torch.uint8, device=device)


def time_cuda(fn: Callable[[], object], one_call_s: float, budget_s: float = 2.0, target: float = 0.03) -> Timing:
    flush = l2_flush_buffer(torch.device("cuda"))
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def measure_round(calls: int) -> float:
        flush.zero_()  # not timed: the events are recorded after it
        begin.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    timing = _adaptive(measure_round, one_call_s, budget_s, target, "cuda_events")
    label = "cuda_events+l2_flush" + (f", {timing.calls_per_round} calls/round" if timing.calls_per_round > 1 else "")
    return Timing(timing.samples, timing.calls_per_round, timing.noisy, label)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(fn: Callable[[], object], device: str, budget_s: float) -> tuple[float, Timing]:
    """Warm-up call (its seconds returned apart: compiles, plans), one call to size the rounds, then the timer."""
    t0 = time.perf_counter()
    fn()
    sync(device)
    first_call_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn()
    sync(device)
    timer = time_cuda if device == "cuda" else time_cpu
    return first_call_s, timer(fn, time.perf_counter() - t0, budget_s=budget_s)
