"""The vocabulary of attention shapes: sizes, variant (MHA/GQA/MQA/MLA), dtype and mask, validated once.

MLA (multi-head latent attention, DeepSeek-V2/V3): Hq query heads over a cache of one latent c (kv_lora_rank
elements) and one rotary key k_rope (rope_dim) per token, shared by all heads. An MLA shape names its form:
  expanded (prefill, as real implementations run it): K_h = [W_UK,h c ; k_rope], V_h = W_UV,h c, so one attention
    with Hkv = Hq, D_qk = head_dim (qk_nope + rope_dim) and D_v = v_head_dim;
  absorbed (decode): q_lat,h = [W_UK,h^T q_nope,h ; q_rope,h] attends over [c ; k_rope] (Hkv = 1: MQA-shaped)
    with D_qk = kv_lora_rank + rope_dim and D_v = kv_lora_rank, then W_UV,h maps each head's output to v_head_dim.
Both forms keep the expanded form's scale 1/sqrt(head_dim) (bench.kinds.mla_calls).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from bench.errors import InputError
from bench.problem.draft import Draft
from bench.problem.linear import NO_LINEAR, Linear
from bench.problem.masks import NO_MASK, Mask
from bench.problem.prefix import check_prefix
from bench.problem.scores import NO_SCORE, Score
from bench.problem.sparsity import Sparsity

if TYPE_CHECKING:
    import torch

Variant = Literal["mha", "gqa", "mqa", "mla"]
MlaForm = Literal["expanded", "absorbed"]

# A dtype's name -> its torch attribute. The names are all a plan needs; DTYPES (name -> torch.dtype) and DTYPE_NAMES
# (its inverse) import torch, so they are made on first use (`__getattr__` below).
DTYPE_ATTRS: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SCOPES: tuple[str, ...] = ("attention", "layer")
# serving batches (bench.serving): how a batch's sequence lengths are drawn, or a mixed chunked-prefill + decode batch
LENGTHS: tuple[str, ...] = ("equal", "uniform", "zipf", "mixed")
VARIANTS: tuple[str, ...] = ("mha", "gqa", "mqa", "mla")
MLA_FORMS: tuple[str, ...] = ("expanded", "absorbed")


class ShapeError(InputError):
    """An impossible shape; the message names the field and the rule it breaks."""


def variant_of(n_heads: int, n_kv_heads: int) -> Variant:
    """MHA iff Hkv == Hq; MQA iff Hkv == 1; GQA otherwise (Hq % Hkv == 0 is checked by the caller)."""
    if n_kv_heads == n_heads:
        return "mha"
    return "mqa" if n_kv_heads == 1 else "gqa"


def check_heads(n_heads: int, n_kv_heads: int) -> None:
    _positive(n_heads=n_heads, n_kv_heads=n_kv_heads)
    if n_kv_heads > n_heads:
        raise ShapeError(f"n_kv_heads={n_kv_heads} exceeds n_heads={n_heads}")
    if n_heads % n_kv_heads:
        raise ShapeError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")


def head_dim_for(d_model: int, n_heads: int) -> int:
    """d_model split evenly over the heads (the tutorials' d_k = d_model / h)."""
    _positive(d_model=d_model, n_heads=n_heads)
    if d_model % n_heads:
        raise ShapeError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return d_model // n_heads


def case_mask(text: str) -> Mask:
    """A case's mask from its text (bench.problem.masks.Mask.parse): one kind, not a combination."""
    try:
        mask = Mask.parse(text)
    except InputError as err:
        raise ShapeError(str(err)) from None
    if "+" in mask.label:
        raise ShapeError(f"mask {text!r}: one mask per case; expected none, causal, window:<size> or chunk:<size>")
    return mask


def parse_mask(text: str) -> tuple[str, int | None]:
    """'none' | 'causal' | 'window:256' | 'chunk:8192' -> (kind, size): the window or the chunk size."""
    mask = case_mask(text)
    return mask.kind, mask.window or mask.chunk


def parse_rows(text: str) -> tuple[tuple[int, int, int], ...]:
    """'rows:12x1:640+2x512:1024' -> ((12, 1, 640), (2, 512, 1024)): groups of N sequences, each Q queries (the
    last Q of its context) over K keys; 1 <= Q <= K. A replayed trace's step, written out (bench.traces)."""
    groups = []
    for part in text.removeprefix("rows:").split("+"):
        match = re.fullmatch(r"(\d+)x(\d+):(\d+)", part)
        if not match:
            raise ShapeError(f"lengths={text!r}: each group is NxQ:K (N sequences of Q queries over K keys), "
                             f"not {part!r}")
        n, q, k = map(int, match.groups())
        if n < 1 or q < 1 or q > k:
            raise ShapeError(f"lengths={text!r}: group {part!r} needs N >= 1 and 1 <= Q <= K")
        groups.append((n, q, k))
    return tuple(groups)


def rows_label(groups: list[tuple[int, int, int]] | tuple[tuple[int, int, int], ...]) -> str:
    """The lengths text of explicit rows (parse_rows' inverse)."""
    return "rows:" + "+".join(f"{n}x{q}:{k}" for n, q, k in groups)


def _positive(**sizes: object) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ShapeError(f"{name}={value!r} must be a positive integer")


@dataclass(frozen=True)
class MlaDims:
    """MLA's own sizes (the module docstring says how each form uses them): DeepSeek-V3 is
    MlaDims("absorbed", v_head_dim=128, kv_lora_rank=512, rope_dim=64)."""

    form: MlaForm
    v_head_dim: int  # D_v of a decompressed head
    kv_lora_rank: int  # the cached latent's width
    rope_dim: int  # the shared rotary key's width (qk_rope_head_dim), part of head_dim

    def __post_init__(self) -> None:
        if self.form not in MLA_FORMS:
            raise ShapeError(f"mla_form={self.form!r} is unknown; expected one of {', '.join(MLA_FORMS)}")
        _positive(v_head_dim=self.v_head_dim, kv_lora_rank=self.kv_lora_rank, rope_dim=self.rope_dim)


@dataclass(frozen=True)
class ServingBatch:
    """A batch of sequences served together (bench.serving): how their lengths are drawn (or its explicit rows),
    and the page size of a paged KV cache; at least one of the two is set."""

    lengths: str | None = None  # equal / uniform / zipf / mixed / rows:NxQ:K+...; None: every sequence full length
    page_size: int | None = None  # tokens per page; None: a contiguous cache

    def __post_init__(self) -> None:
        if self.lengths is None and self.page_size is None:
            raise ShapeError("a serving batch needs lengths or page_size (neither: a dense batch, serving=None)")
        if self.lengths is not None and not self.lengths.startswith("rows:") and self.lengths not in LENGTHS:
            raise ShapeError(f"lengths={self.lengths!r} is unknown; expected one of {', '.join(LENGTHS)} or "
                             "rows:NxQ:K+...")
        if self.page_size is not None:
            _positive(page_size=self.page_size)

    @functools.cached_property  # read per case by the planner, the checks and the workload: parsed once
    def rows(self) -> tuple[tuple[int, int, int], ...] | None:
        """Explicit rows (parse_rows), or None for drawn lengths."""
        return parse_rows(self.lengths) if self.lengths is not None and self.lengths.startswith("rows:") else None


_VALUE_TYPES: dict[str, type] = {"mask": Mask, "score": Score, "sparsity": Sparsity, "mla": MlaDims,
                                 "serving": ServingBatch, "linear": Linear, "draft": Draft}
_OPTIONAL = ("mla", "serving", "draft")  # value fields that may be None


def parsed(call: Any, *args: Any) -> Any:
    """call(*args), its InputError (a bad mask, score or sparsity) raised as the shape's ShapeError."""
    try:
        return call(*args)
    except ShapeError:
        raise
    except InputError as err:
        raise ShapeError(str(err)) from None


DENSE = Sparsity()


@dataclass(frozen=True)
class AttentionShape:
    """One attention call: q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D); under MLA (`mla` set) the call's D_qk and
    D_v are qk_dim and value_dim (the module docstring says how each form gets them).

    The mask, the score variant and the sparsity are values (bench.problem.masks.Mask, bench.problem.scores.Score,
    bench.problem.sparsity.Sparsity); MLA's sizes and a serving batch's are small groups, None when the shape has none.
    A results record holds the shape as flat columns (COLUMNS, with their docs): shape_fields() writes them and
    shape_from_fields() reads them back, and nothing else spells them out.
    """

    batch: int
    seq_q: int
    seq_kv: int
    n_heads: int
    n_kv_heads: int
    head_dim: int  # D (MLA: D_qk of a decompressed head, qk_nope + rope_dim)
    dtype: str = "fp32"
    mask: Mask = NO_MASK
    scope: str = "attention"  # what is timed: the attention call alone, or the layer around it
    model: str | None = None  # the model whose attention geometry this is (run --model-config)
    score: Score = NO_SCORE
    sparsity: Sparsity = DENSE
    mla: MlaDims | None = None
    serving: ServingBatch | None = None
    linear: Linear = NO_LINEAR  # linear attention (bench.problem.linear) in place of softmax
    prefix: int | None = None  # a shared-prefix batch: the P tokens every request's context begins with
    draft: Draft | None = None  # a speculative-decoding draft verified over the cache (bench.problem.draft)

    def __post_init__(self) -> None:
        for name, kind in _VALUE_TYPES.items():
            value = getattr(self, name)
            if not isinstance(value, kind) and not (value is None and name in _OPTIONAL):
                raise ShapeError(f"{name}={value!r}: expected a {kind.__name__} (text such as 'causal' or "
                                 "'softcap:50' is read by shape_from_fields)")
        _positive(batch=self.batch, seq_q=self.seq_q, seq_kv=self.seq_kv, head_dim=self.head_dim)
        check_heads(self.n_heads, self.n_kv_heads)
        if self.dtype not in DTYPE_ATTRS:
            raise ShapeError(f"dtype={self.dtype!r} is unknown; expected one of {', '.join(DTYPE_ATTRS)}")
        if "+" in self.mask.label:
            raise ShapeError(f"mask {self.mask.label!r}: one mask per case; expected none, causal, window:<size> "
                             "or chunk:<size>")
        if len(self.score.variants) > 1:
            raise ShapeError(f"score {self.score.label!r}: one variant per case; expected none, softcap:<X>, alibi "
                             "or sinks")
        if self.scope not in SCOPES:
            raise ShapeError(f"scope={self.scope!r} is unknown; expected one of {', '.join(SCOPES)}")
        if self.scope == "layer" and self.seq_q != self.seq_kv:
            raise ShapeError(f"scope='layer' times self-attention prefill (seq_q == seq_kv), not seq_q={self.seq_q} "
                             f"against seq_kv={self.seq_kv}")
        if self.model is not None and not re.fullmatch(r"[A-Za-z0-9._+-]+", self.model):
            raise ShapeError(f"model={self.model!r}: a name of letters, digits and . _ + - (it goes into case ids)")
        if self.mask.causal and self.seq_q > self.seq_kv:
            raise ShapeError(
                f"seq_q={self.seq_q} > seq_kv={self.seq_kv} with a {self.mask.kind} mask leaves the first "
                "queries with no visible key (masks are bottom-right aligned)"
            )
        if self.serving is not None:
            self._check_serving(self.serving)
        if self.mla is not None:
            self._check_mla(self.mla)
        self._check_sparsity()
        self._check_linear()
        self._check_draft()
        plain = (self.score == NO_SCORE and not self.sparsity.sparse and self.mla is None and self.scope == "attention"
                 and self.serving is None and self.linear.method is None)
        parsed(check_prefix, self.prefix, self.seq_q, self.seq_kv, self.mask.label, plain)  # bench.problem.prefix

    def _one_call(self, what: str) -> None:
        if self.scope != "attention" or self.serving is not None:
            raise ShapeError(f"{what} one dense attention call: scope='attention', no serving batch (lengths, "
                             "page_size)")

    def _check_serving(self, serving: ServingBatch) -> None:
        rows = serving.rows
        if rows is not None:
            want = (sum(n for n, _, _ in rows), max(q for _, q, _ in rows), max(k for _, _, k in rows))
            if (self.batch, self.seq_q, self.seq_kv) != want:
                raise ShapeError(f"lengths={serving.lengths!r} holds {want[0]} rows, the longest Q {want[1]} and K "
                                 f"{want[2]}: batch, seq_q and seq_kv must be those, not {self.batch}, {self.seq_q}, "
                                 f"{self.seq_kv}")
        if self.scope != "attention":
            raise ShapeError(f"lengths/page_size describe a serving batch of attention calls, not scope={self.scope!r}")
        if self.seq_q > self.seq_kv:
            raise ShapeError(f"a serving batch needs seq_q <= seq_kv, not seq_q={self.seq_q} > seq_kv={self.seq_kv}")
        mixed = serving.lengths == "mixed"
        if serving.page_size is not None and (self.seq_q == self.seq_kv or mixed
                                              or (rows and any(q >= k for _, q, k in rows))):
            raise ShapeError(f"page_size={serving.page_size} pages a decode step's KV cache: it needs seq_q < seq_kv "
                             "and no mixed batch")
        if mixed and (self.seq_q != self.seq_kv or self.batch < 2 or not self.mask.causal):
            raise ShapeError("lengths='mixed' (prefill chunks of seq_q tokens beside decode steps) needs a causal "
                             f"mask, seq_q == seq_kv and batch >= 2, not batch={self.batch}, seq_q={self.seq_q}, "
                             f"seq_kv={self.seq_kv}, mask={self.mask.label!r}")

    def _check_mla(self, mla: MlaDims) -> None:
        if mla.rope_dim >= self.head_dim:
            raise ShapeError(f"rope_dim={mla.rope_dim} must be below head_dim={self.head_dim} (head_dim = qk_nope + "
                             "rope_dim, and qk_nope >= 1)")
        want = self.n_heads if mla.form == "expanded" else 1
        if self.n_kv_heads != want:
            raise ShapeError(f"an MLA {mla.form} shape has n_kv_heads={want} ("
                             + ("K/V decompressed per query head" if want > 1 else "one latent shared by all heads")
                             + f"), not {self.n_kv_heads}")
        if self.score != NO_SCORE or self.mask.variants:
            raise ShapeError(f"MLA takes no score variant or chunk mask (score={self.score.label!r}, "
                             f"mask={self.mask.label!r})")
        self._one_call("MLA shapes time")

    def _check_sparsity(self) -> None:
        parsed(self.sparsity.check, self.seq_q, self.seq_kv)
        if not self.sparsity.sparse:
            return
        if self.score != NO_SCORE:
            raise ShapeError(f"sparsity {self.sparsity.label} takes no score variant (score={self.score.label!r}): a "
                             "sparse case compares kernels on one keep-set, plain softmax")
        self._one_call(f"sparsity {self.sparsity.label} is")

    def _check_linear(self) -> None:
        if self.linear.method is None:
            return
        parsed(self.linear.check, self.seq_q, self.seq_kv)
        if self.mask.label != "causal" or self.score != NO_SCORE or self.sparsity.sparse or self.mla is not None:
            raise ShapeError(f"linear {self.linear.label} takes the causal mask alone (no score variant, sparsity or "
                             f"MLA), not mask={self.mask.label!r}, score={self.score.label!r}, "
                             f"sparsity={self.sparsity.label!r}")
        self._one_call(f"linear {self.linear.label} is")

    def _check_draft(self) -> None:
        draft = self.draft
        if draft is None:
            return
        if self.seq_q != draft.n or self.seq_kv <= draft.n:
            raise ShapeError(f"draft {draft.label} verifies {draft.n} tokens: seq_q must be {draft.n} and seq_kv (the "
                             f"cache and the draft) above it, not seq_q={self.seq_q}, seq_kv={self.seq_kv}")
        if self.mask.label != "causal" or self.score != NO_SCORE or self.sparsity.sparse or self.mla is not None \
                or self.linear.method is not None or self.prefix is not None:
            raise ShapeError(f"draft {draft.label} takes the causal mask alone (its tree lies inside it): no score "
                             "variant, sparsity, MLA, linear method or shared prefix")
        self._one_call(f"draft {draft.label} is")

    @property
    def variant(self) -> Variant:
        return "mla" if self.mla is not None else variant_of(self.n_heads, self.n_kv_heads)

    @property
    def absorbed(self) -> bool:
        """MLA in its absorbed form (decode: attention over the latent)."""
        return self.mla is not None and self.mla.form == "absorbed"

    @property
    def qk_dim(self) -> int:
        """D_qk of the attention call: head_dim, or under absorbed MLA kv_lora_rank + rope_dim."""
        if self.mla is not None and self.mla.form == "absorbed":
            return self.mla.kv_lora_rank + self.mla.rope_dim
        return self.head_dim

    @property
    def value_dim(self) -> int:
        """D_v of the attention call: head_dim, v_head_dim under expanded MLA, kv_lora_rank under absorbed MLA."""
        if self.mla is None:
            return self.head_dim
        return self.mla.kv_lora_rank if self.mla.form == "absorbed" else self.mla.v_head_dim

    @property
    def causal(self) -> bool:
        return self.mask.causal

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, DTYPE_ATTRS[self.dtype])

    @property
    def q_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.n_heads, self.seq_q, self.qk_dim)

    @property
    def kv_shape(self) -> tuple[int, int, int, int]:
        """K's shape (and V's, but for its last dim: value_dim)."""
        return (self.batch, self.n_kv_heads, self.seq_kv, self.qk_dim)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.n_heads, self.seq_q, self.value_dim)


def __getattr__(name: str) -> Any:
    """DTYPES and DTYPE_NAMES, made (importing torch) on their first use."""
    if name not in ("DTYPES", "DTYPE_NAMES"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import torch

    dtypes = {key: getattr(torch, attr) for key, attr in DTYPE_ATTRS.items()}
    globals().update(DTYPES=dtypes, DTYPE_NAMES={dt: key for key, dt in dtypes.items()})
    return globals()[name]
