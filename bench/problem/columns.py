"""An attention shape as record columns and back: the one list of a shape's columns (COLUMNS) with their meaning
and default, `shape_fields` (shape -> columns) and `shape_from_fields` (columns -> shape, checked), which results
files, case ids, the loader and the report all read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.problem.draft import Draft
from bench.problem.linear import Linear
from bench.problem.masks import Mask
from bench.problem.scores import Score
from bench.problem.shapes import AttentionShape, MlaDims, ServingBatch, ShapeError, parsed
from bench.problem.sparsity import Sparsity

REQUIRED = object()  # a column every record has held from the start: it has no default


@dataclass(frozen=True)
class Column:
    """A shape's column in results records and the report's tidy table."""

    name: str
    doc: str
    default: Any = REQUIRED  # what a file written before the column existed holds in every case
    integer: bool = False  # an integer column (a size), else text
    # a case away from this column's default is of a kind apart from the dense families (a serving batch, sparse or
    # linear attention): the dense analyses and the planner's plain cases leave it out, its own kind reads it beside
    # its dense twins (`dense_family`); a new kind's column says so here, and no analysis needs an edit
    apart: bool = False


# The record's shape columns, in the order files have always held them. Columns after `window` are left out of the
# case id while they hold their default, so old case ids stay valid; a new shape column is a line here and its place
# in shape_fields / shape_from_fields.
COLUMNS: tuple[Column, ...] = (
    Column("batch", "batch size B", integer=True),
    Column("seq_q", "query length Sq (1 or 4 when decoding)", integer=True),
    Column("seq_kv", "key/value length Skv (the context, or KV-cache length when decoding)", integer=True),
    Column("n_heads", "query heads Hq", integer=True),
    Column("n_kv_heads", "key/value heads Hkv", integer=True),
    Column("head_dim", "head dimension D (MLA: D_qk of a decompressed head, qk_nope + rope_dim)", integer=True),
    Column("dtype", "fp32 / bf16 / fp16", "fp32"),
    Column("mask", "none / causal / window:<w> / chunk:<C>", "none"),
    Column("window", "sliding-window size in keys, itself included (empty without a window)", None, integer=True),
    Column("scope", "what is timed: attention (the call alone) or layer (W_Q, W_K, W_V, W_O around it)", "attention"),
    Column("model", "the model whose attention geometry this is (run --model-config), empty otherwise", None),
    Column("lengths", "serving batch: equal / uniform / zipf (sequence lengths drawn at a fixed total token count), "
                      "mixed (prefill chunks and decode steps), or rows:NxQ:K+... (explicit rows: N sequences of Q "
                      "queries over K keys each, a replayed trace's step); empty for a dense batch", None, apart=True),
    Column("page_size", "serving decode: tokens per page of a paged KV cache (empty: a contiguous cache)", None,
           integer=True, apart=True),
    Column("chunk", "chunked local attention: chunk size C in keys (empty without a chunk mask)", None, integer=True),
    Column("score", "score variant: none / softcap:<X> / alibi / sinks (bench.problem.scores)", "none"),
    Column("v_head_dim", "MLA: value head dim D_v of a decompressed head (empty: V has head_dim, as K)", None,
           integer=True),
    Column("kv_lora_rank", "MLA: the cached latent's width (kv_lora_rank); empty without MLA", None, integer=True),
    Column("rope_dim", "MLA: the shared rotary key's width (qk_rope_head_dim), part of head_dim", None, integer=True),
    Column("mla_form", "MLA: expanded (prefill: K/V decompressed per head) or absorbed (decode: attention over the "
                       "latent); empty without MLA", None),
    Column("sparsity", "sparse attention: none / block:B:D / docs:N / global:G+window:W / topk:K[:HxD] "
                       "(bench.problem.sparsity), the keep-set ANDed with the mask", "none", apart=True),
    Column("linear", "linear attention in place of softmax: none / gdn:C / linear:C / mamba2:C / kda:C "
                     "(bench.problem.linear: the method and its prefill's chunk)", "none", apart=True),
    Column("prefix", "shared-prefix batch: the P tokens every request's context (seq_kv = P + its own suffix) begins "
                     "with, attended plain or by cascade (bench.problem.prefix); empty for any other batch", None,
           integer=True, apart=True),
    Column("draft", "speculative decoding: the draft verified in one call over the cache, chain:N / tree:C1,C2,... / "
                    "a preset / parents:r.0.0.1 (bench.problem.draft); none for any other call", "none", apart=True),
)
INT_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.integer)
_MLA_COLUMNS = ("v_head_dim", "kv_lora_rank", "rope_dim")


def shape_fields(shape: AttentionShape) -> dict[str, Any]:
    """The shape as record columns (COLUMNS, in order): the mask as its label (window:256) beside its window and
    chunk sizes, the score and sparsity as their labels, MLA's and a serving batch's sizes flat; then the derived
    variant."""
    mla, serving = shape.mla, shape.serving
    return {"batch": shape.batch, "seq_q": shape.seq_q, "seq_kv": shape.seq_kv, "n_heads": shape.n_heads,
            "n_kv_heads": shape.n_kv_heads, "head_dim": shape.head_dim, "dtype": shape.dtype,
            "mask": shape.mask.label, "window": shape.mask.window, "scope": shape.scope, "model": shape.model,
            "lengths": serving and serving.lengths, "page_size": serving and serving.page_size,
            "chunk": shape.mask.chunk, "score": shape.score.label,
            **{name: mla and getattr(mla, name) for name in _MLA_COLUMNS}, "mla_form": mla and mla.form,
            "sparsity": shape.sparsity.label, "linear": shape.linear.label, "prefix": shape.prefix,
            "draft": shape.draft.label if shape.draft else "none", "variant": shape.variant}


def shape_from_fields(fields: Mapping[str, Any]) -> AttentionShape:
    """shape_fields' inverse: a shape from record columns (a column a file predates reads as its default; `variant`
    is derived, so ignored). The mask may be its label (window:256) or its kind beside window / chunk."""
    unknown = set(fields) - {c.name for c in COLUMNS} - {"variant"}
    if unknown:
        raise ShapeError(f"unknown shape field(s) {', '.join(sorted(unknown))}; expected "
                         f"{', '.join(c.name for c in COLUMNS)}")
    missing = [c.name for c in COLUMNS if c.default is REQUIRED and c.name not in fields]
    if missing:
        raise ShapeError(f"a shape needs {', '.join(missing)}")
    get = {c.name: fields.get(c.name, c.default) for c in COLUMNS}
    mask_text, window, chunk = str(get["mask"]), get["window"], get["chunk"]
    if mask_text == "window":
        if window is None:
            raise ShapeError("mask='window' needs a positive window size")
        mask_text = f"window:{window}"
    elif mask_text == "chunk":
        if chunk is None:
            raise ShapeError("mask='chunk' needs a positive chunk size")
        mask_text = f"chunk:{chunk}"
    mask = parsed(Mask.parse, mask_text)
    for name, size in (("window", window), ("chunk", chunk)):
        if size is not None and getattr(mask, name) != size:
            raise ShapeError(f"{name}={size} given with mask={get['mask']!r}; use mask='{name}:{size}'")
    sparsity = parsed(Sparsity.parse, str(get["sparsity"]))
    if sparsity.label != get["sparsity"]:
        raise ShapeError(f"sparsity={get['sparsity']!r}: write it as {sparsity.label!r}")
    linear = parsed(Linear.parse, str(get["linear"]))
    if linear.label != get["linear"]:
        raise ShapeError(f"linear={get['linear']!r}: write it as {linear.label!r}")
    mla_sizes = {name: get[name] for name in _MLA_COLUMNS}
    if get["mla_form"] is None:
        given = [name for name, value in mla_sizes.items() if value is not None]
        if given:
            raise ShapeError(f"{', '.join(given)} describe MLA; set mla_form='expanded' or 'absorbed' (the other "
                             "variants give K and V one head_dim)")
        mla = None
    else:
        missing = [name for name, value in mla_sizes.items() if value is None]
        if missing:
            raise ShapeError(f"an MLA shape needs {', '.join(missing)} (DeepSeek-V3: v_head_dim=128, "
                             "kv_lora_rank=512, rope_dim=64)")
        mla = MlaDims(get["mla_form"], **mla_sizes)
    serving = None if get["lengths"] is None and get["page_size"] is None else \
        ServingBatch(get["lengths"], get["page_size"])
    draft = None if get["draft"] in (None, "none") else parsed(Draft.parse, str(get["draft"]))
    if draft is not None and draft.label != get["draft"]:
        raise ShapeError(f"draft={get['draft']!r}: write it as {draft.label!r}")
    return AttentionShape(get["batch"], get["seq_q"], get["seq_kv"], get["n_heads"], get["n_kv_heads"],
                          get["head_dim"], get["dtype"], mask, get["scope"], get["model"],
                          parsed(Score.parse, str(get["score"])), sparsity, mla, serving, linear, get["prefix"],
                          draft)


# The columns every case id has spelled out from the start (b, hq, hkv, q, kv, d, dtype, mask); columns added later
# (scope, model, ...) appear in ids only away from their default, and analyses that name keys by hand add them.
# chunk is here beside window: the mask label (chunk:C) already spells it in the id and the mask column.
CLASSIC_FIELDS: frozenset[str] = frozenset(
    {"batch", "seq_q", "seq_kv", "n_heads", "n_kv_heads", "head_dim", "dtype", "mask", "window", "chunk"})
LATER_FIELDS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.name not in CLASSIC_FIELDS)

# A shape column's default: what a results file written before the column existed holds in every case.
SHAPE_DEFAULTS: dict[str, Any] = {c.name: c.default for c in COLUMNS if c.default is not REQUIRED}
# column -> doc for every shape column (in order) and the derived variant
SHAPE_DOCS: dict[str, str] = {"variant": "mha / gqa / mqa (from n_heads and n_kv_heads), or mla (mla_form set)"} | {
    c.name: c.doc for c in COLUMNS}


APART: tuple[Column, ...] = tuple(c for c in COLUMNS if c.apart)


def dense_family(shape: AttentionShape) -> bool:
    """Whether a shape belongs to the dense families: every `apart` column at its default (no serving batch, no
    sparsity, no linear attention). Score variants, MLA, models and layer scope stay in: the analyses key on them."""
    fields = shape_fields(shape)
    return all(fields[c.name] == c.default for c in APART)
