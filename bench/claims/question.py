"""A planner's question: which of the plan's cases speak to a claim (`picks`) and which of those are the least that
answers it (`least`), and the helpers every claim's question chooses with.

A question funds the claims whose spec (bench.claims.spec.ClaimSpec.question) names its key, and the figures it
lists; it lives in the module of one of those claims, beside their thresholds. The helpers name no kind of case:
the textbook backend and the fused kernel to fund (registry traits and the cases' predicted seconds), the dtypes
measured in depth (those this machine runs natively), and the one representative shape per backend of a dtype the CPU
emulates (its other cases would spend the budget on missing hardware). Nothing here imports pandas or torch: the
planner reads it before the first case.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.backends import BACKENDS, get_backend
from bench.problem.case import Case
from bench.problem.columns import dense_family
from bench.results.meta import Calibration

if TYPE_CHECKING:
    from bench.claims.spec import ClaimSpec



@dataclass(frozen=True)
class Context:
    """What choosing a question's cases may read: the device, each case's predicted seconds, the dtypes this CPU
    emulates, and the run's calibration (for the cost model's predictions at a shape)."""

    device: str
    predicted: dict[str, float]
    emulated: tuple[str, ...] = ()
    calibration: Calibration = field(default_factory=Calibration)

    def cost(self, cases: list[Case]) -> float:
        """The predicted seconds of these cases."""
        return sum(self.predicted.get(c.id, 0.0) for c in cases)


@dataclass(frozen=True)
class Question:
    key: str  # the claims it funds are those whose spec names this question
    picks: Callable[[Case], bool]  # the plan's cases that speak to it
    least: Callable[[list[Case], Context], list[Case]]  # the least of those that answers it
    figures: str = ""  # the report's figures it answers too

    @property
    def claims(self) -> tuple[ClaimSpec, ...]:
        from bench.claims import of_question

        return of_question(self.key)

    @property
    def asks(self) -> str:
        """The claims and figures it answers, as the report names them."""
        return "; ".join([*(c.text for c in self.claims), *([self.figures] if self.figures else [])])

    @property
    def elsewhere(self) -> dict[str, str]:
        """`bench run`'s options (flag -> text) that measure it, for a plan that has none of its cases: its first
        claim's."""
        return dict(self.claims[0].measure) if self.claims else {}

    @property
    def command(self) -> str:
        return self.claims[0].command if self.claims else ""


def case_key(c: Case, names: tuple[str, ...]) -> tuple:
    """The values of these fields of a case, in order (its backend, phase and shape fields, and a shared-prefix
    batch's suffix): what groups a question's cases into lines and pairs each with its twins."""
    s = c.shape
    values = {"backend": c.backend, "phase": c.phase, "dtype": s.dtype, "batch": s.batch, "n_heads": s.n_heads,
              "n_kv_heads": s.n_kv_heads, "head_dim": s.head_dim, "mask": s.mask.label, "seq_q": s.seq_q,
              "seq_kv": s.seq_kv, "prefix": s.prefix, "suffix": s.seq_kv - (s.prefix or 0), "linear": s.linear.label}
    return tuple(values[n] for n in names)


def plain(c: Case) -> bool:
    """A dense attention call: of the dense families (bench.problem.columns.dense_family: no serving batch, no
    sparsity, no linear attention), with no model and no score variant."""
    s = c.shape
    return dense_family(s) and not s.score.variants and s.model is None


def runs_here(c: Case, ctx: Context) -> bool:
    """The case's backend runs its dtype on this device."""
    return get_backend(c.backend).unsupported_reason(ctx.device, c.shape.dtype) is None


def no_cases(cases: list[Case], ctx: Context) -> list[Case]:
    """The least of a question its run answers without a case (from what it measures at its start)."""
    return []


def every_case(cases: list[Case], ctx: Context) -> list[Case]:
    """The least of a question that needs every case it picks."""
    return cases


def textbook(names: set[str]) -> str | None:
    """The registry's first materialising backend among `names` (naive)."""
    return next((n for n, b in BACKENDS.items() if n in names and b.memory == "materialising"), None)


def fused(cases: list[Case], ctx: Context) -> str | None:
    """The fused (tiled) kernel to fund: the one whose cases here cost least, one that compiles only when no other
    runs; ties go to registry order."""
    by_backend: dict[str, float] = defaultdict(float)
    for c in cases:
        b = BACKENDS.get(c.backend)
        if b is not None and b.memory == "tiled" and runs_here(c, ctx):
            by_backend[c.backend] += ctx.predicted.get(c.id, 0.0)
    if not by_backend:
        return None
    order = list(BACKENDS)
    return min(by_backend, key=lambda n: (BACKENDS[n].compiles, by_backend[n], order.index(n)))


def complete(cases: list[Case], ctx: Context, size: Callable[[Case], int]) -> list[Case]:
    """The cases of the backends that run here at every size of the group (a backend with one length of a scaling
    line does not draw the line)."""
    sizes: dict[str, set[int]] = defaultdict(set)
    for c in cases:
        if runs_here(c, ctx):
            sizes[c.backend].add(size(c))
    everything = set().union(*sizes.values()) if sizes else set()
    return [c for c in cases if sizes.get(c.backend) == everything]


def pair(cases: list[Case], ctx: Context, size: Callable[[Case], int]) -> tuple[str, ...]:
    """The textbook backend and the fused kernel among these cases (whichever exist), of the backends that cover
    every size of the group."""
    whole = complete(cases, ctx, size)
    return tuple(n for n in (textbook({c.backend for c in whole}), fused(whole, ctx)) if n)


def uncompiled(cases: list[Case], ctx: Context, size: Callable[[Case], int]) -> tuple[str, ...]:
    """The textbook backend, the fused kernel and every other backend that covers every size of the group without
    compiling (a compile costs seconds per shape; these cost the call alone)."""
    rest = [c.backend for c in complete(cases, ctx, size) if not get_backend(c.backend).compiles]
    return tuple(dict.fromkeys([*pair(cases, ctx, size), *rest]))


def main_dtypes(cases: list[Case], ctx: Context) -> list[str]:
    """The dtypes measured in depth: those this machine runs natively, else (all emulated) the first."""
    dtypes = list(dict.fromkeys(c.shape.dtype for c in cases))
    native = [d for d in dtypes if d not in ctx.emulated]
    return native or dtypes[:1]


def representatives(cases: list[Case], ctx: Context) -> list[Case]:
    """Of an emulated dtype, one shape per backend: the cheapest, enough to show what the missing hardware costs."""
    out: dict[tuple[str, str], Case] = {}
    for c in sorted(cases, key=lambda c: ctx.predicted.get(c.id, 0.0)):
        if c.shape.dtype in ctx.emulated:
            out.setdefault((c.backend, c.shape.dtype), c)
    return list(out.values())


def with_emulated(chosen: list[Case], pool: list[Case], ctx: Context) -> list[Case]:
    """The chosen cases plus, per emulated dtype in the pool, one representative case of each chosen backend."""
    backends = {c.backend for c in chosen}
    emulated = [c for c in pool if c.shape.dtype in ctx.emulated and c.backend in backends]
    return chosen + representatives(emulated, ctx)
