"""Dense attention: one (B, H, S, D) call of the backend itself, checked against the float64 oracle."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.backends.base import Backend
from bench.counts.metrics import attention_bytes, attention_flops, kv_cache_bytes, model_mem_bytes
from bench.kinds.base import ReferenceCache, decode_kv_fields, fits_exactly, flop_fields
from bench.problem.case import Case
from bench.problem.shapes import AttentionShape

if TYPE_CHECKING:
    from bench.reference import Check


def dense_check_shape(shape: AttentionShape) -> AttentionShape:
    """The case itself, or a shorter one with the same structure (scope and model kept: a layer case is checked as
    a layer, with the same weights, on a shorter x; a sparsity cut as the mask is): Sq up to 256, Skv up to 4096,
    two sequences. An MLA case fits when its float64 reference's decompressed K and V fit too."""
    scores = shape.batch * shape.n_heads * shape.seq_q * shape.seq_kv
    # MLA's reference decompresses K and V per head in float64 (bench.kinds.mla_calls.reference_mla): count those too
    expanded = shape.batch * shape.n_heads * shape.seq_kv * (shape.head_dim + shape.value_dim) \
        if shape.mla is not None else 0
    if fits_exactly(max(scores, expanded)):
        return shape
    seq_q = min(shape.seq_q, 256)
    seq_kv = seq_q if shape.seq_q == shape.seq_kv else min(shape.seq_kv, 4096)
    # two sequences, so that batch strides are checked too
    mask = shape.mask.shorter(shape.seq_kv, seq_kv)  # a window or a chunk that cuts keeps cutting
    sparsity = shape.sparsity.shorter(shape.seq_kv, seq_kv)  # and so does a sparsity
    return dataclasses.replace(shape, batch=min(shape.batch, 2), seq_q=seq_q, seq_kv=seq_kv, mask=mask,
                               sparsity=sparsity)


def dense_kv_fields(case: Case) -> dict[str, float | None]:
    s = case.shape
    return decode_kv_fields(case, lambda: kv_cache_bytes(1, s.n_kv_heads, s.head_dim, s.seq_kv, s.batch, s.dtype,
                                                         window=s.mask.window))


class DenseKind:
    """The default kind: every shape no other kind claims."""

    name = "dense"

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        s = case.shape
        flops = attention_flops(s, case.pass_)
        return {"flops": flops, "bytes": attention_bytes(s),
                "model_mem_bytes": model_mem_bytes(s, backend.memory, case.pass_),
                "real_tokens": s.batch * s.seq_q, **dense_kv_fields(case), **flop_fields(case, backend, flops)}

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        return model_mem_bytes(case.shape, backend.memory, "fwd") or 0

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        return dense_check_shape(shape)

    def setup(self, case: Case) -> None:
        return None

    def check(self, case: Case, setup: Any, references: ReferenceCache) -> tuple[Check, float]:
        import torch

        from bench.backends import attention
        from bench.measure.timer import sync
        from bench.reference import (
            TOLERANCES,
            Check,
            case_variants,
            compare_to_reference,
            make_inputs,
            reference_attention,
        )

        shape = self.check_shape(case.shape)
        q, k, v = make_inputs(shape, case.device, seed=0)
        mask, score = case_variants(shape, case.device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = attention(q, k, v, backend=case.backend, mask=mask, score=score)
        sync(case.device)
        seconds = time.perf_counter() - t0
        if out.shape != q.shape:
            return Check(False, float("inf"), *TOLERANCES[q.dtype]), seconds
        ref = references.get((self.name, shape, case.device),
                             lambda: reference_attention(q, k, v, mask=mask, score=score))
        return compare_to_reference(out, ref), seconds

    def gradients(self, case: Case, setup: Any) -> Check:
        from bench.reference import check_gradients

        return check_gradients(case.backend, self.check_shape(case.shape), case.device)

    def timed_call(self, case: Case, setup: Any) -> Callable[[], object]:
        """The backend itself: the inputs were validated by the check, so `bench.attention`'s checks would only add
        their microseconds to a decode step's."""

        from bench.backends import get_backend
        from bench.backends.base import bind
        from bench.kinds.guards import TimedGuard
        from bench.reference import case_variants, make_inputs, reference_attention

        s = case.shape
        grad = case.pass_ == "fwd+bwd"
        q, k, v = make_inputs(s, case.device, seed=1, requires_grad=grad)
        # the runner asks the guard after the timed rounds (bench.kinds.guards); the last output is checked only
        # where the check itself ran the case's own shape (a float64 reference of a longer one would not fit)
        mask, score = case_variants(s, case.device)  # the check ran these through bench.attention's variant rules
        fn = bind(get_backend(case.backend).fn, mask, score)
        exact = not grad and dense_check_shape(s) == s
        guard = TimedGuard({"q": q, "k": k, "v": v}, (lambda t: reference_attention(
            t["q"], t["k"], t["v"], mask=mask, score=score)) if exact else None)
        return guarded_call(fn, (q, k, v), guard, grad, s.q_shape)


def guarded_call(fn: Callable, qkv: tuple, guard: Any, grad: bool, out_shape: tuple[int, ...]) -> Callable[[], object]:
    """The call the timer repeats: fn(q, k, v) forward (its output kept for the guard), or forward and backward
    against a fixed random grad_out; the guard rides on it (call.guard)."""
    import torch

    q, k, v = qkv
    call: Callable[[], object]
    if not grad:
        def forward():
            with torch.no_grad():
                return guard.keep(fn(q, k, v))
        call = forward
    else:
        grad_out = torch.randn(out_shape, device=q.device, dtype=q.dtype)

        def forward_backward():
            out = fn(q, k, v)
            return torch.autograd.grad(out, (q, k, v), grad_out)
        call = forward_backward
    call.guard = guard  # type: ignore[attr-defined]
    return call
