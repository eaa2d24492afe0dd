"""Every timing mode of one case, side by side, and the headline taken from one of them.

Headline mode per device (HEADLINE): CPU warm — a CPU call has no launch to hide and no cache the next call
would not also find warm, and it keeps runs comparable with earlier ones; CUDA cold — the L2 flushed before
every call, one event pair per call (the measurement triton's do_bench, and so the published FlashAttention
figures, use), which a warm L2 cannot flatter and whose launch is hidden behind the flush.
The other modes are recorded beside it (`timings`), on a smaller budget (SECONDARY_BUDGET of the case's).

kernel (CPU and CUDA): a few profiled calls (bench.measure.kernels); overhead_pct = 100 x (warm - kernel) / warm
is the share of a warm call spent outside the kernels (CPU: outside the aten ops), and a case is launch_bound
when warm >= LAUNCH_BOUND_RATIO x kernel, i.e. more than half of each call is launch, dispatch or Python.

Energy (CUDA, NVML's total-energy counter) is read around at least ENERGY_WINDOW_S of back-to-back calls, after
the warm rounds: only the calls run in it (the cold rounds also run the L2 flush, whose energy is not the
attention's), and it is long enough for the counter, which moves every ~10 ms, to resolve it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.measure.kernels import KernelProfile, calls_to_profile, profile_calls
from bench.measure.nvml import Gpu
from bench.measure.stats import summarize
from bench.measure.timer import (
    MIN_ROUNDS,
    ThrottleGuard,
    Timing,
    time_cold,
    time_cpu,
    time_graph,
    time_warm_cuda,
    warm_up,
)

HEADLINE = {"cpu": "warm", "cuda": "cold"}
LAUNCH_BOUND_RATIO = 2.0
SECONDARY_BUDGET = 0.5
ENERGY_WINDOW_S = 0.1  # NVML's energy counter moves every ~10 ms on recent GPUs: a window of ten updates or more
TARGET = 0.03  # the CI half-width every adaptive mode aims for, relative to the median


@dataclass
class CaseTiming:
    first_call_s: float
    device: str
    modes: dict[str, Timing]
    kernel: KernelProfile | None = None
    energy: dict[str, float] | None = None  # joules, calls, seconds over the warm rounds
    notes: list[str] = field(default_factory=list)  # a mode that could not run, and why

    @property
    def headline(self) -> Timing:
        return self.modes[HEADLINE[self.device]]

    def median(self, mode: str) -> float | None:
        timing = self.modes.get(mode)
        return summarize(timing.samples).median if timing and timing.samples else None

    def timings(self) -> dict[str, dict[str, Any]]:
        """The record's `timings`: {mode: {median_s, ci_low_s, ci_high_s, rounds, calls_per_round}}."""
        out = {}
        for mode, timing in self.modes.items():
            if timing.samples:
                s = summarize(timing.samples)
                out[mode] = {"median_s": s.median, "ci_low_s": s.ci_low, "ci_high_s": s.ci_high, "rounds": s.rounds,
                             "calls_per_round": timing.calls_per_round}
        return out

    def modes_disagree(self) -> bool:
        """The kernel median above the warm one: the kernels cannot take longer than the whole call, so load between
        the two modes moved one of them (on a busy 2-core machine kernel medians came out up to 5.6x the warm one)."""
        warm, kernel = self.median("warm"), self.median("kernel")
        return bool(warm and kernel is not None and kernel > warm)

    def overhead_pct(self) -> float | None:
        """None when the modes disagree: a negative share outside the kernels would be noise, not a finding."""
        warm, kernel = self.median("warm"), self.median("kernel")
        if self.modes_disagree():
            return None
        return 100 * (warm - kernel) / warm if warm and kernel is not None else None

    def launch_bound(self) -> bool | None:
        warm, kernel = self.median("warm"), self.median("kernel")
        if self.modes_disagree():
            return None
        return warm >= LAUNCH_BOUND_RATIO * kernel if warm and kernel else None

    @property
    def throttled(self) -> bool | None:
        if self.device != "cuda":
            return None
        return any(t.throttled for t in self.modes.values())


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"[:200]


def _guard(gpu: Gpu | None) -> ThrottleGuard | None:
    return ThrottleGuard(gpu.throttled) if gpu is not None else None


def measure_energy(fn: Callable[[], object], gpu: Gpu | None, chunk: int,
                   sync: Callable[[], None] = torch.cuda.synchronize) -> dict[str, float] | None:
    """Joules over ENERGY_WINDOW_S (at least) of back-to-back calls, in chunks of `chunk` calls; None without an
    energy counter or when it did not move."""
    if gpu is None or gpu.energy_mj() is None:
        return None
    sync()
    before, t0, calls = gpu.energy_mj(), time.perf_counter(), 0
    while True:
        for _ in range(chunk):
            fn()
        calls += chunk
        sync()
        if time.perf_counter() - t0 >= ENERGY_WINDOW_S:
            break
    seconds, after = time.perf_counter() - t0, gpu.energy_mj()
    if before is None or after is None or after <= before:
        return None
    return {"joules": (after - before) / 1e3, "calls": calls, "seconds": seconds}


def kernel_timing(profile: KernelProfile) -> Timing:
    noisy = len(profile.samples) < MIN_ROUNDS or summarize(profile.samples).rel_ci_half_width > TARGET
    what = "CUPTI kernel time" if profile.device == "cuda" else "aten ops' self time"
    return Timing(profile.samples, 1, noisy, f"torch.profiler, {what}", "kernel")


def time_case(fn: Callable[[], object], device: str, case_budget_s: float, gpu: Gpu | None = None,
              trace: Path | None = None) -> CaseTiming:
    """Warm-up, every mode of the device, the kernel profile (and its trace file when asked)."""
    first_call_s, one_call_s = warm_up(fn, device)
    notes: list[str] = []
    energy = None
    if device == "cuda":
        modes = {"cold": time_cold(fn, case_budget_s, TARGET, guard=_guard(gpu))}
        modes["warm"] = time_warm_cuda(fn, one_call_s, case_budget_s * SECONDARY_BUDGET, TARGET, guard=_guard(gpu))
        energy = measure_energy(fn, gpu, modes["warm"].calls_per_round)
        try:
            modes["graph"] = time_graph(fn, one_call_s, case_budget_s * SECONDARY_BUDGET, TARGET, guard=_guard(gpu))
        except Exception as err:  # a call that cannot be captured (it synchronises, or allocates on the host)
            notes.append(f"graph mode: capture failed: {_first_line(err)}")
            _recover()
    else:
        modes = {"warm": time_cpu(fn, one_call_s, case_budget_s, TARGET)}
    kernel = None
    try:
        # sized by the warm median: the single sizing call may have been preempted
        kernel = profile_calls(fn, device, calls_to_profile(summarize(modes["warm"].samples).median), trace)
        modes["kernel"] = kernel_timing(kernel)
    except Exception as err:
        notes.append(f"kernel mode: profiling failed: {_first_line(err)}")
    timing = CaseTiming(first_call_s, device, modes, kernel, energy, notes)
    if timing.modes_disagree():
        notes.append(f"kernel and warm modes disagree: kernel median {timing.median('kernel'):.3g} s > warm median "
                     f"{timing.median('warm'):.3g} s (load between them); overhead_pct left out")
    dropped = sum(t.dropped_rounds for t in modes.values())
    if dropped:
        notes.append(f"{dropped} round(s) dropped while the GPU was throttled, retried after a cool-down")
    return timing


def time_headline(fn: Callable[[], object], device: str, one_call_s: float, case_budget_s: float) -> float:
    """The headline mode alone, its median (what a record's median_s is): one slice of an interleaved block
    (bench.engine.decide), whose case was warmed up and checked before."""
    timing = time_cold(fn, case_budget_s, TARGET) if device == "cuda" else time_cpu(fn, one_call_s, case_budget_s,
                                                                                     TARGET)
    return summarize(timing.samples).median


def _recover() -> None:
    """After a failed capture: let the stream finish what it had, so the next case starts clean."""
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()
