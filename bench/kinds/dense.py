"""Dense attention: one (B, H, S, D) call of the backend itself, checked against the float64 oracle; and the base of
every sweep: the heads, lengths, dtypes, masks, phases and passes axes, their geometries (Hq x Hkv, or --variant, x
D), and the grid of prefill and decode cases that the other kinds add their dims and refusals to
(bench.kinds.expansion)."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends.base import Backend
from bench.counts.metrics import attention_bytes, attention_flops, kv_cache_bytes, model_mem_bytes
from bench.errors import UsageError
from bench.kinds.axes import axis, one_of, positive_ints_check, words
from bench.kinds.base import ReferenceCache, cold_inputs, decode_kv_fields, fits_exactly, flop_fields
from bench.kinds.expansion import Geometry, Kind, Point, Registry, offered
from bench.problem.case import Case
from bench.problem.columns import shape_from_fields
from bench.problem.scores import parse_score
from bench.problem.shapes import DTYPE_ATTRS, VARIANTS, AttentionShape, case_mask, head_dim_for, parse_mask

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


PHASES = ("prefill", "decode")
PASSES = ("fwd", "fwd+bwd")


@dataclass(frozen=True)
class DenseAxes:
    """The axes every sweep has: heads, lengths, dtypes, masks, phases, passes, score variants, --variant."""

    heads: tuple[int, ...] = axis((8,), "heads", "query heads, e.g. 8 or 8,16", check=positive_ints_check("n_heads"))
    kv_heads: tuple[int, ...] | None = axis((8, 2, 1), "kv-heads", "KV heads, e.g. 8,2,1 (MHA, GQA, MQA); "
                                            "a profile's None means equal to the query heads",
                                            check=positive_ints_check("n_kv_heads"))
    seqs: tuple[int, ...] = axis((256, 512, 1024, 2048), "seq", "prefill sequence lengths",
                                 check=positive_ints_check("seq_q"))
    batches: tuple[int, ...] = axis((1,), "batch", "batch sizes", check=positive_ints_check("batch"),
                                    clears="tokens_per_batch")
    head_dims: tuple[int, ...] = axis((64,), "head-dim", "head dims", check=positive_ints_check("head_dim"),
                                      clears="d_model")
    dtypes: tuple[str, ...] = axis(("fp32",), "dtype", "fp32,bf16,fp16", words, one_of("dtype", DTYPE_ATTRS))
    masks: tuple[str, ...] = axis(("causal",), "mask", "none,causal,window:256,chunk:64 (chunk: Llama-4's chunked "
                                  "local attention)", words, parse_mask)
    phases: tuple[str, ...] = axis(("prefill",), "phase", "prefill,decode", words, one_of("phase", PHASES))
    passes: tuple[str, ...] = axis(("fwd",), "pass", "fwd,fwd+bwd", words, one_of("pass", PASSES))
    decode_q: tuple[int, ...] = axis((1,), "decode-q", "queries per decode step (1; 4 for speculative decoding)",
                                     check=positive_ints_check("decode_q"))
    decode_kv: tuple[int, ...] = axis((1024, 4096, 16384), "decode-kv", "KV-cache lengths for decode",
                                      check=positive_ints_check("decode_kv"))
    scores: tuple[str, ...] = axis(("none",), "score", "score variants: none,softcap:50,alibi,sinks (sink logits "
                                   "seeded; see bench.problem.scores)", words, parse_score, shape_field="score")
    variants: tuple[str, ...] | None = axis(None, "variant", "mha,gqa,mqa,mla: the variants at each --heads Hq "
                                            "(MHA Hkv = Hq, GQA the --kv-heads values that group Hq, MQA 1, MLA a "
                                            "latent cache: prefill expanded, decode absorbed, forward only); "
                                            "default: --kv-heads as given", words, one_of("variant", VARIANTS))
    d_model: int | None = None  # when set, head_dim = d_model / n_heads (the heads sweep)
    tokens_per_batch: int | None = None  # when set, batch = tokens / seq (GPU sweeps at fixed tokens)


def batches(sweep: Any, seq: int) -> tuple[int, ...]:
    """A prefill's batch sizes at length `seq`: the tokens per batch over seq where a profile fixes them."""
    if sweep.tokens_per_batch:
        return (max(1, sweep.tokens_per_batch // seq),)
    return sweep.batches


def _variant_kv_heads(kv_heads: tuple[int, ...] | None, n_heads: int, variant: str) -> tuple[int, ...]:
    """--variant's KV heads for Hq: MHA Hq, MQA 1, GQA each --kv-heads value that groups Hq (1 < Hkv < Hq)."""
    if variant == "mha":
        return (n_heads,)
    if variant == "mqa":
        return (1,)
    grouped = tuple(k for k in kv_heads or () if 1 < k < n_heads and n_heads % k == 0)
    if not grouped:
        raise UsageError(f"--variant gqa: no --kv-heads value groups --heads {n_heads} (GQA needs 1 < Hkv < Hq "
                         f"with Hq % Hkv == 0; given {', '.join(map(str, kv_heads or ())) or 'none'})")
    return grouped


class DenseKind(Kind):
    """The default kind: every shape no other kind claims, and every geometry no other kind expands."""

    name = "dense"
    axes = DenseAxes

    def geometries(self, sweep: Any, kinds: Registry) -> list[Geometry]:
        """The heads / kv_heads (or variants) / head-dim axes' geometries, duplicates dropped (MHA and MQA coincide
        at Hq = 1)."""
        out: list[Geometry] = []
        for n_heads in sweep.heads:
            dims = (head_dim_for(sweep.d_model, n_heads),) if sweep.d_model else sweep.head_dims
            if sweep.variants is None:
                kv_all = (n_heads,) if sweep.kv_heads is None else sweep.kv_heads
                out += [Geometry(n_heads, n_kv, head_dim, sweep.masks) for n_kv in kv_all for head_dim in dims]
                continue
            for variant in sweep.variants:
                out += [g for g in kinds.variant(sweep, variant, n_heads, dims) if g not in out]
        return out

    def variant_geometries(self, sweep: Any, variant: str, n_heads: int,
                           dims: tuple[int, ...]) -> list[Geometry] | None:
        if variant not in ("mha", "gqa", "mqa"):
            return None
        return [Geometry(n_heads, n_kv, head_dim, sweep.masks)
                for n_kv in _variant_kv_heads(sweep.kv_heads, n_heads, variant) for head_dim in dims]

    def cases(self, sweep: Any, g: Geometry, point: Point, device: str, kinds: Registry) -> list[Case]:
        """The grid: prefill at each --seq (batches at fixed tokens where the profile says), then decode steps at
        each --decode-q x --decode-kv x --batch, each crossed with the other kinds' dims, less what they refuse."""
        out: list[Case] = []
        if "prefill" in sweep.phases:
            names, values = _split(kinds.dims(sweep, "prefill"))
            for seq, *more in itertools.product(sweep.seqs, *values):
                at = point | {"seq_q": seq, "seq_kv": seq} | dict(zip(names, more, strict=True))
                if kinds.refused(g, at):
                    continue
                for batch in batches(sweep, seq):
                    shape = shape_from_fields(at | {"batch": batch})
                    out += [Case(b, shape, "prefill", p, device) for p in kinds.passes(at, sweep.passes)
                            for b in sweep.backends if offered(b, shape)]
        if "decode" in sweep.phases and case_mask(point["mask"]).kind != "none":  # 'none' would repeat 'causal'
            names, values = _split(kinds.dims(sweep, "decode"))
            for sq, kv, batch, *more in itertools.product(sweep.decode_q, sweep.decode_kv, sweep.batches, *values):
                at = point | {"batch": batch, "seq_q": sq, "seq_kv": kv} | dict(zip(names, more, strict=True))
                if kinds.refused(g, at):
                    continue
                shape = shape_from_fields(at)  # attention alone
                out += [Case(b, shape, "decode", "fwd", device) for b in sweep.backends if offered(b, shape)]
        return out

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
        return guarded_call(fn, (q, k, v), guard, grad, s.q_shape, cold=cold_inputs(case))


def _split(dims: list[tuple[str, tuple]]) -> tuple[list[str], list[tuple]]:
    return [name for name, _ in dims], [values for _, values in dims]


def guarded_call(fn: Callable, qkv: tuple, guard: Any, grad: bool, out_shape: tuple[int, ...],
                 cold: bool = False) -> Callable[[], object]:
    """The call the timer repeats: fn(q, k, v) forward (its output kept for the guard), or forward and backward
    against a fixed random grad_out; the guard rides on it (call.guard). cold: K and V are the layer's cache, read
    from memory (bench.kinds.base.cold_inputs): the forward rotates them, q stays warm."""
    import torch

    from bench.measure.rotation import Rotating

    q, k, v = qkv
    call: Callable[[], object]
    if not grad and cold:
        def step(k_cache, v_cache):
            with torch.no_grad():
                return guard.keep(fn(q, k_cache, v_cache))
        call = Rotating(step, (k, v))
    elif not grad:
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
