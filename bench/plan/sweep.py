"""The Sweep: a run's axes, each declared once with `axis(...)` (bench.kinds.axes): its command-line flag (`bench run
--FLAG` and `pytest --attn-FLAG`), how its text is parsed and checked, and its help.

The backends and the time budgets are every run's; the rest are the registered kinds' own (bench.kinds.REGISTRY,
each kind's `axes`), composed here in registry order, so a kind's new axis is a field of its own dataclass and
nothing here. bench.engine.sweeps expands a sweep into cases; bench.profiles names the sweeps a profile runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.backends import BACKENDS, get_backend
from bench.errors import InputError, UsageError
from bench.kinds import REGISTRY
from bench.kinds.axes import axis, duration, seconds, words
from bench.measure.cold import COLD_MEMORY_SHARE, COLD_MULTIPLE, ColdPlan

# the backends a run skips unless named (their libraries' own paths): the --backend help names them
OPT_IN = [b.name for b in BACKENDS.values() if b.opt_in and b.origin == "built-in"]
BUDGETS = ("case_budget_s", "time_budget_s", "case_timeout_s")
SETTINGS = (*BUDGETS, "cold_multiple", "cold_memory")  # how cases are timed, not which: setting one keeps a profile's
# extra sweeps


@dataclass(frozen=True)
class RunAxes:
    backends: tuple[str, ...] = axis(tuple(b for b in BACKENDS if not BACKENDS[b].opt_in), "backend",
                                     "comma-separated backends, e.g. naive,sdpa-flash ("
                                     f"{', '.join(OPT_IN[:-1])} and {OPT_IN[-1]} run only when named)", words,
                                     check=lambda name: get_backend(name))


@dataclass(frozen=True)
class BudgetAxes:
    case_budget_s: float = axis(1.0, "budget", "seconds of timing per case before it is marked noisy", seconds)
    time_budget_s: float | None = axis(None, "time-budget", "plan the run to this long, e.g. 10m or none: cases "
                                       "that will not fit are recorded skipped (the small shapes of every family "
                                       "run first)", duration)
    case_timeout_s: float | None = axis(None, "case-timeout", "end a case that runs longer, e.g. 5m or none "
                                        "(default: 10x its predicted time, at least 1 minute)", duration)


def multiple(text: str) -> float:
    """--cold-multiple: a number >= 0 (0: no rotation, every call warm)."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"expected a number (the copies' total over the cache), got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"{text!r} must be a finite number >= 0 (0 turns rotation off: every call warm)")
    return value


def share(text: str) -> float:
    """--cold-memory: a share of free memory, in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"expected a share of free memory between 0 and 1, got {text!r}") from None
    if not 0 < value <= 1:
        raise UsageError(f"{text!r} must be a share of free memory, over 0 and at most 1")
    return value


@dataclass(frozen=True)
class ColdAxes:
    """How the cold inputs of a case (its KV cache, paged pool, shared prefix, latent cache or recurrent state) are
    rotated over copies past the cache (bench.measure.rotation)."""

    cold_multiple: float = axis(COLD_MULTIPLE, "cold-multiple", "the copies of a case's cold inputs add up to this "
                                "many times the cache (CPU: L2 + L3; CUDA: L2); 0: none, every call warm", multiple)
    cold_memory: float = axis(COLD_MEMORY_SHARE, "cold-memory", "the copies take at most this share of the memory "
                              "free when they are made; past it a case runs partly warm and its record says so", share)


# the backends, every kind's axes in registry order, the budgets: a dataclass lists its bases' fields last base first
AXES = (RunAxes, *(kind.axes for kind in REGISTRY if kind.axes), BudgetAxes, ColdAxes)


@dataclass(frozen=True)
class Sweep(*reversed(AXES)):
    """Axes of a sweep. Every combination is a case; decode has its own query and KV lengths."""

    # More sweeps of the profile, run after this one (a case already swept is not repeated): e.g. the compact
    # heads sweep the default profile needs for the "heads are a free lunch" claim. Axes set by hand drop them.
    also: tuple[Sweep, ...] = ()

    def __post_init__(self) -> None:
        if self.case_budget_s <= 0:
            raise UsageError(f"--budget {self.case_budget_s:g} must be positive")
        for f in axis_fields():
            check = f.metadata["check"]
            values = getattr(self, f.name)
            if check and isinstance(values, tuple):
                for value in values:
                    try:
                        check(value)
                    except InputError as err:  # name the flag, as a parse error does
                        raise type(err)(f"--{f.metadata['flag']}: {err}") from None

    def cold_plan(self) -> ColdPlan:
        return ColdPlan(self.cold_multiple, self.cold_memory)

    def to_dict(self) -> dict[str, Any]:
        """The plain form a results file's header (`axes`) and a launcher's workers get."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sweep:
        """The sweep of `to_dict`'s form (JSON's lists back to tuples); unknown keys are refused, by name."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(f"a sweep does not have {', '.join(unknown)}")

        def value(name: str, v: Any) -> Any:
            if name == "also":
                return tuple(cls.from_dict(s) for s in v)
            return tuple(v) if isinstance(v, list) else v

        return cls(**{k: value(k, v) for k, v in d.items()})

    def with_axes(self, **axes: object) -> Sweep:
        """This sweep with the given axes replaced (None: keep); an axis set by hand drops what derived it."""
        given = {k: v for k, v in axes.items() if v is not None}
        for f in axis_fields():
            if f.name in given and f.metadata["clears"]:
                given[f.metadata["clears"]] = None
        if any(name not in SETTINGS for name in given):
            given["also"] = ()  # the user chose the axes: the profile's extra sweeps no longer apply
        return dataclasses.replace(self, **given)


def axis_fields() -> list[dataclasses.Field]:
    """The declared axes, in order: each has a flag, a parser, a check and a help text."""
    return [f for f in dataclasses.fields(Sweep) if "flag" in f.metadata]


def from_flags(flags: dict[str, str], **fixed: Any) -> Sweep:
    """The sweep `bench run` would run with these axis flags (a claim spec's `measure`: the cases that answer it,
    defined once), plus fields set directly (its case budget)."""
    by_flag = {f.metadata["flag"]: f for f in axis_fields()}
    unknown = sorted(set(flags) - set(by_flag))
    if unknown:
        raise ValueError(f"not axis flags: {unknown}")
    return Sweep(**{by_flag[k].name: by_flag[k].metadata["parse"](v) for k, v in flags.items()}, **fixed)
