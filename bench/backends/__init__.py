"""The registry of attention backends and the one public entry point, `attention`.

Adding a backend: one module with its function (q, k, v, *, mask, score) -> out, and one line in BACKENDS
with its traits. The mask (bench.problem.masks.Mask: causal, window, chunk) and the score variant
(bench.problem.scores.Score:
softcap, ALiBi, sinks with their (Hq,) logits) come whole; a backend that runs a variant beyond causal and window
lists it in its `variants` trait, and is never called with one it does not list. A function written to the keyword
signature (q, k, v, *, causal, window[, chunk, softcap, alibi, sinks]) is adapted (bench.backends.base).
A backend that takes a V of another head dim than Q/K (MLA, bench.kinds.mla_calls) lists "mla" among its variants; the
others
are refused such calls. A backend that takes sparse attention lists the sparsity kinds in its `sparsity` trait and
is then called with sparse= (bench.problem.keepset.KeepSet: the keep-set as tokens, blocks or top-K indices) on those
cases
only; its `executes` trait says what it computes for a mask or a keep-set (bench.counts.pairs), for executed FLOPs.
A linear-attention backend (bench.backends.linear) lists its methods in its `linear` trait: it is offered the linear
cases of those methods alone (bench.kinds.linear), and a softmax backend is never offered a linear case.
A cascade backend (bench.backends.cascade) says so in its `cascade` trait: it is offered the shared-prefix cases
alone (bench.kinds.prefix), which every dense backend also runs, as plain attention over each request's context.
Everything else (the sweeps' CPU lists, the memory model, the claims, the figures' colours) reads the traits here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.backends import outside
from bench.backends.base import Backend, Deferred, Unsupported
from bench.backends.cascade import CASCADE_BACKENDS
from bench.backends.linear import LINEAR_BACKENDS
from bench.errors import InputError
from bench.problem import shapes
from bench.problem.masks import Mask
from bench.problem.scores import OPT_IN_VARIANTS, Score, variants_used
from bench.problem.shapes import ShapeError, check_heads
from bench.problem.sparsity import SPARSITY_KINDS

if TYPE_CHECKING:
    import torch

    from bench.problem.keepset import KeepSet

CUDA = ("cuda",)
HALF = ("bf16", "fp16")
PADDED = ("padded", "paged-gather")  # sdpa's forced kernels: a padded batch with a padding mask
# SDPA takes one additive mask: ALiBi's bias and a chunk mask fit in it, a cap (tanh) and a sink (a softmax term) don't
SDPA_VARIANTS = ("alibi", "chunk", "mla")  # mla: torch's math kernel takes D_v != D_qk; a forced kernel that
# refuses it says so in torch's own words (CPU flash: "requires q,k,v to have the same last dimension")
SDPA_NOTES = (("softcap", "a softcap applies tanh to the scores, which SDPA's additive attn_mask cannot express"),
              ("sinks", "a sink adds a term to the softmax's denominator, which SDPA's additive attn_mask cannot "
                        "express"))
FLASH_NOTES = (("sinks", "flash_attn_func has no sink logits"),
               ("chunk", "flash_attn_func's masks are causal and sliding windows, not chunks"),
               ("mla", "flash_attn_func takes one head dim for K and V (MLA's D_v differs from D_qk); FlashMLA and "
                       "FlashInfer's MLA kernels are not wired in"))

# Each function is imported on its first call (its module imports torch): bench.backends.base.Deferred
SDPA = "bench.backends.sdpa:make"
HF = "bench.backends.hf:make"
HF_MASK = "bench.backends.hf:time_mask_build"
HF_IMPORTS = ("transformers.modeling_utils", "transformers.masking_utils")  # 3.7 s of a new process's first call
# the hf-* backends: transformers' attn_implementation each one calls (transformers' default is "sdpa")
TRANSFORMERS_IMPLEMENTATIONS = {"hf-eager": "eager", "hf-sdpa": "sdpa", "hf-flex": "flex_attention",
                                "hf-flash2": "flash_attention_2", "hf-flash3": "flash_attention_3"}
TRANSFORMERS_DEFAULT = "hf-sdpa"
HF_NOTES = (("softcap", "transformers' sdpa path refuses softcap (Gemma-2 runs eager or flex_attention)"),
            ("sinks", "transformers' sdpa path takes no sinks (gpt-oss runs eager or flex_attention)"),
            ("alibi", "transformers' ALiBi models add their bias inside the model, not through these paths"),
            ("chunk", "transformers builds a chunked mask from the model's own padding arguments: not wired in"))
# sparse cases: the dense kernels take any keep-set as a boolean mask (and compute every pair), flex as a BlockMask
SPARSE = SPARSITY_KINDS
BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in [
        Backend("naive", Deferred("bench.backends.naive:naive_attention"),
                "textbook softmax(QK^T/sqrt(D))V, materialises the score matrix", "materialising", "#555555", "o",
                layouts=("per-sequence", "paged-gather"), variants=OPT_IN_VARIANTS, sparsity=SPARSE, executes="all"),
        Backend("sdpa", Deferred(SDPA, "sdpa"), "torch SDPA, torch's automatic kernel choice", "tiled", "#1f77b4",
                "s", layouts=("nested", "paged-gather"), variants=SDPA_VARIANTS, variant_notes=SDPA_NOTES,
                sparsity=SPARSE, executes="causal",
                chooses=("sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")),
        Backend("sdpa-math", Deferred(SDPA, "sdpa-math"), "torch SDPA forced to the math (reference) kernel",
                "materialising", "#9467bd", "D", layouts=PADDED, variants=SDPA_VARIANTS, variant_notes=SDPA_NOTES,
                sparsity=SPARSE, executes="all"),
        Backend("sdpa-flash", Deferred(SDPA, "sdpa-flash"), "torch SDPA forced to its FlashAttention kernel", "tiled",
                "#d62728", "^", layouts=PADDED, variants=SDPA_VARIANTS, variant_notes=SDPA_NOTES, sparsity=SPARSE,
                executes="causal"),
        Backend("sdpa-efficient", Deferred(SDPA, "sdpa-efficient"), "torch SDPA forced to memory-efficient", "tiled",
                "#ff7f0e", "v", devices=CUDA, layouts=PADDED, variants=SDPA_VARIANTS, variant_notes=SDPA_NOTES,
                sparsity=SPARSE, executes="causal"),
        Backend("sdpa-cudnn", Deferred(SDPA, "sdpa-cudnn"), "torch SDPA forced to cuDNN attention", "tiled",
                "#8c564b", "P", devices=CUDA, layouts=PADDED, variants=SDPA_VARIANTS, variant_notes=SDPA_NOTES,
                sparsity=SPARSE, executes="causal"),
        Backend("flex", Deferred("bench.backends.flex:flex_attention"),
                "torch.compile(flex_attention) with block masks", "tiled", "#2ca02c", "*",
                layouts=("packed", "paged-mask"), variants=OPT_IN_VARIANTS, compiles=True, sparsity=SPARSE,
                executes="blocks"),
        Backend("flash-attn", Deferred("bench.backends.flash_attn:flash_attn_attention"),
                "flash_attn.flash_attn_func (CUDA only)", "tiled", "#e377c2", "h", devices=CUDA, dtypes=HALF,
                layouts=("varlen", "paged-table"), variants=("softcap", "alibi"), variant_notes=FLASH_NOTES,
                executes="visible"),
        Backend("topk-gather", Deferred("bench.backends.topk:topk_gather_attention"),
                "top-K sparse attention: gathers each query's K selected keys and attends over them (DSA's kernel, "
                "in torch ops)", "tiled", "#17becf", "p", variants=("mla",), sparsity=("topk",),
                executes="selected", dense=False),
        # transformers' attn_implementation paths (the optional [hf] extra), each with the mask transformers builds
        Backend("hf-eager", Deferred(HF, "hf-eager"), "transformers' eager attention (attn_implementation='eager'), "
                "with its own additive mask", "materialising", "#c49c94", "+", opt_in=True, executes="all",
                wraps="naive", mask_build=HF_MASK, variants=("softcap", "sinks"), variant_notes=HF_NOTES,
                imports=HF_IMPORTS),
        Backend("hf-sdpa", Deferred(HF, "hf-sdpa"), "transformers' sdpa attention (attn_implementation='sdpa', its "
                "default), with its own boolean mask", "tiled", "#aec7e8", "4", opt_in=True, wraps="sdpa",
                mask_build=HF_MASK, variant_notes=HF_NOTES, imports=HF_IMPORTS),
        Backend("hf-flex", Deferred(HF, "hf-flex"), "transformers' flex attention (attn_implementation="
                "'flex_attention'), with its own BlockMask", "tiled", "#98df8a", "3", opt_in=True, compiles=True,
                wraps="flex", mask_build=HF_MASK, variants=("softcap", "sinks"), variant_notes=HF_NOTES,
                imports=HF_IMPORTS),
        *LINEAR_BACKENDS,  # linear attention (bench.backends.linear): offered linear cases of their methods alone
        *CASCADE_BACKENDS,  # cascade attention (bench.backends.cascade): offered shared-prefix batches alone
    ]
}


class UnknownBackend(InputError):
    """A backend name the registry does not know."""


def get_backend(name: str) -> Backend:
    """A registered backend, or one from outside (MODULE:FUNCTION, or an `attnbench.backends` entry point's name:
    bench.backends.outside), resolved on first use; UnknownBackend (or the outside one's error) otherwise."""
    if name in BACKENDS:
        return BACKENDS[name]
    found = outside.resolve(name)
    if found is None:
        raise UnknownBackend(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}, an installed "
                             f"{outside.ENTRY_POINT_GROUP} entry point, or MODULE:FUNCTION")
    return found


def backends_for(device: str) -> tuple[str, ...]:
    """The registered backends that can run on `device`, in registry order, but for those that run only when named
    (opt_in)."""
    return tuple(name for name, b in BACKENDS.items() if device in b.devices and not b.opt_in)


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q (B, Hq, Sq, D), k (B, Hkv, Skv, D) and v (B, Hkv, Skv, D_v), one dtype and device; D_v != D is MLA's."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ShapeError(f"{name} must be 4-D (B, H, S, D), got shape {tuple(t.shape)}")
    if k.shape[:3] != v.shape[:3]:
        raise ShapeError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape in (B, Hkv, Skv) "
                         "(only the head dim may differ: MLA)")
    if q.shape[0] != k.shape[0]:
        raise ShapeError(f"batch of q ({q.shape[0]}) != batch of k/v ({k.shape[0]})")
    if q.shape[3] != k.shape[3]:
        raise ShapeError(f"head_dim of q ({q.shape[3]}) != head_dim of k/v ({k.shape[3]})")
    check_heads(q.shape[1], k.shape[1])
    if not (q.dtype == k.dtype == v.dtype):
        raise ShapeError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ShapeError(f"q, k, v devices differ: {q.device}, {k.device}, {v.device}")


def variant_values(q: torch.Tensor, mask: Mask | str | None = None, score: Score | str | None = None, *,
                   causal: bool = False, window: int | None = None, chunk: int | None = None,
                   softcap: float | None = None, alibi: bool = False,
                   sinks: torch.Tensor | None = None) -> tuple[Mask, Score]:
    """The call's mask and score values: given whole (a value or its text), or by the keywords (not both); the
    score's sink logits bound (given, else seeded: bench.problem.scores.sink_logits) and checked against q's heads."""
    try:
        if mask is None:
            mask = Mask(bool(causal), window, chunk)
        elif causal or window is not None or chunk is not None:
            raise ShapeError("give the mask as mask= or as causal/window/chunk, not both")
        elif isinstance(mask, str):
            mask = Mask.parse(mask)
        if score is None:
            score = Score(softcap, bool(alibi), sinks is not None, sinks)
        elif softcap is not None or alibi or sinks is not None:
            raise ShapeError("give the score variant as score= or as softcap/alibi/sinks, not both")
        elif isinstance(score, str):
            score = Score.parse(score)
    except ShapeError:
        raise
    except InputError as err:  # a malformed mask or score is a shape error, as it always was
        raise ShapeError(str(err)) from None
    if not isinstance(mask, Mask) or not isinstance(score, Score):
        raise ShapeError(f"mask={mask!r} and score={score!r}: a bench.problem.masks.Mask and a "
                         "bench.problem.scores.Score (or text)")
    import torch

    score = score.with_logits(q.shape[1], q.device)
    logits = score.sink_logits
    if score.sinks and (not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (q.shape[1],)):
        raise ShapeError(f"sinks must be a ({q.shape[1]},) tensor, one logit per query head, not "
                         f"{tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__}")
    return mask, score


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, backend: str, mask: Mask | str | None = None,
              score: Score | str | None = None, causal: bool = False, window: int | None = None,
              chunk: int | None = None, softcap: float | None = None, alibi: bool = False,
              sinks: torch.Tensor | None = None, sparse: KeepSet | None = None) -> torch.Tensor:
    """Attention with q (B, Hq, Sq, D), k (B, Hkv, Skv, D), v (B, Hkv, Skv, D_v) -> (B, Hq, Sq, D_v), scale
    1/sqrt(D). D_v != D (MLA's calls, bench.kinds.mla_calls) only for backends whose variants list "mla".

    The mask as mask= (a bench.problem.masks.Mask or its text: "window:256") or by causal/window/chunk; masks are
    bottom-right aligned (see bench.problem.masks), a window or a chunk implies causal. The score variant as score= (a
    bench.problem.scores.Score or its text: "softcap:50") or by softcap X, alibi (the paper's slopes for Hq heads),
    sinks
    (one logit per query head; score="sinks": seeded ones). sparse= is a sparse case's keep-set
    (bench.problem.keepset.KeepSet, ANDed with the mask; it takes no score variant). Raises Unsupported when `backend`
    cannot
    run these inputs, variants or sparsity here, and never falls back to another kernel or approximates a variant.
    """
    impl = get_backend(backend)
    check_inputs(q, k, v)
    mask, score = variant_values(q, mask, score, causal=causal, window=window, chunk=chunk, softcap=softcap,
                                 alibi=alibi, sinks=sinks)
    if mask.causal and q.shape[2] > k.shape[2]:
        raise ShapeError(f"seq_q={q.shape[2]} > seq_kv={k.shape[2]} with a causal mask leaves queries "
                         "with no visible key")
    # both reasons where both apply: a CUDA-only kernel that also lacks a variant says so on a CPU too
    kind = check_sparse(q, k, mask, score, sparse)
    reasons = [impl.unsupported_reason(q.device.type, shapes.DTYPE_NAMES.get(q.dtype, str(q.dtype))),
               impl.variant_reason(variants_used(mask, score, mla=v.shape[3] != k.shape[3])),
               impl.sparsity_reason(kind)]
    if any(reasons):
        raise Unsupported("; ".join(why for why in reasons if why))
    if kind == "none":
        return impl.fn(q, k, v, mask=mask, score=score)
    return impl.fn(q, k, v, mask=mask, score=score, sparse=sparse)


def check_sparse(q: torch.Tensor, k: torch.Tensor, mask: Mask, score: Score, sparse: KeepSet | None) -> str:
    """The call's sparsity kind ('none' without a keep-set), after checking the keep-set fits the call."""
    if sparse is None or not sparse.sparsity.sparse:
        return "none"
    from bench.problem.keepset import KeepSet

    if not isinstance(sparse, KeepSet):
        raise ShapeError(f"sparse={type(sparse).__name__}: a bench.problem.keepset.KeepSet")
    if (sparse.seq_q, sparse.seq_kv) != (q.shape[2], k.shape[2]) or sparse.mask != mask:
        raise ShapeError(f"the keep-set is for seq_q={sparse.seq_q}, seq_kv={sparse.seq_kv}, mask "
                         f"{sparse.mask.label}; the call has seq_q={q.shape[2]}, seq_kv={k.shape[2]}, "
                         f"mask {mask.label}")
    if sparse.indices is not None and sparse.indices.shape[0] != q.shape[0]:
        raise ShapeError(f"the keep-set's top-K indices are for batch {sparse.indices.shape[0]}, not {q.shape[0]}")
    if score.variants:
        raise ShapeError(f"a sparse call takes no score variant, not {score.label}")
    return sparse.sparsity.kind


__all__ = ["BACKENDS", "Backend", "Unsupported", "attention", "backends_for", "get_backend"]
