"""Every timing mode of one case, side by side, and the headline taken from one of them.

Headline mode: cold wherever the case has one, warm on a CPU case without.
- CPU cold: a case whose kind hands its call's cold inputs apart (a bench.measure.rotation.Rotating call: a decode
  step's KV cache, a paged pool, a shared prefix, a latent cache, a recurrent state) is timed over copies of them
  whose total exceeds the CPU's caches several times, as a model's layer meets them; warm is timed beside. A CPU
  case without cold inputs (a prefill, whose Q, K and V a layer has just computed) is timed warm only.
- CUDA cold: the L2 flushed before every call, one event pair per call (the measurement triton's do_bench, and so
  the published FlashAttention figures, use), which a warm L2 cannot flatter and whose launch is hidden behind the
  flush; a Rotating call rotates its cold inputs beside it, and in the graph mode (whose captured calls cannot be
  flushed between) the rotation is what keeps them cold.
The other modes are recorded beside it (`timings`), on a smaller budget (SECONDARY_BUDGET of the case's).
CPU: between the headline's rounds, untimed, bench.measure.control's probe times the machine itself (control_flops)
and, for a cold case, a read from its copies (control_read): the regression check's local control.

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

from bench.measure.caches import CacheSize, cache_of
from bench.measure.cold import ColdPlan, Rotation
from bench.measure.control import Probe
from bench.measure.kernels import KernelProfile, calls_to_profile, profile_calls
from bench.measure.nvml import Gpu
from bench.measure.rotation import Rotating
from bench.measure.stats import summarize
from bench.measure.timer import (
    LONG_CALL_MIN_ROUNDS,
    MIN_ROUNDS,
    ThrottleGuard,
    Timing,
    time_cold,
    time_cpu,
    time_graph,
    time_warm_cuda,
    warm_up,
)

LAUNCH_BOUND_RATIO = 2.0
SECONDARY_BUDGET = 0.5
# the warm mode beside a CPU cold headline: a secondary figure (what a warm cache would flatter), on a quarter of the
# case's budget and as few as LONG_CALL_MIN_ROUNDS rounds, so that timing a decode step cold costs little more
WARM_BESIDE_BUDGET = 0.25
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
    rotation: Rotation | None = None  # how the cold inputs were rotated, where the case has any
    control_flops: float | None = None  # CPU: the probe's speed between the headline's rounds (bench.measure.control)
    control_read: float | None = None  # CPU cold: the memory probe's bytes/s beside them (bench.measure.control)

    @property
    def headline_mode(self) -> str:
        return "cold" if "cold" in self.modes else "warm"

    @property
    def headline(self) -> Timing:
        return self.modes[self.headline_mode]

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


def rotate(fn: Callable[[], object], device: str, cold: ColdPlan, cache: CacheSize | None = None
           ) -> Rotation | None:
    """Fill a Rotating call's copies for the plan (None: no cold inputs, or the plan turns rotation off)."""
    if not isinstance(fn, Rotating) or cold.multiple <= 0:
        return None
    return fn.fill((cache or cache_of(device)).bytes, cold)


def time_case(fn: Callable[[], object], device: str, case_budget_s: float, gpu: Gpu | None = None,
              trace: Path | None = None, cold: ColdPlan | None = None, cache: CacheSize | None = None) -> CaseTiming:
    """Warm-up, every mode of the device, the kernel profile (and its trace file when asked)."""
    first_call_s, one_call_s = warm_up(fn, device)
    notes: list[str] = []
    energy = None
    rotation = rotate(fn, device, cold or ColdPlan(), cache)
    held = fn.hold if isinstance(fn, Rotating) else (lambda: None)
    # a CPU's headline rounds are interleaved with the local control; a cold case's also reads its own copies
    probe = None if device == "cuda" else Probe(fn.read_far if rotation is not None else None)
    if rotation is not None and rotation.partly_warm:
        notes.append(rotation.partly_warm)
    if device == "cuda":
        modes = {"cold": time_cold(fn, case_budget_s, TARGET, guard=_guard(gpu))}
        try:  # rotating copies: each replay's captured calls read other copies, the cold the flush cannot give
            modes["graph"] = time_graph(fn, one_call_s, case_budget_s * SECONDARY_BUDGET, TARGET, guard=_guard(gpu),
                                        least_calls=rotation.copies if rotation else 1)
        except Exception as err:  # a call that cannot be captured (it synchronises, or allocates on the host)
            notes.append(f"graph mode: capture failed: {_first_line(err)}")
            _recover()
        held()
        modes["warm"] = time_warm_cuda(fn, one_call_s, case_budget_s * SECONDARY_BUDGET, TARGET, guard=_guard(gpu))
        energy = measure_energy(fn, gpu, modes["warm"].calls_per_round)
    elif rotation is not None:
        modes = {"cold": time_cpu(fn, one_call_s, case_budget_s, TARGET, mode="cold", between=probe)}
        held()  # the originals from here on: warm, and the kernel profile, memory and guard read them
        modes["warm"] = time_cpu(fn, one_call_s, case_budget_s * WARM_BESIDE_BUDGET, TARGET,
                                 least_rounds=LONG_CALL_MIN_ROUNDS)
    else:
        modes = {"warm": time_cpu(fn, one_call_s, case_budget_s, TARGET, between=probe)}
    kernel = None
    try:
        # sized by the warm median: the single sizing call may have been preempted
        kernel = profile_calls(fn, device, calls_to_profile(summarize(modes["warm"].samples).median), trace)
        modes["kernel"] = kernel_timing(kernel)
    except Exception as err:
        notes.append(f"kernel mode: profiling failed: {_first_line(err)}")
    timing = CaseTiming(first_call_s, device, modes, kernel, energy, notes, rotation,
                        probe.flops_per_s() if probe else None, probe.read_bytes_per_s() if probe else None)
    if timing.modes_disagree():
        notes.append(f"kernel and warm modes disagree: kernel median {timing.median('kernel'):.3g} s > warm median "
                     f"{timing.median('warm'):.3g} s (load between them); overhead_pct left out")
    dropped = sum(t.dropped_rounds for t in modes.values())
    if dropped:
        notes.append(f"{dropped} round(s) dropped while the GPU was throttled, retried after a cool-down")
    return timing


def headline_samples(fn: Callable[[], object], device: str, one_call_s: float, case_budget_s: float,
                     cold: ColdPlan | None = None, cache: CacheSize | None = None, keep: bool = False) -> list[float]:
    """The headline mode alone, its per-round seconds: one slice of an interleaved block (bench.engine.decide) or of
    `bench ab`, whose case was warmed up and checked before. A Rotating call is rotated for it and held after, so
    the copies are freed before the next case's; keep: its copies stay filled for its next slice, and one already
    filled is not filled again (the caller holds them: bench.engine.runner keeps a block's pair)."""
    if not (keep and isinstance(fn, Rotating) and fn.filled):
        rotate(fn, device, cold or ColdPlan(), cache)
    try:
        if device == "cuda":
            return time_cold(fn, case_budget_s, TARGET).samples
        return time_cpu(fn, one_call_s, case_budget_s, TARGET).samples
    finally:
        if isinstance(fn, Rotating) and not keep:
            fn.hold()


def time_headline(fn: Callable[[], object], device: str, one_call_s: float, case_budget_s: float,
                  cold: ColdPlan | None = None, cache: CacheSize | None = None, keep: bool = False) -> float:
    """The median of headline_samples: what a record's median_s is."""
    return summarize(headline_samples(fn, device, one_call_s, case_budget_s, cold, cache, keep)).median


def _recover() -> None:
    """After a failed capture: let the stream finish what it had, so the next case starts clean."""
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()
