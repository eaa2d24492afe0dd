"""What a claim returns: one frozen Verdict, and the four words a verdict can be.

A claim is one function `(frame, run) -> Verdict` (the registry is bench.report.claims); `run` is the run's
bench.results.meta.RunMeta: what a claim may read about its run beyond the frame (the KV caches measured at its start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd

HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured"
# measured, but on data that cannot decide it (lengths stopping short of where it would be decided): the numbers
# say what was measured and what would decide it; never read as "does not hold"
INCONCLUSIVE = "inconclusive"
# judged per condition (bench.analysis.conditions): some conditions hold and some do not; the numbers name which
DEPENDS = "depends"
WORDS = (HOLDS, FAILS, DEPENDS, INCONCLUSIVE, NOT_MEASURED)
# a condition's word where its claim lists it but does not judge it (too few lengths; no trait to judge it by): never
# a claim's word, and the claim's word ignores it
NOT_JUDGED = "not judged"


@dataclass(frozen=True)
class Series:
    """Numbers a claim reports beside its conditions, one per point (a KV length, a length of a family ...): its
    medians per KV length, its shares per length."""

    what: str  # what each value is: "median MHA step / GQA-MQA step over the conditions"
    unit: str  # a bench.analysis.conditions unit
    points: tuple[tuple[tuple[tuple[str, Any], ...], float], ...]  # (key fields, value) per point

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", tuple(
            (tuple(k.items() if isinstance(k, Mapping) else k), float(v)) for k, v in self.points))


@dataclass(frozen=True)
class Verdict:
    claim: str  # the claim as the tutorials put it
    verdict: str  # one of WORDS
    numbers: str  # the evidence, in one paragraph
    why: str = ""  # where it does not hold (or cannot be judged): what the numbers say the reason is
    detail: tuple[dict[str, Any], ...] = ()  # per-group plain data behind `numbers`, for tests and tables
    judged_on: str = ""  # the range the verdict was judged on: lengths, head counts, dtypes, backends
    conditions: tuple[Any, ...] = ()  # the bench.analysis.conditions.Condition each judged, where a claim has them
    notes: str = ""  # what its conditions' table does not say (a roofline, a published figure), in a sentence or two
    noisy: tuple[int, int] = (0, 0)  # (timings flagged noisy, timings) behind it
    series: tuple[Series, ...] = ()  # numbers beside its conditions (medians per length ...)
    key: str = ""  # its spec's key (bench.claims.spec): set by the registry's verdicts()
    # the claim's own answer sentence, where no single condition carries it (verify's N* per backend and dtype); the
    # report's answer is then this, while it fits a table cell
    answer: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in WORDS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {WORDS}")
        object.__setattr__(self, "detail", tuple(self.detail))  # a list passed in stays frozen too
        object.__setattr__(self, "conditions", tuple(self.conditions))
        object.__setattr__(self, "series", tuple(self.series))

    def as_dict(self) -> dict[str, Any]:
        """The plain shape `evaluate_claims` returns: key, claim, verdict, numbers, why, notes, detail (a list),
        judged_on, noisy, conditions (a list of plain dicts), series and answer."""
        return {"key": self.key, "claim": self.claim, "verdict": self.verdict, "numbers": self.numbers,
                "why": self.why, "notes": self.notes, "detail": list(self.detail), "judged_on": self.judged_on,
                "noisy": list(self.noisy), "conditions": [c.as_dict() for c in self.conditions],
                "series": [{"what": s.what, "unit": s.unit, "points": [[dict(k), v] for k, v in s.points]}
                           for s in self.series], "answer": self.answer}


NO_FACTS = RunMeta()  # a claim judged on a frame alone: nothing known of its run (read only, never filled in)


def noisy_count(rows: pd.DataFrame) -> tuple[int, int]:
    """(timings the engine flagged noisy, timings) among these rows: a verdict is only as good as those."""
    return int(rows["noisy"].fillna(False).astype(bool).sum()), len(rows)


def noisy_note(rows: pd.DataFrame) -> str:
    """Timed claims say how many of their timings the engine flagged noisy (noisy_count), in a sentence."""
    noisy, of = noisy_count(rows)
    return f" {noisy} of {of} timings behind this are flagged noisy." if noisy else ""


def span(values: Any, name: str, unit: str = "") -> str:
    """'S 256–2048' (or 'S 1024' for one value): the range of a judged quantity, for `judged_on`."""
    vals = sorted({int(v) for v in values})
    if not vals:
        return ""
    return f"{name} {vals[0]}{unit}" if len(vals) == 1 else f"{name} {vals[0]}–{vals[-1]}{unit}"


def judged(*parts: str) -> str:
    """The non-empty parts joined: 'S 256–2048 · fp32 · naive, sdpa'."""
    return " · ".join(p for p in parts if p)
