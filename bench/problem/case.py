"""A case: one backend on one shape, phase, pass and device; its stable id and its kind, decided here only.

Low in the package (it imports bench.problem.shapes alone) so that every layer can hold a real Case: the kinds, the
record, the engine, the report. bench.engine.sweeps re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.problem.columns import LATER_FIELDS, SHAPE_DEFAULTS, shape_fields, shape_from_fields
from bench.problem.shapes import AttentionShape

# bench.kinds holds each kind's code under its name
KindName = Literal["prefix", "serving", "layer", "sparse", "mla", "linear", "draft", "dense"]
# the sizes a shape family varies over: cases that differ in these alone are one family
SIZE_FIELDS: tuple[str, ...] = ("batch", "n_heads", "n_kv_heads", "seq_q", "seq_kv", "head_dim")
# The record columns a report's tables and figures name a family by: family_key's coarse part, for rows already
# narrowed to one kind (dense attention alone, one scope); family_label spells it.
FAMILY_FIELDS: tuple[str, ...] = ("phase", "variant", "dtype", "mask", "pass")


def shape_kind(shape: AttentionShape) -> KindName:
    """The one rule for which kind of case a shape is: a shared-prefix batch (a prefix set: plain attention alone goes
    with it, bench.problem.prefix), a serving batch (ragged lengths or a paged cache), a whole
    layer, sparse attention (a keep-set beside the mask, dense or MLA inputs), MLA, linear attention (a linear method
    in place of softmax), a speculative draft verified over the cache, else dense attention."""
    if shape.prefix is not None:
        return "prefix"
    if shape.serving is not None:
        return "serving"
    if shape.scope == "layer":
        return "layer"
    if shape.sparsity.sparse:
        return "sparse"
    if shape.mla is not None:
        return "mla"
    if shape.linear.method is not None:
        return "linear"
    if shape.draft is not None:
        return "draft"
    return "dense"


@dataclass(frozen=True)
class Case:
    backend: str
    shape: AttentionShape
    phase: str  # prefill: Sq == Skv; decode: Sq (1, or a few for speculative decoding) against the cache
    pass_: str  # fwd | fwd+bwd
    device: str

    @property
    def id(self) -> str:
        s = self.shape
        cols = shape_fields(s)
        extra = "".join(f"-{name}={cols[name]}" for name in LATER_FIELDS if cols[name] != SHAPE_DEFAULTS[name])
        return (f"{self.backend}/{s.variant}/b{s.batch}-hq{s.n_heads}-hkv{s.n_kv_heads}-q{s.seq_q}-kv{s.seq_kv}"
                f"-d{s.head_dim}{extra}/{s.dtype}/{s.mask.label}/{self.phase}/{self.pass_}/{self.device}")

    @property
    def kind(self) -> KindName:
        return shape_kind(self.shape)

    def to_dict(self) -> dict[str, object]:
        """The plain form a worker process is sent (bench.engine.worker)."""
        return {"backend": self.backend, "shape": shape_fields(self.shape), "phase": self.phase,
                "pass_": self.pass_, "device": self.device}

    @classmethod
    def from_dict(cls, d: dict) -> Case:
        return cls(d["backend"], shape_from_fields(d["shape"]), d["phase"], d["pass_"], d["device"])


def family_key(case: Case) -> tuple:
    """A case's shape family: its backend, variant, phase, pass, device and every shape field but its sizes
    (SIZE_FIELDS). Cases with equal keys differ in batch, heads, lengths or head dim alone."""
    cols = shape_fields(case.shape)
    rest = tuple((name, value) for name, value in cols.items() if name not in SIZE_FIELDS and name != "variant")
    return (case.backend, case.shape.variant, case.phase, case.pass_, case.device, *rest)


def family_label(phase: str, variant: str, dtype: str, mask: str, pass_: str) -> str:
    """A family's name in a report, its FAMILY_FIELDS in order: prefill · GQA · bf16 · causal · fwd."""
    return f"{phase} · {variant.upper()} · {dtype} · {mask} · {pass_}"
