"""The conformance run a kernel author starts with: a backend against the float64 oracle over every head layout,
mask and length pattern attnbench sweeps, in each dtype it claims, forward and (when it claims one) backward.

One group per (pass, dtype, variant, mask); each group runs three shapes with odd sizes, so that a kernel tuned
for powers of two is caught: square (Sq = Skv), Sq < Skv (a chunk of prefill against a longer cache), and decode
(one query). MLA (bench.kinds.mla_calls; forward only, as it is timed) runs its expanded form on the square and Sq <
Skv shapes
(D_qk = 24, D_v = 20) and its absorbed form on decode (D_qk = rank + rope = 48, D_v = rank = 40, V a view of K),
each checked end to end against the float64 expanded formula.
A backend whose `sparsity` trait lists tree (speculative drafts, bench.kinds.draft) gets one forward group per (dtype,
GQA/MQA) of draft trees over a short cache (TREES), against the visibility walked from each tree's parent list.
A backend whose `sparsity` trait lists sparse kinds also gets one group per (pass, dtype, GQA/MQA, kind), causal, on
lengths the kinds can take (SPARSE_LENGTHS; SPARSE_KINDS gives each kind's sparsity): the keep-set
(bench.problem.keepset)
is handed to it as sparse= and to the reference; a backend that declares none is never offered a sparse group.
`bench check` prints one row per group; bench/conformance/test_backend.py runs the same groups under
pytest (`pytest --pyargs bench.conformance --attn-backend mypkg.attn:fn`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from bench.backends import Unsupported, get_backend
from bench.kinds.draft import verify_check
from bench.kinds.mla_calls import check_mla
from bench.problem.draft import Draft
from bench.problem.masks import Mask
from bench.problem.shapes import DTYPES, AttentionShape, MlaDims
from bench.problem.sparsity import Sparsity
from bench.reference import GRAD_TOLERANCES, Check, check_backend, check_gradients

# (Hq, Hkv) per variant; GQA with 3 query heads per KV head
VARIANT_HEADS = {"mha": (4, 4), "gqa": (6, 2), "mqa": (4, 1), "mla": (4, 1)}
MLA = {"v_head_dim": 20, "kv_lora_rank": 40, "rope_dim": 8}  # head_dim 24 = qk_nope 16 + rope 8
MASKS = {"none": Mask(), "causal": Mask(causal=True), "window": Mask(window=7)}
# (Sq, Skv): odd, not multiples of any block size
LENGTHS = {"square": (37, 37), "sq<skv": (13, 45), "decode": (1, 67)}
BATCH, HEAD_DIM = 2, 24  # two sequences, so batch strides are checked; D not a power of two
# sparse groups: lengths a block of 8 divides (Sq need not be), and each kind at a budget that really cuts them
SPARSE_LENGTHS = {"square": (48, 48), "sq<skv": (13, 48), "decode": (1, 72)}
SPARSE_KINDS = {"block": "block:8:0.5", "docs": "docs:3", "global": "global:4+window:7", "topk": "topk:9"}
# a backend that takes draft trees (sparsity trait "tree"): a tree, an engine's preset and a tree of several roots, each
# verified over a cache of a few dozen keys, forward only (verification is inference)
TREES = {"tree": ("tree:2,2", 48), "preset": ("sglang", 40), "roots": ("parents:r.0.r.2.1.0", 13)}


@dataclass(frozen=True)
class Group:
    pass_: str  # fwd | bwd
    dtype: str
    variant: str
    mask: str
    sparsity: str = "none"  # a sparse kind (SPARSE_KINDS), or none

    @property
    def label(self) -> str:
        sparse = f" {self.sparsity}" if self.sparsity != "none" else ""
        return f"{self.pass_:<3} {self.dtype:<4} {self.variant} {self.mask}{sparse}"

    def shapes(self) -> Iterator[tuple[str, AttentionShape]]:
        hq, hkv = VARIANT_HEADS[self.variant]
        mask = MASKS[self.mask]
        if self.sparsity == "tree":
            for name, (text, skv) in TREES.items():
                draft = Draft.parse(text)
                yield name, AttentionShape(BATCH, draft.n, skv, hq, hkv, HEAD_DIM, self.dtype, mask, draft=draft)
            return
        if self.sparsity != "none":
            for name, (sq, skv) in SPARSE_LENGTHS.items():
                yield name, AttentionShape(BATCH, sq, skv, hq, hkv, HEAD_DIM, self.dtype, mask,
                                           sparsity=Sparsity.parse(SPARSE_KINDS[self.sparsity]))
            return
        for name, (sq, skv) in LENGTHS.items():
            if self.variant == "mla":
                form = "absorbed" if name == "decode" else "expanded"
                yield name, AttentionShape(BATCH, sq, skv, hq, 1 if form == "absorbed" else hq, HEAD_DIM, self.dtype,
                                           mask, mla=MlaDims(form, **MLA))
                continue
            yield name, AttentionShape(BATCH, sq, skv, hq, hkv, HEAD_DIM, self.dtype, mask)


@dataclass(frozen=True)
class Row:
    group: Group
    status: str  # pass | fail | unsupported | error
    detail: str

    @property
    def failed(self) -> bool:
        return self.status in ("fail", "error")


def groups(backend: str, dtypes: tuple[str, ...] | None = None,
           variants: tuple[str, ...] | None = None) -> list[Group]:
    """Every group for `backend`: the dtypes given (default: the ones it claims), the variants given (default:
    MHA/GQA/MQA, and MLA where its `variants` trait lists mla), backward when it claims one."""
    b = get_backend(backend)
    passes = ("fwd", "bwd") if b.backward else ("fwd",)
    variants = variants or tuple(v for v in VARIANT_HEADS if v != "mla" or "mla" in b.variants)
    dense = [Group(p, dt, var, mask) for p in passes for dt in (dtypes or b.dtypes) for var in variants
             for mask in MASKS if not (var == "mla" and p == "bwd")] if b.dense else []  # MLA: forward only
    sparse = [Group(p, dt, var, "causal", kind) for p in passes for dt in (dtypes or b.dtypes)
              for var in variants if var in ("gqa", "mqa") for kind in SPARSE_KINDS if kind in b.sparsity]
    trees = [Group("fwd", dt, var, "causal", "tree") for dt in (dtypes or b.dtypes) for var in variants
             if var in ("gqa", "mqa") and "tree" in b.sparsity]
    return dense + sparse + trees


def _one(backend: str, group: Group, shape: AttentionShape, device: str) -> Check:
    if shape.mla is not None:
        return check_mla(backend, shape, device)
    if shape.draft is not None:
        return verify_check(backend, shape, device)[0]
    sparse = None
    if shape.sparsity.sparse:
        from bench.kinds.sparse import keep_set

        sparse = keep_set(shape, device, seed=0)
    if group.pass_ == "fwd":
        return check_backend(backend, shape, device, sparse=sparse)
    return check_gradients(backend, shape, device, sparse=sparse)


def run_group(backend: str, group: Group, device: str) -> Row:
    """The group's three shapes: pass when all are within tolerance, else the worst shape's error."""
    checked: list[tuple[str, Check]] = []
    for name, shape in group.shapes():
        try:
            checked.append((name, _one(backend, group, shape, device)))
        except Unsupported as err:
            return Row(group, "unsupported", str(err))
        except Exception as err:  # a kernel that raises is a finding: its first line, the shape that raised
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            return Row(group, "error", f"{name} {shape_text(shape)}: {type(err).__name__}: {first}"[:300])
    # the worst shape: a failing one before any passing one, then the largest error
    name, worst = max(checked, key=lambda nc: (not nc[1].ok, nc[1].max_abs_err))
    if worst.ok:
        return Row(group, "pass", f"max err {worst.max_abs_err:.2g}")
    if group.pass_ == "bwd":
        what, tol = "max rel grad err", f"tol {worst.atol:g}"
    else:
        what, tol = "max |err|", f"tol {worst.atol:g} + {worst.rtol:g}|ref|"
    return Row(group, "fail", f"{name} {shape_text(shape_of(group, name))}: {what} {worst.max_abs_err:.3g} > {tol}")


def shape_of(group: Group, name: str) -> AttentionShape:
    return dict(group.shapes())[name]


def shape_text(s: AttentionShape) -> str:
    form = f" MLA {s.mla.form}" if s.mla else ""
    sparse = f" {s.sparsity.label}" if s.sparsity.sparse else f" draft {s.draft.label}" if s.draft else ""
    return f"(Hq={s.n_heads} Hkv={s.n_kv_heads} Sq={s.seq_q} Skv={s.seq_kv}{form}{sparse})"


def check(backend: str, device: str = "cpu", dtypes: tuple[str, ...] | None = None,
          variants: tuple[str, ...] | None = None) -> list[Row]:
    """Every group of `backend` on `device` (of the variants given, default all), in order."""
    return [run_group(backend, g, device) for g in groups(backend, dtypes, variants)]


__all__ = ["DTYPES", "GRAD_TOLERANCES", "VARIANT_HEADS", "Group", "Row", "check", "groups", "run_group"]
