"""The one contract every backend shares."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from bench.problem.masks import Mask
from bench.problem.scores import Score

if TYPE_CHECKING:
    import torch


class Unsupported(RuntimeError):
    """This backend cannot run these inputs on this device; the message is the reason."""


class AttentionFn(Protocol):
    """A backend: q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D) -> (B, Hq, Sq, D), the mask and the score variant
    whole (bench.problem.masks.Mask, bench.problem.scores.Score, its sink logits bound). A function written to the
    keyword
    signature (q, k, v, *, causal, window[, chunk, softcap, alibi, sinks]) is adapted (`keyword_backend`).
    A backend whose `sparsity` trait lists a sparsity kind is also called with sparse= (bench.problem.keepset.KeepSet)
    on
    the cases of that kind; every other call has no sparse keyword."""

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask,
                 score: Score) -> torch.Tensor: ...


ADAPTED = "__attnbench_keywords__"  # on an adapter: the keyword-signature function it calls


def takes_values(fn: Callable[..., Any]) -> bool:
    """Whether `fn` takes the mask and score values (mask=, score=) rather than the keywords: an adapter does, and so
    does a function with a `mask` parameter."""
    if hasattr(fn, ADAPTED):
        return True
    try:
        return "mask" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the documented keyword one
        return False


def keywords_of(mask: Mask, score: Score) -> dict[str, Any]:
    """The keywords a function written to the keyword signature gets: causal and window always, chunk, softcap,
    alibi and sinks (the (Hq,) logits) only when asked for, so one that runs none of them keeps (causal, window)."""
    out: dict[str, Any] = {"causal": mask.causal, "window": mask.window}
    if mask.chunk is not None:
        out["chunk"] = mask.chunk
    if score.softcap is not None:
        out["softcap"] = score.softcap
    if score.alibi:
        out["alibi"] = True
    if score.sinks:
        out["sinks"] = score.sink_logits
    return out


def keyword_backend(fn: Callable[..., Any]) -> AttentionFn:
    """`fn` as a backend: itself when it takes the values, else an adapter that translates them into its keywords
    (the signature README.md documents for kernels of one's own); a keep-set passes through as sparse=."""
    if takes_values(fn):
        return fn  # type: ignore[return-value]

    @functools.wraps(fn)
    def adapter(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask, score: Score,
                **sparse: Any) -> torch.Tensor:
        return fn(q, k, v, **keywords_of(mask, score), **sparse)

    setattr(adapter, ADAPTED, fn)
    return adapter  # type: ignore[return-value]


class Deferred:
    """A built-in backend's function, imported on its first call: "module:attribute", called with `args` when given
    (a factory). Its module imports torch, which a process that only reads the registry never needs: `bench run`'s
    parent plans and hands the cases to a worker."""

    def __init__(self, target: str, *args: Any) -> None:
        self.target, self.args = target, args

    @functools.cached_property
    def resolved(self) -> AttentionFn:
        module, _, attribute = self.target.partition(":")
        fn = getattr(importlib.import_module(module), attribute)
        return fn(*self.args) if self.args else fn

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask, score: Score,
                 **sparse: Any) -> torch.Tensor:
        return self.resolved(q, k, v, mask=mask, score=score, **sparse)

    def __repr__(self) -> str:
        return f"Deferred({self.target!r}{''.join(f', {a!r}' for a in self.args)})"


def bind(fn: AttentionFn, mask: Mask, score: Score, sparse: Any = None
         ) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """`fn` with the mask and score (and a sparse case's keep-set) fixed, for a timed call: an adapter's keyword
    function gets its keywords computed once here, and a deferred built-in is imported here, so the timed call pays
    for neither."""
    if isinstance(fn, Deferred):
        fn = fn.resolved
    extra = {} if sparse is None else {"sparse": sparse}
    keywords = getattr(fn, ADAPTED, None)
    if keywords is not None:
        return functools.partial(keywords, **keywords_of(mask, score), **extra)
    return functools.partial(fn, mask=mask, score=score, **extra)


Memory = Literal["materialising", "tiled"]
ALL_DTYPES = ("fp32", "bf16", "fp16")
# How a backend takes a serving batch (bench.serving), in the layout its own users would give it:
#   per-sequence  one call per sequence, nothing padded
#   nested        torch nested jagged tensors (one call, torch's ragged layout)
#   padded        a (B, H, longest, D) batch with a boolean padding mask: padding is computed and thrown away
#   packed        every sequence packed into one (1, H, total, D) call under a document mask (block-sparse)
#   varlen        the packed (total, H, D) layout with cumulative sequence lengths (flash-attn's varlen)
# and a paged KV cache (pages scattered over a pool, an int32 block table):
#   paged-gather  gathers each sequence's pages inside the timed call, then runs its ragged layout
#   paged-mask    the pool as one sequence under a paged block mask, one KV block per page
#   paged-table   reads the pool through the block table itself (flash-attn's block_table)
Layout = Literal["per-sequence", "nested", "padded", "packed", "varlen", "paged-gather", "paged-mask", "paged-table"]
RAGGED_LAYOUTS = ("per-sequence", "nested", "padded", "packed", "varlen")
PAGED_LAYOUTS = ("paged-gather", "paged-mask", "paged-table")
# Layouts that give every sequence its own query and key lengths (each bottom-right aligned): the ones a mixed batch
# (prefill chunks beside decode steps, or whole prompts beside continued ones) fits. Nested tensors' is_causal is
# top-left aligned, so they take only batches where every sequence is a whole prompt or a single-query step.
MIXED_LAYOUTS = ("per-sequence", "padded", "packed", "varlen")


@dataclass(frozen=True)
class Backend:
    """A backend's registry entry: its function and every trait the rest of the project reads."""

    name: str
    fn: AttentionFn
    summary: str
    # materialising: builds the Sq x Skv score matrix (O(S^2) memory); tiled: flash-style, O(S) above the output
    memory: Memory
    color: str  # one colour in every figure of every report
    marker: str  # matplotlib marker, same reason
    devices: tuple[str, ...] = ("cpu", "cuda")
    dtypes: tuple[str, ...] = ALL_DTYPES
    # the serving layouts it takes: at most one ragged layout and one paged layout (see Layout); none: serving
    # batches are unsupported for it
    layouts: tuple[Layout, ...] = ()
    compiles: bool = False  # its first call on a new shape compiles (torch.compile): seconds, not microseconds
    # modules its first call in a new process spends seconds importing (transformers), beside the compiler that
    # `compiles` implies: the deciding rounds' workers are forked from a server that has them (bench.engine.forked)
    imports: tuple[str, ...] = ()
    backward: bool = True  # False: fwd+bwd cases are unsupported (a forward-only kernel)
    origin: str = "built-in"  # where it comes from: built-in, `import MODULE:FUNCTION`, an entry point
    label: str = ""  # a display name its author chose (bench.backend(name=...)); the id keeps `name`
    # the attention variants it runs exactly (bench.problem.scores.OPT_IN_VARIANTS: softcap, alibi, sinks, chunk); any
    # other is
    # Unsupported before its function is called, never approximated
    variants: tuple[str, ...] = ()
    # (variant, why it cannot run that variant): the reason its Unsupported gives, beside the generic one
    variant_notes: tuple[tuple[str, str], ...] = ()
    # the sparsity kinds it takes a keep-set for (bench.problem.sparsity.SPARSITY_KINDS: block, docs, global, topk); it
    # is
    # never offered a sparse case of any other kind
    sparsity: tuple[str, ...] = ()
    # how it executes a mask or a keep-set (bench.counts.pairs.EXECUTES), for its executed FLOPs; None: unknown
    executes: str | None = None
    dense: bool = True  # False: it runs sparse attention only (a keep-set is its input), never a dense case
    # the linear-attention methods it runs (bench.problem.linear.LINEAR_METHODS: gdn, linear); such a backend (dense
    # False) is offered the linear cases of those methods alone, and a softmax backend never a linear case
    linear: tuple[str, ...] = ()
    # True: it runs a shared-prefix batch by the cascade split (bench.backends.cascade; dense False): offered the
    # shared-prefix cases alone (bench.kinds.prefix), where every dense backend runs them as plain attention
    cascade: bool = False
    # the backends whose kernels it picks among by itself (torch SDPA's dispatcher): the report measures its choice
    # against the fastest of them
    chooses: tuple[str, ...] = ()
    # True: run only when named (--backend); the profiles' default lists leave it out (an optional package's
    # wrapper of kernels the list already times)
    opt_in: bool = False
    # the registry backend whose kernel it reaches through another library (transformers' sdpa path calls torch
    # SDPA): the report measures what the wrapping costs against that backend and the kernels it chooses among
    wraps: str | None = None
    # "module:function" timing what its library builds once per forward beside the kernel (transformers' mask):
    # called (backend name, shape, device, case_budget_s) after the case's timing; its median is the mask_build_s
    mask_build: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fn", keyword_backend(self.fn))

    def layout(self, kinds: tuple[str, ...]) -> Layout | None:
        """Its layout among `kinds` (RAGGED_LAYOUTS or PAGED_LAYOUTS), or None when it takes none of them."""
        return next((lay for lay in self.layouts if lay in kinds), None)

    def variant_reason(self, used: tuple[str, ...]) -> str | None:
        """Why this backend cannot run the variants `used` (bench.problem.scores.variants_used), or None."""
        missing = [name for name in used if name not in self.variants]
        if not missing:
            return None
        notes = dict(self.variant_notes)
        why = "; ".join(notes.get(name, f"it does not take {name}") for name in missing)
        takes = ", ".join(self.variants) or "none"
        return f"{self.name}: {why} (variants it runs: {takes})"

    def sparsity_reason(self, kind: str) -> str | None:
        """Why this backend cannot run a case of sparsity `kind` (bench.problem.sparsity), or None."""
        takes = ", ".join(self.sparsity) or "none"
        if kind == "none":
            if self.dense:
                return None
            if self.cascade:
                return f"{self.name}: runs shared-prefix batches by cascade only (bench run --prefix)"
            if self.linear:
                return f"{self.name}: runs linear attention only (methods it runs: {', '.join(self.linear)}; " \
                       "bench run --linear)"
            return f"{self.name}: runs sparse attention only (sparsities it runs: {takes})"
        if kind in self.sparsity:
            return None
        return f"{self.name}: takes no {kind} sparsity (sparsities it runs: {takes})"

    def linear_reason(self, method: str | None) -> str | None:
        """Why this backend cannot run a case of linear method `method` (None: softmax attention), or None."""
        if method is None:
            return None if not self.linear else self.sparsity_reason("none")
        if method in self.linear:
            return None
        return f"{self.name}: runs no {method} linear attention (methods it runs: {', '.join(self.linear) or 'none'})"

    def unsupported_reason(self, device: str, dtype: str) -> str | None:
        """Why this backend cannot run on `device` in `dtype` by its traits alone, or None."""
        if device not in self.devices:
            return f"{self.name}: runs only on {' and '.join(d.upper() for d in self.devices)}, not on {device.upper()}"
        if dtype not in self.dtypes:
            return f"{self.name}: supports {', '.join(self.dtypes)} only, not {dtype}"
        return None

    def pass_reason(self, pass_: str) -> str | None:
        """Why this backend cannot run a pass ('fwd' or 'fwd+bwd') by its traits alone, or None."""
        if pass_ != "fwd" and not self.backward:
            return f"{self.name}: declares no backward (backward=False)"
        return None
