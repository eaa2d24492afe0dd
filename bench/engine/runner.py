"""One case, start to end: support and correctness check, warm-up, timing, memory -> one record.

Every case ends in exactly one status: ok | unsupported | oom | error | incorrect. Nothing here raises
for a backend's failure; a broken backend becomes a record, so one backend cannot kill a sweep.

A case of scope "layer" times the whole layer (bench.layers.make_layer: W_Q, W_K, W_V, the backend's attention,
W_O) on x (B, S, d_model) instead of the attention call alone, and is checked against the same layer in float64
(bench.reference.reference_layer, LAYER_TOLERANCES) first; everything else is as for attention.
"""

from __future__ import annotations

import dataclasses
import gc
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.backends import Unsupported, attention, get_backend
from bench.engine.sweeps import Case
from bench.layers import MultiHeadAttention, make_layer, make_layer_input
from bench.measure.calibrate import spec_sheet
from bench.measure.environment import gpu_reading
from bench.measure.memory import available_cpu_bytes, peak_bytes
from bench.measure.modes import CaseTiming, time_case
from bench.measure.nvml import Gpu
from bench.measure.stats import summarize
from bench.measure.timer import sync
from bench.metrics import ELEMENT_BYTES, layer_d_model, layer_weight_bytes, model_mem_bytes
from bench.record import new_record, timed, with_modes
from bench.reference import (
    LAYER_TOLERANCES,
    TOLERANCES,
    Check,
    check_gradients,
    check_layer_gradients,
    compare_to_reference,
    make_inputs,
    reference_attention,
    reference_layer,
)
from bench.serving import is_serving
from bench.serving.case import serving_case, serving_check_shape
from bench.shapes import AttentionShape

# Shapes up to this many score elements are checked as they are; larger ones on a shorter copy of the
# same case (same heads, dims, dtype, mask and offset semantics), since the float64 oracle is O(S^2).
EXACT_CHECK_ELEMENTS = 1 << 25


@dataclass
class Outcome:
    record: dict[str, Any]
    samples: list[float] = field(default_factory=list)


def check_shape(shape: AttentionShape) -> AttentionShape:
    """The shape the correctness check runs on: the case itself, or a shorter one with the same structure (scope
    and model kept: a layer case is checked as a layer, with the same weights, on a shorter x). A serving batch
    keeps its batch, distribution and pages (bench.serving.case.serving_check_shape)."""
    if is_serving(shape):
        return serving_check_shape(shape)
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
    return dataclasses.replace(shape, batch=min(shape.batch, 2), seq_q=seq_q, seq_kv=seq_kv, window=window)


class ReferenceCache:
    """The float64 reference of the last shape checked: consecutive backends on one shape share it.

    The check's inputs (and a layer's weights) are a function of the shape, the device and a fixed seed, so
    (shape, device) identifies the reference; a layer shape differs from its attention twin by its scope."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._ref: torch.Tensor | None = None

    def _cached(self, key: tuple, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        if key != self._key:
            self._ref = None  # free the old one before building the next
            self._key = None
            self._ref = compute()
            self._key = key
        assert self._ref is not None
        return self._ref

    def get(self, shape: AttentionShape, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self._cached((shape, str(q.device)),
                            lambda: reference_attention(q, k, v, causal=shape.causal, window=shape.window))

    def get_layer(self, shape: AttentionShape, layer: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
        return self._cached((shape, str(x.device)),
                            lambda: reference_layer(layer, x, causal=shape.causal, window=shape.window))


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
    def __init__(self, calibration: dict[str, float], gpu_name: str | None = None, budget_s: float = 1.0,
                 trace_dir: Path | None = None) -> None:
        self.calibration = calibration
        self.budget_s = budget_s
        self.sheet = spec_sheet(gpu_name)
        self.sheet_flops = self.sheet.flops_per_s if self.sheet else None
        self.trace_dir = trace_dir
        self.keep_last = False
        self.last: tuple[Callable[[], object], CaseTiming] | None = None
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
        if case.shape.scope == "layer":  # the attention inside, plus the weights and x, Q, K, V, O and the output
            s = case.shape
            tokens = s.batch * s.seq_q * ELEMENT_BYTES[s.dtype]
            forward += layer_weight_bytes(s) + tokens * (2 * layer_d_model(s) + 2 * (s.n_heads + s.n_kv_heads)
                                                         * s.head_dim)
        need = forward * (4 if case.pass_ != "fwd" else 1)  # backward keeps more alive; a rough bound
        available = available_cpu_bytes()
        if available and need > 0.7 * available:
            return f"predicted: needs ~{need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available; not run"
        return None

    def _run(self, case: Case, record: dict[str, Any]) -> Outcome:
        shape, device = case.shape, case.device
        if why := self._predicted_oom(case):
            return Outcome(dict(record, status="oom", reason=why))
        # a layer case: one layer (seeded weights) for the check and the timing
        layer = make_layer(shape, case.backend, device, seed=0) if shape.scope == "layer" else None
        serving = None  # a serving batch (bench.serving) is checked per sequence and hands over its timed call
        if is_serving(shape):
            check, check_call_s, serving = serving_case(case.backend, shape, case.pass_, device)
        else:
            check, check_call_s = self._check(case) if layer is None else self._check_layer(case, layer)
        record["max_abs_err"] = check.max_abs_err
        if not check.ok:
            return Outcome(dict(record, status="incorrect", reason=check.describe()))
        if case.pass_ == "fwd+bwd":
            if layer is None:
                grads = check_gradients(case.backend, check_shape(case.shape), case.device)
            else:
                grads = check_layer_gradients(layer, check_shape(case.shape), case.device)
            if not grads.ok:
                reason = f"gradients: max relative error {grads.max_abs_err:.3g} > {grads.atol:g}"
                return Outcome(dict(record, status="incorrect", reason=reason))

        if device == "cuda":  # throttling during the case shows as clock-event reasons and lower clocks after it
            record["gpu_before"] = gpu_reading(torch.cuda.current_device())
        grad = case.pass_ == "fwd+bwd"
        if serving is not None:
            fn = serving
        elif layer is None:
            q, k, v = make_inputs(shape, device, seed=1, requires_grad=grad)
            fn = self._callable(case, q, k, v)
        else:
            fn = self._layer_callable(case, layer, make_layer_input(shape, device, seed=1, requires_grad=grad))
        # every timing mode (bench.measure.modes); the warm-up compiles flex, builds plans
        gpu = Gpu.open(torch.cuda.current_device()) if device == "cuda" else None
        case_timing = time_case(fn, device, self.budget_s, gpu, self.trace_path(case))
        warm_up_s, timing = case_timing.first_call_s, case_timing.headline
        # The first call of this backend on this shape: the check's, when it ran the case's own shape forward.
        exact_fwd = check_shape(shape) == shape and case.pass_ == "fwd"
        record["first_call_s"] = check_call_s if exact_fwd else warm_up_s
        record["peak_mem_bytes"] = peak_bytes(fn, device)
        if device == "cuda":
            record["gpu_after"] = gpu_reading(torch.cuda.current_device())
        record = timed(record, summarize(timing.samples), timing, self.calibration, self.sheet_flops)
        record = with_modes(record, case_timing, self.sheet.bytes_per_s if self.sheet else None)
        if self.keep_last:  # `bench profile` reads the whole kernel table and re-runs the call for a memory snapshot
            self.last = (fn, case_timing)
        return Outcome(record, timing.samples)

    def trace_path(self, case: Case) -> Path | None:
        """--trace DIR: the kernel mode's profiler trace of this case, one file per case id."""
        if self.trace_dir is None:
            return None
        return self.trace_dir / (re.sub(r"[^A-Za-z0-9.=_-]+", "_", case.id) + ".trace.json")

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

    def _check_layer(self, case: Case, layer: MultiHeadAttention) -> tuple[Check, float]:
        """The layer's forward check against the same weights in float64, and how long the layer's call took."""
        shape = check_shape(case.shape)
        x = make_layer_input(shape, case.device, seed=0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = layer(x, causal=shape.causal, window=shape.window)
        sync(case.device)
        seconds = time.perf_counter() - t0
        if out.shape != x.shape:
            return Check(False, float("inf"), *LAYER_TOLERANCES[x.dtype]), seconds
        return compare_to_reference(out, self.references.get_layer(shape, layer, x), LAYER_TOLERANCES), seconds

    @staticmethod
    def _layer_callable(case: Case, layer: MultiHeadAttention, x: torch.Tensor):
        """The timed call of a layer case: the whole layer, projections included; fwd+bwd differentiates with
        respect to x and every weight, as training does."""
        s = case.shape
        if case.pass_ == "fwd":
            def forward():
                with torch.no_grad():
                    return layer(x, causal=s.causal, window=s.window)
            return forward
        params = tuple(layer.parameters())
        grad_out = torch.randn(x.shape, device=x.device, dtype=x.dtype)

        def forward_backward():
            out = layer(x, causal=s.causal, window=s.window)
            return torch.autograd.grad(out, (x, *params), grad_out)
        return forward_backward

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
