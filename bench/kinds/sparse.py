"""Sparse attention (bench.problem.sparsity): one attention call under a keep-set, dense inputs or MLA's
(bench.kinds.mla_calls), checked
against the float64 reference under the same keep-set.

Every backend of a case gets the same keep-set: a static sparsity's follows from the lengths; topk's from its
indexer (bench.problem.indexer) on seeded inputs, run once before the call, so the selection is the same for every
backend.
What the record adds (bench.results.record): useful and executed FLOPs, the density, and apart from the kernel's time:
  indexer_s, indexer_peak_mem_bytes  topk: the indexer's scoring and top-K selection, timed alone on the case's
                                     own inputs (a model runs it on every forward, before the attention)
  block_mask_build_s                 FlexAttention: building the BlockMask from the keep-set, on its first call
  total_s                            the pair together: median_s + indexer_s, plus the BlockMask's build where the
                                     keep-set changes on every forward (topk); a static keep-set is built once
For FlexAttention, executed FLOPs count the blocks its BlockMask really holds (topk's depend on what was picked).

Its axis, --sparsity, sweeps each keep-set as a shape field; the grid leaves a sparse point out unless it is one
attention call (no layer, no serving batch) at a context its sparsity does not keep whole.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends.base import Backend, Unsupported
from bench.counts.metrics import (
    BWD_FLOP_FACTOR,
    ELEMENT_BYTES,
    attention_bytes,
    attention_flops,
    indexer_bytes,
    indexer_flops,
    kv_cache_bytes,
    latent_cache_bytes,
    model_mem_bytes,
)
from bench.counts.pairs import density
from bench.kinds.axes import axis, words
from bench.kinds.base import ReferenceCache, cold_inputs, decode_kv_fields, flop_fields
from bench.kinds.dense import dense_check_shape, guarded_call
from bench.kinds.expansion import Geometry, Kind, Point
from bench.kinds.mla import FORWARD_ONLY
from bench.problem.case import Case
from bench.problem.scores import NO_SCORE
from bench.problem.shapes import DENSE, AttentionShape
from bench.problem.sparsity import Sparsity

if TYPE_CHECKING:
    import torch

    from bench.problem.keepset import KeepSet
    from bench.reference import Check


def keep_set(shape: AttentionShape, device: str, seed: int) -> KeepSet:
    """The shape's keep-set: static from its lengths, or topk's picked by its indexer on inputs of `seed`."""
    from bench.problem.keepset import KeepSet

    sparsity, mask = shape.sparsity, shape.mask
    if sparsity.static:
        return KeepSet.static(sparsity, mask, shape.seq_q, shape.seq_kv, device)
    from bench.problem.indexer import make_indexer_inputs, select

    picked = select(make_indexer_inputs(shape, device, seed), sparsity.k, mask)  # type: ignore[arg-type]
    return KeepSet.from_indices(sparsity, mask, picked, shape.seq_kv)


def _inputs(shape: AttentionShape, device: str, seed: int) -> tuple[Any, tuple[torch.Tensor, ...]]:
    """(MLA's latent inputs or None, (q, k, v) of the call)."""
    if shape.mla is None:
        from bench.reference import make_inputs

        return None, make_inputs(shape, device, seed)
    from bench.kinds.mla_calls import call_tensors, make_mla_inputs

    x = make_mla_inputs(shape, device, seed)
    return x, call_tensors(shape, x)


def sparsity_labels(text: str) -> tuple[str, ...]:
    """--sparsity's values, each as its label (block:128:1/4 -> block:128:0.25): what case ids and files hold."""
    return tuple(Sparsity.parse(word).label for word in words(text))


@dataclass(frozen=True)
class SparseAxes:
    sparsities: tuple[str, ...] = axis(("none",), "sparsity", "sparse attention, each at a fixed budget while the "
                                       "lengths vary: none,block:128:0.25,docs:8,global:64+window:256,topk:256 "
                                       "(topk:K:HxD sets the indexer; see bench.problem.sparsity); a backend is "
                                       "offered the kinds its `sparsity` trait lists", sparsity_labels,
                                       shape_field="sparsity")


class SparseKind(Kind):
    name = "sparse"
    axes = SparseAxes

    def refuses(self, g: Geometry, point: Point) -> bool:
        """A sparse case is one attention call (no layer, no serving batch), where its sparsity drops keys."""
        return point["sparsity"] != "none" and (
            point.get("scope", "attention") != "attention" or point.get("lengths") is not None
            or point.get("page_size") is not None or g.keeps_all(point))

    def reference_flops(self, shape: AttentionShape, pass_: str) -> float:
        """The float64 reference computes every pair the mask leaves, the keep-set's dropped ones too."""
        return attention_flops(dataclasses.replace(shape, sparsity=DENSE), pass_)

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        s = case.shape
        flops = attention_flops(s, case.pass_)
        if s.mla is not None:
            kv = lambda: latent_cache_bytes(1, s.mla.kv_lora_rank + s.mla.rope_dim, s.seq_kv, s.batch, s.dtype)  # type: ignore[operator]  # noqa: E731
        else:
            kv = lambda: kv_cache_bytes(1, s.n_kv_heads, s.head_dim, s.seq_kv, s.batch, s.dtype, window=s.mask.window)  # noqa: E731
        return {"flops": flops, "bytes": attention_bytes(s) + indexer_bytes(s),
                "model_mem_bytes": model_mem_bytes(s, backend.memory, case.pass_), "real_tokens": s.batch * s.seq_q,
                "density": density(s.sparsity, s.mask, s.seq_q, s.seq_kv),
                "indexer_flops": indexer_flops(s) or None, **flop_fields(case, backend, flops),
                **decode_kv_fields(case, kv)}

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        """The dense call's, plus the keep-set as a boolean (Sq, Skv) per sequence (topk) or one for all."""
        s = case.shape
        sequences = s.batch if s.sparsity.kind == "topk" else 1
        inputs = s.batch * s.n_kv_heads * s.seq_kv * (s.qk_dim + s.value_dim) * ELEMENT_BYTES[s.dtype] \
            if s.mla is not None else 0
        return (model_mem_bytes(s, backend.memory, "fwd") or 0) + sequences * s.seq_q * s.seq_kv + inputs

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        return dense_check_shape(shape)

    def setup(self, case: Case) -> None:
        if case.shape.mla is not None and case.pass_ != "fwd":
            raise Unsupported(FORWARD_ONLY)
        return None

    def check(self, case: Case, setup: Any, references: ReferenceCache) -> tuple[Check, float]:
        import torch

        from bench.backends import attention
        from bench.measure.timer import sync
        from bench.reference import TOLERANCES, Check, compare_to_reference, reference_attention

        shape = self.check_shape(case.shape)
        keep = keep_set(shape, case.device, seed=0)
        x, (q, k, v) = _inputs(shape, case.device, seed=0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = attention(q, k, v, backend=case.backend, mask=shape.mask, sparse=keep)
        sync(case.device)
        seconds = time.perf_counter() - t0
        if tuple(out.shape) != shape.out_shape:
            return Check(False, float("inf"), *TOLERANCES[q.dtype]), seconds
        if x is None:
            ref = references.get((self.name, shape, case.device),
                                 lambda: reference_attention(q, k, v, mask=shape.mask, sparse=keep))
            return compare_to_reference(out, ref), seconds
        from bench.kinds.mla_calls import finish, reference_mla

        ref = references.get((self.name, shape, case.device), lambda: reference_mla(shape, x, sparse=keep))
        return compare_to_reference(finish(shape, out, x), ref), seconds

    def gradients(self, case: Case, setup: Any) -> Check:
        from bench.reference import check_gradients

        shape = self.check_shape(case.shape)
        return check_gradients(case.backend, shape, case.device, sparse=keep_set(shape, case.device, seed=0))

    def timed_call(self, case: Case, setup: Any) -> Callable[[], object]:
        """The backend on the case's own shape and keep-set (inputs of another seed than the check's); its `after`
        gives the record what is timed apart (module docstring)."""

        from bench.backends import get_backend
        from bench.backends.base import bind
        from bench.kinds.guards import TimedGuard
        from bench.reference import reference_attention

        s = case.shape
        grad = case.pass_ == "fwd+bwd"
        keep = keep_set(s, case.device, seed=1)
        _, (q, k, v) = _inputs(s, case.device, seed=1)
        q, k, v = (t.requires_grad_(grad) for t in (q, k, v))
        mask = s.mask
        fn = bind(get_backend(case.backend).fn, mask, NO_SCORE, keep)  # a sparse case takes no score variant
        exact = not grad and dense_check_shape(s) == s
        guard = TimedGuard({"q": q, "k": k, "v": v}, (lambda t: reference_attention(
            t["q"], t["k"], t["v"], mask=mask, sparse=keep)) if exact else None, s.out_shape)
        call = guarded_call(fn, (q, k, v), guard, grad, s.out_shape, cold=cold_inputs(case))
        call.after = lambda case_budget_s, median_s: apart(case, keep, case_budget_s, median_s)  # type: ignore[attr-defined]
        return call


def apart(case: Case, keep: KeepSet, case_budget_s: float, median_s: float | None) -> dict[str, Any]:
    """What a sparse case's record holds beside the kernel's time: the BlockMask's build and the pairs it covers
    (FlexAttention), the indexer's time and peak (topk, timed here on the case's inputs), and total_s."""
    s = case.shape
    out: dict[str, Any] = {}
    build = keep.derived.get("build_s")
    if build is not None:
        out["block_mask_build_s"] = build
    covered = keep.derived.get("pairs_per_sequence")
    if covered is not None:  # what the kernel's BlockMask really holds
        fwd = 2 * s.batch * s.n_heads * (s.qk_dim + s.value_dim) * covered
        out["executed_flops"] = int(fwd * (1 + BWD_FLOP_FACTOR if case.pass_ == "fwd+bwd" else 1)) \
            + indexer_flops(s)
    indexer = 0.0
    if not s.sparsity.static:
        from bench.measure.memory import peak_bytes
        from bench.measure.stats import summarize
        from bench.measure.timer import measure
        from bench.problem.indexer import make_indexer_inputs, select

        x = make_indexer_inputs(s, case.device, seed=1)

        def run():
            return select(x, s.sparsity.k, s.mask)  # type: ignore[arg-type]
        _, timing = measure(run, case.device, case_budget_s / 2)
        indexer = summarize(timing.samples).median
        out["indexer_s"] = indexer
        out["indexer_peak_mem_bytes"] = peak_bytes(run, case.device)
    if median_s:
        out["total_s"] = median_s + indexer + ((build or 0.0) if not s.sparsity.static else 0.0)
    return out
