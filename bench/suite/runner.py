"""One case, start to end: support and correctness check, warm-up, timing, memory -> one record.

Every case ends in exactly one status: ok | unsupported | oom | error | incorrect. Nothing here raises
for a backend's failure; a broken backend becomes a record, so one backend cannot kill a sweep.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from bench.backends import Unsupported, attention, get_backend
from bench.measure.calibrate import spec_flops
from bench.measure.environment import gpu_reading
from bench.measure.memory import available_cpu_bytes, peak_bytes
from bench.measure.stats import summarize
from bench.measure.timer import measure, sync
from bench.metrics import model_mem_bytes
from bench.record import new_record, timed
from bench.reference import TOLERANCES, Check, check_gradients, compare_to_reference, make_inputs, reference_attention
from bench.shapes import AttentionShape
from bench.suite.spec import Case

# Shapes up to this many score elements are checked as they are; larger ones on a shorter copy of the
# same case (same heads, dims, dtype, mask and offset semantics), since the float64 oracle is O(S^2).
EXACT_CHECK_ELEMENTS = 1 << 25


@dataclass
class Outcome:
    record: dict[str, Any]
    samples: list[float] = field(default_factory=list)


def check_shape(shape: AttentionShape) -> AttentionShape:
    """The shape the correctness check runs on: the case itself, or a shorter one with the same structure."""
    if shape.batch * shape.n_heads * shape.seq_q * shape.seq_kv <= EXACT_CHECK_ELEMENTS:
        return shape
    seq_q = min(shape.seq_q, 256)
    seq_kv = seq_q if shape.seq_q == shape.seq_kv else min(shape.seq_kv, 4096)
    window = shape.window
    if window is not None:
        # A window that really cuts the case's keys must cut the shorter ones too, or the check could not tell
        # it from plain causal; one as long as the context stays that long.
        window = min(window, seq_kv) if window >= shape.seq_kv else min(window, max(1, seq_kv // 2))
    # two sequences, so that batch strides are checked too
    return AttentionShape(min(shape.batch, 2), seq_q, seq_kv, shape.n_heads, shape.n_kv_heads, shape.head_dim,
                          shape.dtype, shape.mask, window)


class ReferenceCache:
    """The float64 reference of the last shape checked: consecutive backends on one shape share it."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._ref: torch.Tensor | None = None

    def get(self, shape: AttentionShape, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        key = (shape, str(q.device))
        if key != self._key:
            self._ref = None  # free the old one before building the next
            self._ref = reference_attention(q, k, v, causal=shape.causal, window=shape.window)
            self._key = key
        return self._ref


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


class Runner:
    def __init__(self, calibration: dict[str, float], gpu_name: str | None = None, budget_s: float = 1.0) -> None:
        self.calibration = calibration
        self.budget_s = budget_s
        self.spec_flops = spec_flops(gpu_name)
        self.references = ReferenceCache()

    def run(self, case: Case) -> Outcome:
        record = new_record(case, get_backend(case.backend).memory)
        try:
            outcome = self._run(case, record)
        except Unsupported as err:
            outcome = Outcome(dict(record, status="unsupported", reason=str(err)))
        except Exception as err:
            status = "oom" if _is_oom(err) else "error"
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            outcome = Outcome(dict(record, status=status, reason=f"{type(err).__name__}: {first}"[:500]))
        try:
            _free(case.device, failed=outcome.record["status"] != "ok")
        except Exception as err:  # e.g. a CUDA context broken by the kernel: keep this case's record all the same
            outcome.record["reason"] = (outcome.record["reason"] + f"; cleanup failed: {type(err).__name__}: "
                                        f"{str(err).splitlines()[0] if str(err) else ''}").lstrip("; ")
        return outcome

    def _predicted_oom(self, case: Case) -> str | None:
        if case.device != "cpu":
            return None
        forward = model_mem_bytes(case.shape, get_backend(case.backend).memory, "fwd") or 0
        need = forward * (4 if case.pass_ != "fwd" else 1)  # backward keeps more alive; a rough bound
        available = available_cpu_bytes()
        if available and need > 0.7 * available:
            return f"predicted: needs ~{need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available; not run"
        return None

    def _run(self, case: Case, record: dict[str, Any]) -> Outcome:
        shape, device = case.shape, case.device
        if why := self._predicted_oom(case):
            return Outcome(dict(record, status="oom", reason=why))
        check, check_call_s = self._check(case)
        record["max_abs_err"] = check.max_abs_err
        if not check.ok:
            return Outcome(dict(record, status="incorrect", reason=check.describe()))
        if case.pass_ == "fwd+bwd":
            grads = check_gradients(case.backend, check_shape(case.shape), case.device)
            if not grads.ok:
                reason = f"gradients: max relative error {grads.max_abs_err:.3g} > {grads.atol:g}"
                return Outcome(dict(record, status="incorrect", reason=reason))

        if device == "cuda":  # throttling during the case shows as clock-event reasons and lower clocks after it
            record["gpu_before"] = gpu_reading(torch.cuda.current_device())
        grad = case.pass_ == "fwd+bwd"
        q, k, v = make_inputs(shape, device, seed=1, requires_grad=grad)
        fn = self._callable(case, q, k, v)
        warm_up_s, timing = measure(fn, device, self.budget_s)  # the warm-up compiles flex, builds plans
        # The first call of this backend on this shape: the check's, when it ran the case's own shape forward.
        exact_fwd = check_shape(shape) == shape and case.pass_ == "fwd"
        record["first_call_s"] = check_call_s if exact_fwd else warm_up_s
        record["peak_mem_bytes"] = peak_bytes(fn, device)
        if device == "cuda":
            record["gpu_after"] = gpu_reading(torch.cuda.current_device())
        record = timed(record, summarize(timing.samples), timing, self.calibration, self.spec_flops)
        return Outcome(record, timing.samples)

    def _check(self, case: Case) -> tuple[Check, float]:
        """The forward check against the reference, and how long the backend's call took."""
        shape = check_shape(case.shape)
        q, k, v = make_inputs(shape, case.device, seed=0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = attention(q, k, v, backend=case.backend, causal=shape.causal, window=shape.window)
        sync(case.device)
        seconds = time.perf_counter() - t0
        if out.shape != q.shape:
            return Check(False, float("inf"), *TOLERANCES[q.dtype]), seconds
        return compare_to_reference(out, self.references.get(shape, q, k, v)), seconds

    @staticmethod
    def _callable(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """The timed call: the backend itself. The inputs were validated by the check, so `bench.attention`'s
        checks would only add their microseconds to a decode step's."""
        s = case.shape
        fn = get_backend(case.backend).fn
        if case.pass_ == "fwd":
            def forward():
                with torch.no_grad():
                    return fn(q, k, v, causal=s.causal, window=s.window)
            return forward
        grad_out = torch.randn(s.q_shape, device=q.device, dtype=q.dtype)

        def forward_backward():
            out = fn(q, k, v, causal=s.causal, window=s.window)
            return torch.autograd.grad(out, (q, k, v), grad_out)
        return forward_backward
