"""A whole layer (scope "layer"): W_Q, W_K, W_V, the backend's attention and W_O on x (B, S, d_model), checked
against the same layer in float64 (bench.reference.reference_layer, LAYER_TOLERANCES). Its axis, --scope, crosses
every prefill point of the grid with attention alone and the whole layer."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends.base import Backend
from bench.counts.metrics import (
    ELEMENT_BYTES,
    attention_flops,
    layer_bytes,
    layer_d_model,
    layer_flops,
    layer_weight_bytes,
)
from bench.kinds.axes import axis, one_of, words
from bench.kinds.base import ReferenceCache, flop_fields, refuse_variants
from bench.kinds.dense import DenseKind, dense_check_shape, dense_kv_fields
from bench.kinds.expansion import Dims, Kind
from bench.problem.case import Case
from bench.problem.shapes import SCOPES, AttentionShape

if TYPE_CHECKING:
    from bench.kinds.mha_layer import MultiHeadAttention
    from bench.reference import Check


@dataclass(frozen=True)
class LayerAxes:
    scopes: tuple[str, ...] = axis(("attention",), "scope", "attention,layer: time attention alone, and/or the "
                                   "whole layer (W_Q, W_K, W_V, W_O around it; prefill only)", words,
                                   one_of("scope", SCOPES))


class LayerKind(Kind):
    name = "layer"
    axes = LayerAxes

    def dims(self, sweep: Any, phase: str) -> Dims:
        return [("scope", sweep.scopes)] if phase == "prefill" else []

    def predicted_flops(self, case: Case) -> float:
        return layer_flops(case.shape, case.pass_)  # the projections too

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        # the projections are counted too; the memory model covers attention alone, so a layer has none
        s = case.shape
        flops = layer_flops(s, case.pass_)
        attention = flop_fields(case, backend, attention_flops(s, case.pass_))["executed_flops"]
        executed = None if attention is None else flops - attention_flops(s, case.pass_) + attention
        return {"flops": flops, "bytes": layer_bytes(s), "model_mem_bytes": None, "useful_flops": flops,
                "executed_flops": executed, "real_tokens": s.batch * s.seq_q, **dense_kv_fields(case)}

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        """The attention inside, plus the weights and x, Q, K, V, O and the output."""
        s = case.shape
        tokens = s.batch * s.seq_q * ELEMENT_BYTES[s.dtype]
        return DenseKind().predicted_bytes(case, backend) + layer_weight_bytes(s) + tokens * (
            2 * layer_d_model(s) + 2 * (s.n_heads + s.n_kv_heads) * s.head_dim)

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        return dense_check_shape(shape)

    def setup(self, case: Case) -> MultiHeadAttention:
        """One layer (seeded weights) for the check and the timing."""
        from bench.kinds.mha_layer import make_layer

        refuse_variants(case.shape, "a whole layer (scope=layer)")
        return make_layer(case.shape, case.backend, case.device, seed=0)

    def check(self, case: Case, setup: MultiHeadAttention, references: ReferenceCache) -> tuple[Check, float]:
        import torch

        from bench.measure.timer import sync
        from bench.reference import LAYER_TOLERANCES, Check, compare_to_reference, make_layer_input, reference_layer

        shape = self.check_shape(case.shape)
        x = make_layer_input(shape, case.device, seed=0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = setup(x, causal=shape.causal, window=shape.mask.window)
        sync(case.device)
        seconds = time.perf_counter() - t0
        if out.shape != x.shape:
            return Check(False, float("inf"), *LAYER_TOLERANCES[x.dtype]), seconds
        ref = references.get((self.name, shape, case.device),
                             lambda: reference_layer(setup, x, causal=shape.causal, window=shape.mask.window))
        return compare_to_reference(out, ref, LAYER_TOLERANCES), seconds

    def gradients(self, case: Case, setup: MultiHeadAttention) -> Check:
        from bench.reference import check_layer_gradients

        return check_layer_gradients(setup, self.check_shape(case.shape), case.device)

    def timed_call(self, case: Case, setup: MultiHeadAttention) -> Callable[[], object]:
        """The whole layer, projections included; fwd+bwd differentiates with respect to x and every weight, as
        training does."""
        import torch

        from bench.reference import make_layer_input

        s, layer = case.shape, setup
        grad = case.pass_ == "fwd+bwd"
        x = make_layer_input(s, case.device, seed=1, requires_grad=grad)
        if not grad:
            def forward():
                with torch.no_grad():
                    return layer(x, causal=s.causal, window=s.mask.window)
            return forward
        params = tuple(layer.parameters())
        grad_out = torch.randn(x.shape, device=x.device, dtype=x.dtype)

        def forward_backward():
            out = layer(x, causal=s.causal, window=s.mask.window)
            return torch.autograd.grad(out, (x, *params), grad_out)
        return forward_backward
