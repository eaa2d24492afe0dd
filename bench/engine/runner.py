"""One case, start to end: support and correctness check, warm-up, timing, memory -> one record.

Every case ends in exactly one status: ok | unsupported | oom | error | incorrect. Nothing here raises
for a backend's failure; a broken backend becomes a record, so one backend cannot kill a sweep.

What differs between the kinds of case (their check, their timed call, their record's formula fields) is their
kind's (bench.kinds.kind_of): this module runs every kind through one path.
"""

from __future__ import annotations

import gc
import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from bench.backends import Unsupported, get_backend
from bench.backends.base import Deferred
from bench.engine import interrupt
from bench.engine.outcome import Outcome
from bench.engine.sweeps import Case
from bench.kinds import EXACT_CHECK_ELEMENTS, ReferenceCache, check_shape, kind_of
from bench.kinds.guards import implausible
from bench.measure.caches import CacheSize, cache_of
from bench.measure.cold import ColdPlan
from bench.measure.environment import gpu_reading
from bench.measure.memory import available_cpu_bytes, peak_bytes
from bench.measure.modes import CaseTiming, time_case, time_headline
from bench.measure.nvml import Gpu
from bench.measure.rotation import Rotating
from bench.measure.spec_sheets import spec_sheet
from bench.measure.stats import summarize
from bench.measure.timer import warm_up
from bench.results.meta import Calibration
from bench.results.record import Record, new_record, timed, with_modes

# the engine session, `bench ab` workers and tests read these here
__all__ = ["EXACT_CHECK_ELEMENTS", "Outcome", "ReferenceCache", "Runner", "check_shape"]


SLICED_KEPT = 8  # cases whose built call a worker keeps for their next slice: a block's pairs
# cases whose cold copies stay filled between their slices: a block's pair, so ABBA fills each side once, not twice
# (a fill copies past 3 x the L2 + L3: 0.1-0.4 s on a 260 MiB L3, as long as a slice's timing) ...
FILLED_KEPT = 2
# ... while the memory free is at least this many times a rotation's target; below it, only the case being sliced
FILLED_HEADROOM = 4


def _hold(fn: Callable[[], object]) -> None:
    """A kept call's cold copies freed (bench.measure.rotation.Rotating.hold), if it has any."""
    if isinstance(fn, Rotating):
        fn.hold()


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "can't allocate memory" in str(err) or \
        "out of memory" in str(err).lower()


def _free(device: str, failed: bool) -> None:
    """Give memory back between cases. Tensors go with their last reference; only a failure's traceback holds
    them in cycles, so a full (100+ ms) collection runs only then."""
    if failed:
        gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


MAX_NAME = 200  # of a --trace file's name before its suffix: file systems stop at 255 bytes

class Runner:
    def __init__(self, calibration: Calibration, gpu_name: str | None = None,
                 case_budget_s: float = 1.0, trace_dir: Path | None = None, cold: ColdPlan | None = None) -> None:
        self.calibration = calibration
        self.case_budget_s = case_budget_s
        self.cold = cold or ColdPlan()  # how a case's cold inputs rotate (bench.measure.rotation)
        self.caches: dict[str, CacheSize] = {}  # by device: read once
        self.sheet = spec_sheet(gpu_name)
        self.sheet_flops = self.sheet.flops_per_s if self.sheet else None
        self.trace_dir = trace_dir
        self.keep_last = False
        self.last: tuple[Callable[[], object], CaseTiming] | None = None
        self.references = ReferenceCache()
        self.sliced: dict[str, tuple[Callable[[], object], float]] = {}  # case id -> (its call, one call's seconds)
        self.filled: list[str] = []  # sliced cases whose cold copies are filled, the last sliced last

    def run(self, case: Case) -> Outcome:
        record = new_record(case, get_backend(case.backend).memory)
        found: dict[str, Any] = {}  # what the case measured before it ended, kept whatever its end
        try:
            outcome = self._run(case, record, found)
        except Unsupported as err:
            outcome = Outcome(replace(record, **found, status="unsupported", reason=str(err)))
        except Exception as err:
            status = "oom" if _is_oom(err) else "error"
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            outcome = Outcome(replace(record, **found, status=status, reason=f"{type(err).__name__}: {first}"[:500]))
        try:
            _free(case.device, failed=outcome.record.status != "ok")
        except Exception as err:  # e.g. a CUDA context broken by the kernel: keep this case's record all the same
            why = f"cleanup failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            outcome.record = replace(outcome.record, reason=f"{outcome.record.reason}; {why}".lstrip("; "))
        return outcome

    def _predicted_oom(self, case: Case) -> str | None:
        if case.device != "cpu":
            return None
        forward = kind_of(case.shape).predicted_bytes(case, get_backend(case.backend))
        need = forward * (4 if case.pass_ != "fwd" else 1)  # backward keeps more alive; a rough bound
        available = available_cpu_bytes()
        if available and need > 0.7 * available:
            return f"predicted: needs ~{need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available; not run"
        return None

    def _run(self, case: Case, record: Record, found: dict[str, Any]) -> Outcome:
        """`found` collects the measured fields as they come; the record is built from them once, at the end."""
        shape, device = case.shape, case.device
        if why := self._predicted_oom(case):
            return Outcome(replace(record, status="oom", reason=why))
        if why := get_backend(case.backend).pass_reason(case.pass_):
            raise Unsupported(why)
        kind = kind_of(shape)
        started = time.perf_counter()
        setup = kind.setup(case)  # what the check and the timed call share (weights, a backend)
        built_s = time.perf_counter() - started
        interrupt.stage("check")
        check, check_call_s = kind.check(case, setup, self.references)
        found["max_abs_err"] = check.max_abs_err
        if not check.ok:
            return Outcome(replace(record, **found, status="incorrect", reason=check.describe()))
        if case.pass_ == "fwd+bwd":
            grads = kind.gradients(case, setup)
            if not grads.ok:
                reason = f"gradients: max relative error {grads.max_abs_err:.3g} > {grads.atol:g}"
                return Outcome(replace(record, **found, status="incorrect", reason=reason))

        if device == "cuda":  # throttling during the case shows as clock-event reasons and lower clocks after it
            found["gpu_before"] = gpu_reading(torch.cuda.current_device())
        started = time.perf_counter()
        fn = kind.timed_call(case, setup)
        found["setup_s"] = built_s + time.perf_counter() - started  # with_modes adds the cold copies' fill
        # every timing mode (bench.measure.modes); the warm-up compiles flex, builds plans
        gpu = Gpu.open(torch.cuda.current_device()) if device == "cuda" else None
        interrupt.stage("time")
        case_timing = time_case(fn, device, self.case_budget_s, gpu, self.trace_path(case), self.cold,
                                self.cache(device))
        warm_up_s, timing = case_timing.first_call_s, case_timing.headline
        # The first call of this backend on this shape: the check's, when it ran the case's own shape forward.
        exact_fwd = kind.check_shape(shape) == shape and case.pass_ == "fwd"
        found["first_call_s"] = check_call_s if exact_fwd else warm_up_s
        found["peak_mem_bytes"] = peak_bytes(fn, device)
        if device == "cuda":
            found["gpu_after"] = gpu_reading(torch.cuda.current_device())
        record = timed(replace(record, **found), summarize(timing.samples), timing, self.calibration, self.sheet_flops)
        record = with_modes(record, case_timing, self.sheet.bytes_per_s if self.sheet else None)
        # a kernel cannot fool the timer (bench.kinds.guards): inputs untouched, last output right, time possible
        guard = getattr(fn, "guard", None)
        floor = implausible(record.median_s, record.flops, record.bytes, case.shape.dtype, self.calibration)
        if why := (guard.verdict() if guard is not None else None) or floor:
            return Outcome(replace(record, status="incorrect", reason=why))  # no samples: an untimed entry
        if after := getattr(fn, "after", None):  # what the kind times apart (an indexer) and derives
            record = replace(record, **after(self.case_budget_s, record.median_s))
        if builds := get_backend(case.backend).mask_build:  # what its library builds once per forward (a mask)
            seconds = Deferred(builds).resolved(case.backend, shape, device, self.case_budget_s / 4)
            record = replace(record, mask_build_s=seconds)
        if self.keep_last:  # `bench profile` reads the whole kernel table and re-runs the call for a memory snapshot
            self.last = (fn, case_timing)
        return Outcome(record, timing.samples)

    def slice(self, case: Case, check: bool = True) -> float:
        """One slice of an interleaved block (bench.engine.decide): the headline mode's median alone. The case's
        call is built, checked against float64 (unless `check` is False: its caller has seen this case pass that
        check in this run) and warmed up at its first slice in this process, and kept for its next (a block's ABBA
        runs each case twice); a failed check raises ValueError."""
        if case.id not in self.sliced:
            if len(self.sliced) >= SLICED_KEPT:
                _hold(self.sliced.pop(next(iter(self.sliced)))[0])
            kind = kind_of(case.shape)
            setup = kind.setup(case)
            if check:
                checked, _ = kind.check(case, setup, self.references)
                if not checked.ok:
                    raise ValueError(checked.describe())
            fn = kind.timed_call(case, setup)
            self.sliced[case.id] = (fn, warm_up(fn, case.device)[1])
        fn, one_call_s = self.sliced[case.id]
        self._keep_filled(case)
        return time_headline(fn, case.device, one_call_s, self.case_budget_s, self.cold, self.cache(case.device),
                             keep=True)

    def _keep_filled(self, case: Case) -> None:
        """Before a slice: the cold copies of the FILLED_KEPT - 1 cases sliced last stay filled, beside this one's
        (none when memory is short: a fill made beside them must not come out partly warm); every other's are freed."""
        self.filled = [c for c in self.filled if c != case.id and c in self.sliced]
        fn = self.sliced[case.id][0]
        roomy = case.device != "cpu" or (available_cpu_bytes() or 0) >= (
            FILLED_HEADROOM * self.cold.multiple * self.cache(case.device).bytes)
        keep = self.filled[len(self.filled) - (FILLED_KEPT - 1):] if roomy or getattr(fn, "filled", False) else []
        for old in self.filled:
            if old not in keep:
                _hold(self.sliced[old][0])
        self.filled = [*keep, case.id]

    def cache(self, device: str) -> CacheSize:
        if device not in self.caches:
            self.caches[device] = cache_of(device)
        return self.caches[device]

    def trace_path(self, case: Case) -> Path | None:
        """--trace DIR: the kernel mode's profiler trace of this case, one file per case id (a long id, as one with
        explicit rows, is cut and ends in a hash of the whole: file names stop at 255 bytes)."""
        if self.trace_dir is None:
            return None
        name = re.sub(r"[^A-Za-z0-9.=_-]+", "_", case.id)
        if len(name) > MAX_NAME:
            name = name[:MAX_NAME - 17] + "-" + hashlib.sha256(case.id.encode()).hexdigest()[:16]
        return self.trace_dir / (name + ".trace.json")
