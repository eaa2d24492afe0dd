"""Speculative decoding's verification step: B requests, each with its KV cache, verify a draft of N tokens (a chain
or a tree, bench.problem.draft) in one attention call, every draft token seeing the cache and its own path.

Its axis, --draft, sweeps drafts beside the sweep's one-query decode steps (its baseline): each draft at every
--decode-kv length L (the cache and the draft: seq_kv = L keys, seq_q = N queries) and --batch, forward, causal,
no score variant, sparsity or MLA (such a point is left out). A draft of N >= L tokens is a usage error.
How each backend takes it:
  a chain       the causal mask itself: every backend, as a --decode-q N step;
  a tree        a keep-set (bench.problem.keepset, kind tree) beside the causal mask, offered to the backends whose
                `sparsity` trait lists tree: naive and SDPA as a boolean (1, 1, N, L) mask, FlexAttention as a
                BlockMask built from the tree's table; any other backend (flash-attn takes no tree) records the case
                unsupported, its reason said, and a sweep in which no backend takes a tree it asks for is a usage
                error. torch SDPA picks the kernel that takes a boolean mask (the record's sdpa_kernel names it: on
                a CPU its flash kernel, which takes one); each forced kernel (sdpa-math, sdpa-flash, sdpa-efficient,
                sdpa-cudnn) runs it alone or says in torch's words why it cannot. FlashInfer's custom-mask prefill
                (a packed bit mask) is not wired in as a backend.
Every case is checked against the float64 reference under a visibility built apart, by walking each token's parent
list (bench.problem.draft.Draft.path), never from a kernel's mask. The timed call reads its cache cold, rotated
(bench.kinds.base.cold_inputs: a decode step). What the record adds (bench.results.record): FlexAttention's
block_mask_build_s, the BlockMask's build on its first call, and total_s, the kernel with the build (a dynamic tree,
as EAGLE-2's, is built afresh every step).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends import get_backend
from bench.backends.base import Backend, Unsupported
from bench.counts.metrics import attention_bytes, model_mem_bytes
from bench.errors import UsageError
from bench.kinds.axes import axis
from bench.kinds.base import ReferenceCache, cold_inputs, fits_exactly
from bench.kinds.dense import dense_kv_fields, guarded_call
from bench.kinds.expansion import Geometry, Kind, Point, Registry
from bench.problem.case import Case
from bench.problem.columns import shape_from_fields
from bench.problem.draft import Draft, draft_words
from bench.problem.masks import CAUSAL
from bench.problem.shapes import AttentionShape
from bench.problem.sparsity import Sparsity

if TYPE_CHECKING:
    import torch

    from bench.problem.keepset import KeepSet
    from bench.reference import Check


FORWARD_ONLY = "a draft is verified forward only (inference)"


def draft_labels(text: str) -> tuple[str, ...]:
    """--draft's values as their labels (a file's tree as parents:...), after 'none': the one-query decode step every
    draft is judged against is swept beside them."""
    labels = tuple(Draft.parse(word).label for word in draft_words(text) if word != "none")
    return ("none", *dict.fromkeys(labels))


@dataclass(frozen=True)
class DraftAxes:
    drafts: tuple[str, ...] = axis(("none",), "draft", "speculative decoding's verification: drafts verified in one "
                                   "call over the cache beside the one-query decode step, e.g. chain:8,tree:4,2,2,1,"
                                   "medusa (presets eagle, eagle2, medusa, sglang; a file of parent indices; see "
                                   "bench.problem.draft)", draft_labels, shape_field="draft")


def takes_tree(backend: Backend) -> str | None:
    """Why `backend` cannot verify a tree, or None."""
    return backend.sparsity_reason("tree")


def tree_keep(shape: AttentionShape, device: str) -> KeepSet | None:
    """A tree draft's keep-set for the kernels (None for a chain: the causal mask is its visibility)."""
    draft = shape.draft
    if draft is None or draft.is_chain:
        return None
    from bench.problem.keepset import KeepSet

    return KeepSet.static(Sparsity("tree", parents=draft.parents), CAUSAL, shape.seq_q, shape.seq_kv, device)


def walked_visibility(draft: Draft, seq_kv: int) -> torch.Tensor:
    """The reference's (N, seq_kv) visibility, walked from the parent list: the cache, then each token's path."""
    import torch

    cache = seq_kv - draft.n
    out = torch.zeros(draft.n, seq_kv, dtype=torch.bool)
    out[:, :cache] = True
    for i in range(draft.n):
        for j in draft.path(i):
            out[i, cache + j] = True
    return out


def draft_flops(shape: AttentionShape) -> int:
    """The FLOPs of verifying the shape's draft: QK^T and PV over the pairs its tree leaves."""
    pairs = shape.draft.pairs(shape.seq_kv - shape.seq_q)  # type: ignore[union-attr]
    return 2 * shape.batch * shape.n_heads * (shape.qk_dim + shape.value_dim) * pairs


def draft_check_shape(shape: AttentionShape) -> AttentionShape:
    """The case, or one with the same draft over a shorter cache (at most 4,096 keys) and two sequences."""
    if fits_exactly(shape.batch * shape.n_heads * shape.seq_q * shape.seq_kv):
        return shape
    return dataclasses.replace(shape, batch=min(shape.batch, 2), seq_kv=max(shape.seq_q + 1, min(shape.seq_kv, 4096)))


class DraftKind(Kind):
    name = "draft"
    axes = DraftAxes

    def cases(self, sweep: Any, g: Geometry, point: Point, device: str, kinds: Registry) -> list[Case] | None:
        """A draft point's verification steps (module docstring); None (not this kind's) where the point has none."""
        label = point.get("draft", "none")
        if label == "none":
            return None
        draft = Draft.parse(label)
        if "decode" not in sweep.phases:
            raise UsageError(f"--draft {label} verifies a draft in a decode step: add decode to --phase")
        short = [kv for kv in sweep.decode_kv if kv <= draft.n]
        if short:
            raise UsageError(f"--draft {label} ({draft.n} tokens) does not fit a cache of --decode-kv {short[0]}: "
                             "the keys hold the cache and the draft (seq_kv > N)")
        plain = all(point.get(name, "none") == "none" for name in ("score", "sparsity", "linear"))
        if g.is_mla or not plain or point["mask"] != "causal" or point.get("prefix") is not None:
            return []
        runs = [b for b in sweep.backends if get_backend(b).dense and not get_backend(b).linear]
        if not draft.is_chain and runs and all(takes_tree(get_backend(b)) for b in runs):
            raise UsageError(f"--draft {label} is a tree, and no backend asked for takes one: "
                             + "; ".join(takes_tree(get_backend(b)) for b in runs))  # type: ignore[misc]
        out = []
        for kv in sweep.decode_kv:
            for batch in sweep.batches:
                shape = shape_from_fields(point | {"batch": batch, "seq_q": draft.n, "seq_kv": kv})
                out += [Case(b, shape, "decode", "fwd", device) for b in runs]
        return out

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        """flops: the pairs the tree leaves (each token: the cache and its path); executed: the causal pairs for a
        chain on a kernel that skips masked blocks, else every pair of the (N, L) call (a tree is a boolean mask to
        it); flex's blocks replace that after timing."""
        s = case.shape
        flops = draft_flops(s)
        causal = s.draft.is_chain and backend.executes == "causal"  # type: ignore[union-attr]
        executed = flops if causal else 2 * s.batch * s.n_heads * (s.qk_dim + s.value_dim) * s.seq_q * s.seq_kv
        return {"flops": flops, "useful_flops": flops, "executed_flops": executed if backend.executes else None,
                "bytes": attention_bytes(s), "model_mem_bytes": model_mem_bytes(s, backend.memory, "fwd"),
                "real_tokens": s.batch * s.seq_q, **dense_kv_fields(case)}

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        """The dense call's, and a tree's boolean mask per (query, key)."""
        s = case.shape
        return (model_mem_bytes(s, backend.memory, "fwd") or 0) + s.seq_q * s.seq_kv

    def predicted_flops(self, case: Case) -> float:
        return draft_flops(case.shape)

    def reference_flops(self, shape: AttentionShape, pass_: str) -> float:
        return 2 * shape.batch * shape.n_heads * (shape.qk_dim + shape.value_dim) * shape.seq_q * shape.seq_kv

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        return draft_check_shape(shape)

    def setup(self, case: Case) -> None:
        if case.pass_ != "fwd":
            raise Unsupported(FORWARD_ONLY)
        why = None if case.shape.draft.is_chain else takes_tree(get_backend(case.backend))  # type: ignore[union-attr]
        if why:
            raise Unsupported(f"{why}: it takes no draft tree (a chain is the causal mask, which it runs)")
        return None

    def check(self, case: Case, setup: Any, references: ReferenceCache) -> tuple[Check, float]:
        return verify_check(case.backend, self.check_shape(case.shape), case.device, references)

    def gradients(self, case: Case, setup: Any) -> Check:
        raise Unsupported(FORWARD_ONLY)

    def timed_call(self, case: Case, setup: Any) -> Callable[[], object]:
        """The backend on the case's own shape (inputs of another seed than the check's), its cache rotated; its
        `after` gives the record the BlockMask's build (flex) and total_s."""
        from bench.backends.base import bind
        from bench.kinds.guards import TimedGuard
        from bench.reference import make_inputs, reference_attention

        s = case.shape
        q, k, v = make_inputs(s, case.device, seed=1)
        keep = tree_keep(s, case.device)
        fn = bind(get_backend(case.backend).fn, CAUSAL, s.score, keep)
        exact = draft_check_shape(s) == s
        allowed = walked_visibility(s.draft, s.seq_kv) if exact else None  # type: ignore[arg-type]
        guard = TimedGuard({"q": q, "k": k, "v": v}, (lambda t: reference_attention(
            t["q"], t["k"], t["v"], allowed=allowed)) if exact else None, s.out_shape)
        call = guarded_call(fn, (q, k, v), guard, False, s.out_shape, cold=cold_inputs(case))
        call.after = lambda case_budget_s, median_s: build_apart(case, keep, median_s)  # type: ignore[attr-defined]
        return call


def verify_check(backend: str, shape: AttentionShape, device: str,
                 references: ReferenceCache | None = None) -> tuple[Check, float]:
    """`backend` verifying the shape's draft (seed 0) against the float64 reference under the walked visibility, and
    the seconds of the checked call (Unsupported where it cannot run it)."""
    import torch

    from bench.backends import attention
    from bench.measure.timer import sync
    from bench.reference import TOLERANCES, Check, compare_to_reference, make_inputs, reference_attention

    q, k, v = make_inputs(shape, device, seed=0)
    keep = tree_keep(shape, device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = attention(q, k, v, backend=backend, mask=CAUSAL, sparse=keep)
    sync(device)
    seconds = time.perf_counter() - t0
    if tuple(out.shape) != shape.out_shape:
        return Check(False, float("inf"), *TOLERANCES[q.dtype]), seconds
    allowed = walked_visibility(shape.draft, shape.seq_kv)  # type: ignore[arg-type]
    ref = (references or ReferenceCache()).get(("draft", shape, device),
                                               lambda: reference_attention(q, k, v, allowed=allowed))
    return compare_to_reference(out, ref), seconds


def build_apart(case: Case, keep: KeepSet | None, median_s: float | None) -> dict[str, Any]:
    """FlexAttention's BlockMask build for a tree (seconds, and the FLOPs its blocks execute), and total_s."""
    if keep is None or "build_s" not in keep.derived:
        return {}
    s = case.shape
    build = keep.derived["build_s"]
    out: dict[str, Any] = {"block_mask_build_s": build}
    covered = keep.derived.get("pairs_per_sequence")
    if covered is not None:
        out["executed_flops"] = int(2 * s.batch * s.n_heads * (s.qk_dim + s.value_dim) * covered)
    if median_s:
        out["total_s"] = median_s + build
    return out
