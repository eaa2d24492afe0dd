"""Timers, one per timing mode. Each returns per-call seconds for every round; rounds are added until the median
is known to the target precision or the mode's time budget runs out (then the timing is marked noisy).

- warm (CPU and CUDA): back-to-back calls in a round, so that a round lasts at least MIN_ROUND_S; the caches hold
  what the previous call left. CPU: time.perf_counter around the round; CUDA: CUDA events around it.
- cold (CUDA): the L2 cache flushed (a buffer twice its size written) before every call, one event pair per
  call, as triton's do_bench does. The flush is enqueued just before the call's events and keeps the GPU busy
  while the host launches the call, so the launch itself is hidden, as in a real model's stream of kernels.
- graph (CUDA): the warm round's calls captured once in a CUDA graph and replayed: no launch overhead at all.
The kernel mode (torch.profiler) is bench.measure.kernels; bench.measure.modes runs them all for a case.

A ThrottleGuard, when given, is asked after every round whether the GPU was throttled (bench.measure.nvml):
such a round is dropped and, after one cool-down, retried; rounds still throttled after it are kept and the
timing says `throttled`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.measure.stats import summarize

MIN_ROUND_S = 2e-3  # rounds shorter than this are dominated by timer and launch overhead
MIN_ROUNDS = 7
# A round longer than the budget / MIN_ROUNDS is not repeated seven times (a 60 s bf16 GEMM on a CPU without bf16
# units would take 7 minutes): it gets as many as fit in the budget, never fewer than this; noisy when the CI is wide.
LONG_CALL_MIN_ROUNDS = 3
MAX_ROUNDS = 1000
COOL_DOWN_S = 2.0  # an idle pause after a throttled round: long enough for clocks to recover from a power cap


@dataclass(frozen=True)
class Timing:
    samples: list[float]  # seconds per call, one per round
    calls_per_round: int
    noisy: bool  # the budget ran out before the CI reached the target
    timer: str
    mode: str = "warm"
    throttled: bool = False  # some kept rounds ran while the GPU was throttled, even after a cool-down
    dropped_rounds: int = 0  # rounds dropped because the GPU was throttled


class ThrottleGuard:
    """Decides, after each round, whether to keep it: a throttled round is dropped and the GPU left idle for one
    cool-down; a throttled round after that is kept (the case cannot wait forever) and marks the case."""

    def __init__(self, throttled: Callable[[], bool], cool_down_s: float = COOL_DOWN_S,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.is_throttled = throttled
        self.cool_down_s = cool_down_s
        self.sleep = sleep
        self.cooled = False
        self.throttled = False
        self.dropped = 0

    def keep(self) -> bool:
        if not self.is_throttled():
            return True
        if not self.cooled:
            self.dropped += 1
            self.cooled = True
            self.sleep(self.cool_down_s)
            return False
        self.throttled = True
        return True


def _calls_per_round(one_call_s: float) -> int:
    return max(1, min(1000, round(MIN_ROUND_S / max(one_call_s, 1e-9))))


def min_rounds(round_s: float, case_budget_s: float) -> int:
    """MIN_ROUNDS, or fewer (at least LONG_CALL_MIN_ROUNDS) when that many rounds would overrun the budget."""
    if round_s * MIN_ROUNDS <= case_budget_s:
        return MIN_ROUNDS
    return max(LONG_CALL_MIN_ROUNDS, int(case_budget_s / max(round_s, 1e-12)))


def _adaptive(measure_round: Callable[[int], float], one_call_s: float, case_budget_s: float, target: float,
              timer: str, calls: int | None = None, guard: ThrottleGuard | None = None,
              mode: str = "warm", least_rounds: int | None = None,
              between: Callable[[], None] | None = None) -> Timing:
    """Rounds until the CI reaches the target or the budget runs out; `between`, when given, runs after every
    round, outside its timing (bench.measure.control's probe)."""
    calls = calls or _calls_per_round(one_call_s)
    samples: list[float] = []
    start = time.perf_counter()
    noisy = True
    least = MIN_ROUNDS
    while len(samples) < MAX_ROUNDS:
        seconds = measure_round(calls) / calls
        if between is not None:
            between()
        if not samples:  # how long a round is: long ones get fewer rounds. The warm-up's call time when there
            # is one, so that one slow first round (a busy machine's hiccup) cannot cut a short call's rounds
            round_s = seconds * calls if one_call_s <= 0 else min(seconds * calls, one_call_s * calls)
            least = min(least_rounds, min_rounds(round_s, case_budget_s)) if least_rounds else \
                min_rounds(round_s, case_budget_s)
        if guard is None or guard.keep():
            samples.append(seconds)
        if len(samples) >= least and summarize(samples).rel_ci_half_width <= target:
            noisy = False
            break
        if len(samples) >= least and time.perf_counter() - start > case_budget_s:
            break
    if noisy and len(samples) >= least:
        noisy = summarize(samples).rel_ci_half_width > target
    return Timing(samples, calls, noisy, timer, mode, bool(guard and guard.throttled),
                  guard.dropped if guard else 0)


def time_cpu(fn: Callable[[], object], one_call_s: float, case_budget_s: float = 2.0, target: float = 0.03,
             mode: str = "warm", least_rounds: int | None = None, between: Callable[[], None] | None = None
             ) -> Timing:
    """Back-to-back calls per round; `mode` names what the call reads: "cold" for a call rotating its cold inputs
    (bench.measure.rotation); least_rounds: fewer rounds than MIN_ROUNDS may do (a secondary mode); between: run
    after each round, untimed (the local control's probe)."""
    def measure_round(calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0

    timer = "perf_counter, cold inputs rotated" if mode == "cold" else "perf_counter"
    return _adaptive(measure_round, one_call_s, case_budget_s, target, timer, mode=mode, least_rounds=least_rounds,
                     between=between)


L2_FLUSH_MULTIPLE = 2  # the flush buffer over the L2: writing twice its size leaves nothing of the call's inputs


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    """A buffer L2_FLUSH_MULTIPLE times the L2's size; writing it evicts the inputs from L2."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20) or 64 << 20
    return torch.empty(L2_FLUSH_MULTIPLE * l2, dtype=torch.uint8, device=device)


def _events() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def _elapsed_s(begin: torch.cuda.Event, end: torch.cuda.Event) -> float:
    end.synchronize()
    return begin.elapsed_time(end) / 1e3


def time_warm_cuda(fn: Callable[[], object], one_call_s: float, case_budget_s: float = 2.0, target: float = 0.03,
                   guard: ThrottleGuard | None = None) -> Timing:
    begin, end = _events()

    def measure_round(calls: int) -> float:
        begin.record()
        for _ in range(calls):
            fn()
        # device-wide, before the end event: work a kernel put on another stream is counted (a round lasts at least
        # MIN_ROUND_S, so the synchronize's few microseconds are under 1% of it)
        torch.cuda.synchronize()
        end.record()
        return _elapsed_s(begin, end)

    timing = _adaptive(measure_round, one_call_s, case_budget_s, target, "", guard=guard)
    label = f"cuda_events, {timing.calls_per_round} calls/round back to back"
    return Timing(timing.samples, timing.calls_per_round, timing.noisy, label, "warm", timing.throttled,
                  timing.dropped_rounds)


def time_cold(fn: Callable[[], object], case_budget_s: float = 2.0, target: float = 0.03,
              guard: ThrottleGuard | None = None) -> Timing:
    flush = l2_flush_buffer(torch.device("cuda"))
    begin, end = _events()

    def measure_call(_: int) -> float:
        flush.zero_()  # not timed: the events are recorded after it, on the same stream
        begin.record()
        fn()
        end.record()
        seconds = _elapsed_s(begin, end)
        # every round ends device-wide: work a kernel left on another stream cannot run into the next call's events.
        # It is not in this call's time (a synchronize before `end` would add its own latency to every call); the
        # warm mode, which does count it, then sits far above cold, and the record shows both.
        torch.cuda.synchronize()
        return seconds

    return _adaptive(measure_call, 0.0, case_budget_s, target, "cuda_events+l2_flush per call", calls=1, guard=guard,
                     mode="cold")


def time_graph(fn: Callable[[], object], one_call_s: float, case_budget_s: float = 2.0, target: float = 0.03,
               guard: ThrottleGuard | None = None, least_calls: int = 1) -> Timing:
    """Raises whatever capture raises (a call that synchronises, or allocates outside the graph's pool).
    least_calls: a rotating call's copies, so that one replay goes once round them all."""
    calls = max(_calls_per_round(one_call_s), least_calls)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture wants the call warmed up on a side stream first
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    begin, end = _events()

    def replay(_: int) -> float:
        begin.record()
        graph.replay()
        torch.cuda.synchronize()  # device-wide, as the warm round (a graph replays calls for >= MIN_ROUND_S)
        end.record()
        return _elapsed_s(begin, end)

    return _adaptive(replay, one_call_s, case_budget_s, target, f"cuda_graph replay, {calls} calls/graph", calls=calls,
                     guard=guard, mode="graph")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def warm_up(fn: Callable[[], object], device: str) -> tuple[float, float]:
    """The first call (compiles, plans; its seconds returned apart) and a second one that sizes the rounds."""
    t0 = time.perf_counter()
    fn()
    sync(device)
    first_call_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn()
    sync(device)
    return first_call_s, time.perf_counter() - t0


def measure(fn: Callable[[], object], device: str, case_budget_s: float) -> tuple[float, Timing]:
    """Warm-up, then one mode alone: warm on CPU, cold on CUDA (a ceiling's buffers, which rotate nothing)."""
    first_call_s, one_call_s = warm_up(fn, device)
    if device == "cuda":
        return first_call_s, time_cold(fn, case_budget_s=case_budget_s)
    return first_call_s, time_cpu(fn, one_call_s, case_budget_s=case_budget_s)
