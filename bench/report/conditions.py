"""A claim judged per condition: each condition (the unit a claim's spec names — a kernel × dtype × group size, a
shape family, a method × budget …) gets its own ratio, its own 95% interval from its own timings, and its own word;
the claim's word is a stated rule over them.

A condition's word, against its bound (one rule for every claim that judges conditions by a bound):
- at its bound: its estimate lies within the band around the bound (bound / AT_BOUND .. bound x AT_BOUND) and its
  interval does not reach past twice the band on both sides (too wide to place). Decided, not open: runs of the
  same code put a kernel pair's ratio a few percent apart (flex's softcap prefill over its plain twin read 1.27x,
  1.28x, 1.29x, 1.30x and 1.32x in five runs against 1.3x), so no number of blocks in one run tells a side of the
  bound that the next run would agree on, while the band, twice that spread, holds such a condition in every run.
  What the word means for its claim is the claim's to say (`at_bound_means`): holds where the bound is a limit a
  condition may reach ("within 1.3x", "at least 2x"), does not hold where the bound is itself a margin to clear
  ("faster by 5%": at the margin, not clearly faster). The listing says "at its bound" and what it counts as;
- holds: outside that, the whole interval is on the claim's side of the bound;
- does not hold: the whole interval is on the other side;
- inconclusive: the interval straddles the bound with its estimate outside the band (it reaches out of the band on
  one side and is not clearly past the bound on the other), or reaches past twice the band on both sides: deciding
  (bench.engine.decide) spends its blocks there.

The claim's word over its conditions (`combine`):
- holds: every condition holds; does not hold: every condition fails;
- depends: some conditions hold and some fail (the numbers name which, each with its ratio);
- inconclusive: no condition fails against one that holds, but some straddle their bound.

Where the interval comes from is said with it (`basis`): from each case's own confidence interval (a run's cases, each
measured once, in one worker — it cannot see what a different worker or a different moment would give), or from
interleaved blocks spanning several fresh worker processes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.report.verdict import DEPENDS, FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED

# a ratio whose whole interval lies within this factor of its bound meets the bound: runs of the same code put one
# kernel pair a few percent apart (flex's softcap prefill over its plain twin: 1.27x, 1.30x and 1.32x in three runs,
# against 1.3x), so no number of blocks in one run tells a side of the bound that another run would agree on
AT_BOUND = 1.05
FROM_CIS = "each case's CI"  # one measurement per case: the interval is the timings' noise within that measurement
FROM_BLOCKS = "interleaved blocks"  # both sides in ABBA blocks across fresh workers


@dataclass(frozen=True)
class Condition:
    """One condition of a claim: its name, its ratio, its 95% interval and its word against its bound."""

    name: str  # what it is, for a reader: "sdpa · fp32 · GQA (Hq/Hkv 4) at KV 16,384"
    ratio: float
    low: float
    high: float
    verdict: str  # HOLDS, FAILS or INCONCLUSIVE
    why: str = ""  # a reason that overrides the interval's word (an on-chip cache, too few lengths), if any
    basis: str = FROM_CIS
    bound: float = math.nan  # the claim's bound for this condition, and on which side of it the condition holds
    holds_above: bool = True
    # the cases whose times make the ratio, as (top, bottom) case ids: ratio = top's time / bottom's time (the
    # median over the pairs). A run re-measures them in interleaved blocks to decide the condition (bench.engine.decide)
    pairs: tuple[tuple[str, str], ...] = ()
    band: float = AT_BOUND  # the band around the bound where a condition is at its bound (module docstring)
    at_bound: bool = False  # its estimate is at its bound: `verdict` is then what its claim counts that as
    at_bound_means: str = HOLDS  # what "at its bound" counts as for its claim: HOLDS or FAILS

    def as_dict(self) -> dict[str, object]:
        return {"condition": self.name, "ratio": self.ratio, "low": self.low, "high": self.high,
                "verdict": self.verdict, "why": self.why, "basis": self.basis, "bound": self.bound,
                "holds_above": self.holds_above, "pairs": [list(p) for p in self.pairs], "at_bound": self.at_bound}

    def judged(self, ratio: float, low: float, high: float, **more: Any) -> Condition:
        """This condition with a new estimate and interval (interleaved blocks), judged again by the same rule."""
        verdict, on = word(ratio, low, high, self.bound, self.holds_above, self.band, self.at_bound_means)
        return dataclasses.replace(self, ratio=ratio, low=low, high=high, verdict=verdict, at_bound=on, **more)


def at_bound(ratio: float, low: float, high: float, bound: float, band: float = AT_BOUND) -> bool:
    """Whether the estimate lies within `band` of the bound, its interval not reaching past twice the band on both
    sides (too wide to place)."""
    if not (bound > 0 and band > 1 and ratio > 0):
        return False
    wide = low < bound / band ** 2 and high > bound * band ** 2
    return bound / band <= ratio <= bound * band and not wide


def word(ratio: float, low: float, high: float, bound: float, holds_above: bool, band: float = AT_BOUND,
         at_bound_means: str = HOLDS) -> tuple[str, bool]:
    """(the condition's word for its claim, whether it is at its bound), by the rule in the module docstring: at
    its bound counts as `at_bound_means`; else holds when the whole interval is on the claim's side of the bound (at
    or above it when `holds_above`, at or below it otherwise), does not hold when it is wholly on the other side,
    else inconclusive."""
    if at_bound(ratio, low, high, bound, band):
        return at_bound_means, True
    if holds_above:
        return (HOLDS if low >= bound else FAILS if high < bound else INCONCLUSIVE), False
    return (HOLDS if high <= bound else FAILS if low > bound else INCONCLUSIVE), False


def condition(name: str, ratio: float, interval: tuple[float, float], bound: float, holds_above: bool,
              basis: str = FROM_CIS, pairs: Iterable[tuple[str, str]] = (), band: float = AT_BOUND,
              at_bound_means: str = HOLDS) -> Condition:
    """A condition judged by its estimate and interval against its bound; pairs: the (top, bottom) case ids behind
    its ratio; at_bound_means: what its claim counts "at its bound" as (module docstring)."""
    low, high = interval
    verdict, on = word(ratio, low, high, bound, holds_above, band, at_bound_means)
    return Condition(name, ratio, low, high, verdict, basis=basis, bound=bound, holds_above=holds_above,
                     pairs=tuple((str(t), str(b)) for t, b in pairs), band=band, at_bound=on,
                     at_bound_means=at_bound_means)


def pairs_of(rows: Any, top: str, bottom: str = "case_id") -> list[tuple[str, str]]:
    """The (top, bottom) case ids of a frame's rows, from two case id columns (rows without both are left out)."""
    if top not in rows or bottom not in rows:
        return []
    return [(t, b) for t, b in zip(rows[top], rows[bottom], strict=True) if isinstance(t, str) and isinstance(b, str)]


def combine(conditions: Iterable[Condition | str]) -> str:
    """The claim's word from its conditions' (Conditions or their words), by the rule in this module's docstring."""
    words = {c.verdict if isinstance(c, Condition) else c for c in conditions} - {NOT_MEASURED}
    if not words:
        return NOT_MEASURED
    if words == {HOLDS}:
        return HOLDS
    if words == {FAILS}:
        return FAILS
    if HOLDS in words and FAILS in words:
        return DEPENDS
    return INCONCLUSIVE


def listing(conditions: Sequence[Condition]) -> str:
    """Every condition with its ratio, interval and word, grouped by word: 'holds in 2 of 4 (a: …; b: …); does not
    hold in 1 (c: …); inconclusive in 1 (d: …)'."""
    parts = []
    for w in (HOLDS, FAILS, INCONCLUSIVE):
        these = [c for c in conditions if c.verdict == w]
        if these:
            body = "; ".join(f"{c.name} {c.ratio:.2f}× ({c.low:.2f}–{c.high:.2f}×)" + (f", {c.why}" if c.why else "")
                             + (f", at its bound (within {c.band - 1:.0%} of {c.bound:g}×)" if c.at_bound else "")
                             for c in these)
            parts.append(f"{w} in {len(these)} of {len(conditions)} ({body})")
    basis = sorted({c.basis for c in conditions})
    return "; ".join(parts) + (f" [95% intervals from {', '.join(basis)}]" if basis else "")


def undecided_why(conditions: Sequence[Condition], bound: float, decide: str) -> str:
    """The `why` of a claim with open conditions: those whose interval straddles the bound (and what decides them),
    then those left open for a stated reason (their `why`)."""
    straddling = [c for c in conditions if c.verdict == INCONCLUSIVE and not c.why]
    reasoned = [c for c in conditions if c.verdict == INCONCLUSIVE and c.why]
    parts = []
    if straddling:
        names = "; ".join(f"{c.name} ({c.low:.2f}–{c.high:.2f}×)" for c in straddling)
        many = len(straddling) > 1
        parts.append(f"{len(straddling)} condition{'s' * many} straddle{'' if many else 's'} {bound:g}× within "
                     f"{'their' if many else 'its'} own timings' interval: {names}. {decide}.")
    parts.extend(f"{c.name} is open: {c.why}." for c in reasoned)
    return " ".join(parts)
