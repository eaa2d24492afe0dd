"""What every registered kind may declare beside its measurement: its axes and its hooks into the expansion of a
sweep into cases, each optional (Kind's defaults add nothing), and the registry that folds them.

bench.engine.sweeps expands a sweep so, calling the hooks through bench.kinds.REGISTRY (registry order: dense first,
the base every later kind refines):
  1. its head geometries: the last kind's `geometries` that gives any (a model's replace the axes' geometries);
  2. per geometry, its dtypes x masks x every axis declared with `shape_field=` (a geometry may fix one: a model's
     own score variant), each such point a dict of record columns (bench.problem.columns);
  3. each point's cases: the last kind's `cases` that claims the geometry (MLA's latent geometries; dense's grid
     takes every other). Dense's grid sweeps the lengths and batches; every kind adds to it the shape fields a
     phase sweeps (`dims`), the points it rules out (`refuses`) and the passes it allows (`passes`);
  4. after every point, each kind's `more_cases` (a replayed trace's buckets), then the sweep's `also` parts.
A hook gets the sweep (bench.plan.sweep.Sweep, typed Any: no kind imports the plan) and, where it folds the
other kinds' answers, the registry. `facts` and `plan_lines` are what a kind records and says before the first case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from bench.backends import get_backend
from bench.problem.case import Case
from bench.problem.shapes import AttentionShape
from bench.problem.sparsity import Sparsity

T = TypeVar("T")
Point = dict[str, Any]  # a case's shape fields as record columns, as far as the expansion has set them
Dims = list[tuple[str, tuple]]  # shape fields a phase sweeps, each with its values


@dataclass(frozen=True)
class Geometry:
    """The heads of one attention shape, the masks it is swept with, and the model it comes from (if any).

    An MLA geometry (--variant mla, or a config with kv_lora_rank) carries the latent dims; its head_dim is D_qk =
    qk_nope + rope. A model with a top-K indexer (DeepSeek-V3.2's DSA) carries its sparsity: it is swept beside the
    dense cases, at the contexts longer than its K (shorter ones keep every key: the dense case is what runs there).
    """

    n_heads: int
    n_kv_heads: int
    head_dim: int
    masks: tuple[str, ...]
    model: str | None = None
    score: str | None = None  # a model's score variant (softcap, sinks, ALiBi): its only one
    v_head_dim: int | None = None  # MLA: the latent dims (all three set, or none)
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    sparsity: str | None = None  # a model's own sparse attention (DSA's topk:K:HxD), swept beside dense

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def mla_fields(self, form: str) -> dict[str, Any]:
        """The AttentionShape fields of this MLA geometry in `form` (expanded: Hkv = Hq; absorbed: one latent)."""
        return {"n_kv_heads": self.n_heads if form == "expanded" else 1, "v_head_dim": self.v_head_dim,
                "kv_lora_rank": self.kv_lora_rank, "rope_dim": self.rope_dim, "mla_form": form}

    def fields(self) -> Point:
        """The shape fields the geometry sets."""
        return {"n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim, "model": self.model}

    def axis_values(self, name: str, values: tuple) -> tuple:
        """A `shape_field=` axis's values at this geometry: a model's own score variant replaces --score, and its own
        sparsity is swept beside dense."""
        if name == "score" and self.score:
            return (self.score,)
        if name == "sparsity" and self.sparsity:
            return ("none", self.sparsity)
        return values

    def keeps_all(self, point: Point) -> bool:
        """A model's own top-K at a context of no more than K keys: it keeps every key, so the dense case is its case
        there (a --sparsity given by hand with K > Skv is refused instead: bench.problem.sparsity)."""
        return self.sparsity is not None and point["sparsity"] == self.sparsity \
            and Sparsity.parse(self.sparsity).k >= point["seq_kv"]


def offered(backend: str, shape: AttentionShape) -> bool:
    """Whether a sweep offers `backend` this shape: every backend a dense one, a sparse one only to the backends whose
    `sparsity` trait lists its kind (so a kernel that declares none is never handed a keep-set), a linear one only to
    the backends whose `linear` trait lists its method (and a linear backend nothing else)."""
    b = get_backend(backend)
    if shape.linear.method is not None:
        return b.linear_reason(shape.linear.method) is None
    return b.sparsity_reason(shape.sparsity.kind) is None and b.linear_reason(None) is None


class Kind:
    """A registered kind's declarations beside its measurement (bench.kinds.base.CaseKind), each with a default
    that adds nothing. `axes`: a frozen dataclass of `axis(...)` fields (bench.kinds.axes), the kind's flags."""

    name = ""
    axes: type | None = None

    def geometries(self, sweep: Any, kinds: Registry) -> list[Geometry] | None:
        """The sweep's head geometries, or None where this kind does not make them."""
        return None

    def variant_geometries(self, sweep: Any, variant: str, n_heads: int,
                           dims: tuple[int, ...]) -> list[Geometry] | None:
        """The geometries of one --variant value at Hq = n_heads and these head dims, or None: not this kind's."""
        return None

    def cases(self, sweep: Any, g: Geometry, point: Point, device: str, kinds: Registry) -> list[Case] | None:
        """Every case of a point of the geometry, or None where this kind does not claim the geometry."""
        return None

    def dims(self, sweep: Any, phase: str) -> Dims:
        """The shape fields this kind adds to a phase of the grid, each with its values."""
        return []

    def refuses(self, g: Geometry, point: Point) -> bool:
        """Whether the grid leaves out this point (all its shape fields but the batch set)."""
        return False

    def passes(self, point: Point, passes: tuple[str, ...]) -> tuple[str, ...]:
        """The passes a prefill point of the grid is timed in."""
        return passes

    def more_cases(self, sweep: Any, device: str, geometries: list[Geometry]) -> list[Case]:
        """Cases after the grid's, none of them repeated (a replayed trace's buckets)."""
        return []

    def facts(self, parts: list[Any]) -> dict[str, Any]:
        """RunMeta fields a run records of its sweep's parts before its first case (a model's layers)."""
        return {}

    def plan_lines(self, parts: list[Any]) -> list[str]:
        """What `bench run --plan` says of the sweep's parts before its cases."""
        return []

    def predicted_flops(self, case: Case) -> float:
        """What the case costs for sharding: its attention's FLOPs."""
        from bench.counts.metrics import attention_flops

        return attention_flops(case.shape, case.pass_)

    def reference_flops(self, shape: AttentionShape, pass_: str) -> float:
        """The FLOPs of the float64 check on its check shape: every pair the mask leaves."""
        from bench.counts.metrics import attention_flops

        return attention_flops(shape, pass_)


class Registry:
    """The registered kinds in order, and the folds of their hooks that the engine and the grid ask."""

    def __init__(self, *kinds: Kind) -> None:
        self.kinds = kinds

    def __iter__(self) -> Iterator[Kind]:
        return iter(self.kinds)

    def last(self, answer: Callable[[Kind], T | None]) -> T | None:
        """The last kind's answer that is not None (a later kind refines the earlier ones)."""
        return next((found for kind in reversed(self.kinds) if (found := answer(kind)) is not None), None)

    def variant(self, sweep: Any, variant: str, n_heads: int, dims: tuple[int, ...]) -> list[Geometry]:
        return self.last(lambda kind: kind.variant_geometries(sweep, variant, n_heads, dims)) or []

    def dims(self, sweep: Any, phase: str) -> Dims:
        return [dim for kind in self.kinds for dim in kind.dims(sweep, phase)]

    def refused(self, g: Geometry, point: Point) -> bool:
        return any(kind.refuses(g, point) for kind in self.kinds)

    def passes(self, point: Point, passes: tuple[str, ...]) -> tuple[str, ...]:
        for kind in self.kinds:
            passes = kind.passes(point, passes)
        return passes
