"""The vocabulary of attention shapes: sizes, variant (MHA/GQA/MQA/MLA), dtype and mask, validated once.

MLA (multi-head latent attention, DeepSeek-V2/V3): Hq query heads over a cache of one latent c (kv_lora_rank
elements) and one rotary key k_rope (rope_dim) per token, shared by all heads. An MLA shape names its form:
  expanded (prefill, as real implementations run it): K_h = [W_UK,h c ; k_rope], V_h = W_UV,h c, so one attention
    with Hkv = Hq, D_qk = head_dim (qk_nope + rope_dim) and D_v = v_head_dim;
  absorbed (decode): q_lat,h = [W_UK,h^T q_nope,h ; q_rope,h] attends over [c ; k_rope] (Hkv = 1: MQA-shaped)
    with D_qk = kv_lora_rank + rope_dim and D_v = kv_lora_rank, then W_UV,h maps each head's output to v_head_dim.
Both forms keep the expanded form's scale 1/sqrt(head_dim) (bench.mla).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from bench.errors import InputError
from bench.masks import Mask
from bench.scores import Score, parse_score
from bench.sparsity import Sparsity

if TYPE_CHECKING:
    import torch

Variant = Literal["mha", "gqa", "mqa", "mla"]
MlaForm = Literal["expanded", "absorbed"]
MaskKind = Literal["none", "causal", "window", "chunk"]

# A dtype's name -> its torch attribute. The names are all a plan needs; DTYPES (name -> torch.dtype) and DTYPE_NAMES
# (its inverse) import torch, so they are made on first use (`__getattr__` below).
DTYPE_ATTRS: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
MASKS: tuple[str, ...] = ("none", "causal", "window", "chunk")
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
    """A case's mask from its text (bench.masks.Mask.parse): one kind, not a combination."""
    try:
        mask = Mask.parse(text)
    except InputError as err:
        raise ShapeError(str(err)) from None
    if "+" in mask.label:
        raise ShapeError(f"mask {text!r}: one mask per case; expected none, causal, window:<size> or chunk:<size>")
    return mask


def parse_mask(text: str) -> tuple[MaskKind, int | None]:
    """'none' | 'causal' | 'window:256' | 'chunk:8192' -> (kind, size): the window or the chunk size (a later
    kind: (its label, None))."""
    mask = case_mask(text)
    if mask.kind not in MASKS:
        return mask.label, None  # type: ignore[return-value]
    return mask.kind, mask.window or mask.chunk  # type: ignore[return-value]


def mask_fields(text: str) -> dict[str, Any]:
    """A mask's text as AttentionShape fields: {'mask', 'window', 'chunk'} (a later kind: its label in 'mask')."""
    mask = case_mask(text)
    if mask.kind not in MASKS:
        return {"mask": mask.label, "window": None, "chunk": None}
    return {"mask": mask.kind, "window": mask.window, "chunk": mask.chunk}


def mask_label(mask: MaskKind, window: int | None, chunk: int | None = None) -> str:
    return f"window:{window}" if mask == "window" else f"chunk:{chunk}" if mask == "chunk" else mask


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


def _later_mask(text: str) -> bool:
    """Whether `text` is the label of a mask kind added after window and chunk (bench.masks.Mask), which a shape
    holds whole in its `mask` field: the four first kinds keep their own fields (window, chunk) and ids."""
    try:
        mask = Mask.parse(text)
    except InputError:
        return False
    return mask.kind not in MASKS and mask.label == text


def _positive(**sizes: object) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ShapeError(f"{name}={value!r} must be a positive integer")


def _dim(doc: str, default: object = dataclasses.MISSING) -> Any:
    """A shape field; its doc is the column's doc in results records and the report's tidy table."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class AttentionShape:
    """One attention call: q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D); under MLA (mla_form set) the call's
    D_qk and D_v are qk_dim and value_dim (the module docstring says how each form gets them).

    Every field is a column of a case's record (bench.record) and of the report's tidy table, with its doc:
    a new shape field reaches the results files, the loader and the report's shape keys on its own. Fields
    after `window` are left out of the case id while they hold their default, so old case ids stay valid.
    """

    batch: int = _dim("batch size B")
    seq_q: int = _dim("query length Sq (1 or 4 when decoding)")
    seq_kv: int = _dim("key/value length Skv (the context, or KV-cache length when decoding)")
    n_heads: int = _dim("query heads Hq")
    n_kv_heads: int = _dim("key/value heads Hkv")
    head_dim: int = _dim("head dimension D (MLA: D_qk of a decompressed head, qk_nope + rope_dim)")
    dtype: str = _dim("fp32 / bf16 / fp16", "fp32")
    mask: MaskKind = _dim("none / causal / window:<w> / chunk:<C>", "none")
    window: int | None = _dim("sliding-window size in keys, itself included (empty without a window)", None)
    scope: str = _dim("what is timed: attention (the call alone) or layer (W_Q, W_K, W_V, W_O around it)",
                      "attention")
    model: str | None = _dim("the model whose attention geometry this is (run --model-config), empty otherwise",
                             None)
    lengths: str | None = _dim("serving batch: equal / uniform / zipf (sequence lengths drawn at a fixed total token "
                               "count), mixed (prefill chunks and decode steps), or rows:NxQ:K+... (explicit rows: N "
                               "sequences of Q queries over K keys each, a replayed trace's step); empty for a dense "
                               "batch", None)
    page_size: int | None = _dim("serving decode: tokens per page of a paged KV cache (empty: a contiguous cache)",
                                 None)
    chunk: int | None = _dim("chunked local attention: chunk size C in keys (empty without a chunk mask)", None)
    score: str = _dim("score variant: none / softcap:<X> / alibi / sinks (bench.scores)", "none")
    v_head_dim: int | None = _dim("MLA: value head dim D_v of a decompressed head (empty: V has head_dim, as K)", None)
    kv_lora_rank: int | None = _dim("MLA: the cached latent's width (kv_lora_rank); empty without MLA", None)
    rope_dim: int | None = _dim("MLA: the shared rotary key's width (qk_rope_head_dim), part of head_dim", None)
    mla_form: str | None = _dim("MLA: expanded (prefill: K/V decompressed per head) or absorbed (decode: attention "
                                "over the latent); empty without MLA", None)
    sparsity: str = _dim("sparse attention: none / block:B:D / docs:N / global:G+window:W / topk:K[:HxD] "
                         "(bench.sparsity), the keep-set ANDed with the mask", "none")

    def __post_init__(self) -> None:
        _positive(batch=self.batch, seq_q=self.seq_q, seq_kv=self.seq_kv, head_dim=self.head_dim)
        check_heads(self.n_heads, self.n_kv_heads)
        if self.dtype not in DTYPE_ATTRS:
            raise ShapeError(f"dtype={self.dtype!r} is unknown; expected one of {', '.join(DTYPE_ATTRS)}")
        if self.mask not in MASKS and not _later_mask(self.mask):
            raise ShapeError(f"mask={self.mask!r} is unknown; expected one of {', '.join(MASKS)}")
        if self.mask == "window":
            if self.window is None:
                raise ShapeError("mask='window' needs a positive window size")
            _positive(window=self.window)
        elif self.window is not None:
            raise ShapeError(f"window={self.window} given with mask={self.mask!r}; use mask='window'")
        if self.mask == "chunk":
            if self.chunk is None:
                raise ShapeError("mask='chunk' needs a positive chunk size")
            _positive(chunk=self.chunk)
        elif self.chunk is not None:
            raise ShapeError(f"chunk={self.chunk} given with mask={self.mask!r}; use mask='chunk'")
        try:
            parse_score(self.score)
        except InputError as err:
            raise ShapeError(str(err)) from None
        if self.scope not in SCOPES:
            raise ShapeError(f"scope={self.scope!r} is unknown; expected one of {', '.join(SCOPES)}")
        if self.scope == "layer" and self.seq_q != self.seq_kv:
            raise ShapeError(f"scope='layer' times self-attention prefill (seq_q == seq_kv), not seq_q={self.seq_q} "
                             f"against seq_kv={self.seq_kv}")
        if self.model is not None and not re.fullmatch(r"[A-Za-z0-9._+-]+", self.model):
            raise ShapeError(f"model={self.model!r}: a name of letters, digits and . _ + - (it goes into case ids)")
        self._check_serving()
        self._check_mla()
        self._check_sparsity()
        if self.causal and self.seq_q > self.seq_kv:
            raise ShapeError(
                f"seq_q={self.seq_q} > seq_kv={self.seq_kv} with a {self.mask} mask leaves the first "
                "queries with no visible key (masks are bottom-right aligned)"
            )

    def _check_serving(self) -> None:
        if self.lengths is None and self.page_size is None:
            return
        rows = None
        if self.lengths is not None and self.lengths.startswith("rows:"):
            rows = parse_rows(self.lengths)
            want = (sum(n for n, _, _ in rows), max(q for _, q, _ in rows), max(k for _, _, k in rows))
            if (self.batch, self.seq_q, self.seq_kv) != want:
                raise ShapeError(f"lengths={self.lengths!r} holds {want[0]} rows, the longest Q {want[1]} and K "
                                 f"{want[2]}: batch, seq_q and seq_kv must be those, not {self.batch}, {self.seq_q}, "
                                 f"{self.seq_kv}")
        elif self.lengths is not None and self.lengths not in LENGTHS:
            raise ShapeError(f"lengths={self.lengths!r} is unknown; expected one of {', '.join(LENGTHS)} or "
                             "rows:NxQ:K+...")
        if self.scope != "attention":
            raise ShapeError(f"lengths/page_size describe a serving batch of attention calls, not scope={self.scope!r}")
        if self.seq_q > self.seq_kv:
            raise ShapeError(f"a serving batch needs seq_q <= seq_kv, not seq_q={self.seq_q} > seq_kv={self.seq_kv}")
        if self.page_size is not None:
            _positive(page_size=self.page_size)
            if self.seq_q == self.seq_kv or self.lengths == "mixed" or (rows and any(q >= k for _, q, k in rows)):
                raise ShapeError(f"page_size={self.page_size} pages a decode step's KV cache: it needs seq_q < seq_kv "
                                 "and no mixed batch")
        if self.lengths == "mixed" and (self.seq_q != self.seq_kv or self.batch < 2 or not self.causal):
            raise ShapeError("lengths='mixed' (prefill chunks of seq_q tokens beside decode steps) needs a causal "
                             f"mask, seq_q == seq_kv and batch >= 2, not batch={self.batch}, seq_q={self.seq_q}, "
                             f"seq_kv={self.seq_kv}, mask={self.mask!r}")

    def _check_mla(self) -> None:
        latent = {"v_head_dim": self.v_head_dim, "kv_lora_rank": self.kv_lora_rank, "rope_dim": self.rope_dim}
        if self.mla_form is None:
            given = [name for name, value in latent.items() if value is not None]
            if given:
                raise ShapeError(f"{', '.join(given)} describe MLA; set mla_form='expanded' or 'absorbed' (the other "
                                 "variants give K and V one head_dim)")
            return
        if self.mla_form not in MLA_FORMS:
            raise ShapeError(f"mla_form={self.mla_form!r} is unknown; expected one of {', '.join(MLA_FORMS)}")
        missing = [name for name, value in latent.items() if value is None]
        if missing:
            raise ShapeError(f"an MLA shape needs {', '.join(missing)} (DeepSeek-V3: v_head_dim=128, "
                             "kv_lora_rank=512, rope_dim=64)")
        _positive(**latent)
        if self.rope_dim >= self.head_dim:  # type: ignore[operator]
            raise ShapeError(f"rope_dim={self.rope_dim} must be below head_dim={self.head_dim} (head_dim = qk_nope + "
                             "rope_dim, and qk_nope >= 1)")
        want = self.n_heads if self.mla_form == "expanded" else 1
        if self.n_kv_heads != want:
            raise ShapeError(f"an MLA {self.mla_form} shape has n_kv_heads={want} ("
                             + ("K/V decompressed per query head" if want > 1 else "one latent shared by all heads")
                             + f"), not {self.n_kv_heads}")
        if self.score != "none" or self.mask_value.variants:
            raise ShapeError(f"MLA takes no score variant or chunk mask (score={self.score!r}, "
                             f"mask={self.mask_label!r})")
        if self.scope != "attention" or self.lengths is not None or self.page_size is not None:
            raise ShapeError("MLA shapes time one dense attention call: scope='attention', no lengths or page_size")

    def _check_sparsity(self) -> None:
        try:
            sparsity = Sparsity.parse(self.sparsity)
            if sparsity.label != self.sparsity:
                raise ShapeError(f"sparsity={self.sparsity!r}: write it as {sparsity.label!r}")
            sparsity.check(self.seq_q, self.seq_kv)
        except ShapeError:
            raise
        except InputError as err:
            raise ShapeError(str(err)) from None
        if not sparsity.sparse:
            return
        if self.score != "none":
            raise ShapeError(f"sparsity {self.sparsity} takes no score variant (score={self.score!r}): a sparse case "
                             "compares kernels on one keep-set, plain softmax")
        if self.scope != "attention" or self.lengths is not None or self.page_size is not None:
            raise ShapeError(f"sparsity {self.sparsity} is one attention call: scope='attention', no lengths or "
                             "page_size (a serving batch's documents are its own sequences)")

    @property
    def variant(self) -> Variant:
        return "mla" if self.mla_form is not None else variant_of(self.n_heads, self.n_kv_heads)

    @property
    def qk_dim(self) -> int:
        """D_qk of the attention call: head_dim, or under absorbed MLA kv_lora_rank + rope_dim."""
        if self.mla_form == "absorbed":
            return self.kv_lora_rank + self.rope_dim  # type: ignore[operator]
        return self.head_dim

    @property
    def value_dim(self) -> int:
        """D_v of the attention call: head_dim, v_head_dim under expanded MLA, kv_lora_rank under absorbed MLA."""
        if self.mla_form == "absorbed":
            return self.kv_lora_rank  # type: ignore[return-value]
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim

    @property
    def causal(self) -> bool:
        return self.mask in ("causal", "window", "chunk") or (self.mask not in MASKS and self.mask_value.causal)

    @property
    def mask_value(self) -> Mask:
        """The mask as the one value backends and the reference receive (bench.masks.Mask)."""
        if self.mask not in MASKS:  # a later kind: its label is the field
            return Mask.parse(self.mask)
        return Mask(self.mask != "none", self.window, self.chunk)

    @property
    def score_value(self) -> Score:
        """The score variant as the one value backends and the reference receive (bench.scores.Score), its sink
        logits not yet bound (Score.with_logits: seeded)."""
        return Score.parse(self.score)

    @property
    def sparsity_value(self) -> Sparsity:
        """The sparsity as the one value the case carries (bench.sparsity.Sparsity): none for a dense case."""
        return Sparsity.parse(self.sparsity)

    @property
    def softcap(self) -> float | None:
        return parse_score(self.score)[1]

    @property
    def alibi(self) -> bool:
        return self.score == "alibi"

    @property
    def sinks(self) -> bool:
        return self.score == "sinks"

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, DTYPE_ATTRS[self.dtype])

    @property
    def mask_label(self) -> str:
        return mask_label(self.mask, self.window, self.chunk)

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


def shape_fields(shape: AttentionShape) -> dict[str, Any]:
    """The shape as record columns: every field, the mask as its label (window:256), and the derived variant."""
    out = {f.name: getattr(shape, f.name) for f in dataclasses.fields(shape)}
    out["mask"] = shape.mask_label
    out["variant"] = shape.variant
    return out


# The fields every case id has spelled out from the start (b, hq, hkv, q, kv, d, dtype, mask); fields added later
# (scope, model, ...) appear in ids only away from their default, and analyses that name keys by hand add them.
# chunk is here beside window: the mask label (chunk:C) already spells it in the id and the mask column.
CLASSIC_FIELDS: frozenset[str] = frozenset(
    {"batch", "seq_q", "seq_kv", "n_heads", "n_kv_heads", "head_dim", "dtype", "mask", "window", "chunk"})
LATER_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(AttentionShape) if f.name not in CLASSIC_FIELDS)

# A shape field's default: what a results file written before the field existed holds in every case.
SHAPE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(AttentionShape)
                                  if f.default is not dataclasses.MISSING}
# column -> doc for every shape field (in order) and the derived variant
SHAPE_DOCS: dict[str, str] = {"variant": "mha / gqa / mqa (from n_heads and n_kv_heads), or mla (mla_form set)"} | {
    f.name: f.metadata["doc"] for f in dataclasses.fields(AttentionShape)}


def __getattr__(name: str) -> Any:
    """DTYPES and DTYPE_NAMES, made (importing torch) on their first use."""
    if name not in ("DTYPES", "DTYPE_NAMES"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import torch

    dtypes = {key: getattr(torch, attr) for key, attr in DTYPE_ATTRS.items()}
    globals().update(DTYPES=dtypes, DTYPE_NAMES={dt: key for key, dt in dtypes.items()})
    return globals()[name]
