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

The claim's word over its conditions (`combine`). A condition at a bound it may reach counts as holding by a tolerance
(no run tells its side of the bound), and a tolerance does not turn the other conditions' "does not hold" into
"depends": it sways the claim only where no condition outside the band decides it (the listing names it with its
number either way). At a margin to clear, "at its bound" is the claim's own answer (not clearly faster) and counts as
any failure does. Then:
- holds: every condition holds; does not hold: every condition fails;
- depends: some conditions hold and some fail (the numbers name which, each with its ratio);
- inconclusive: no condition fails against one that holds, but some straddle their bound.

Where the interval comes from is said with it (`basis`): from each case's own confidence interval (a run's cases, each
measured once, in one worker — it cannot see what a different worker or a different moment would give), from
interleaved blocks spanning several fresh worker processes, or counted (bytes, which no timing noise moves).

A condition is data: its key fields (backend, dtype, variant, length ...: `key`, in the order a reader reads them),
its ratio in a stated `unit` (a time ratio, a share, a memory exponent, a byte ratio, a share of an ideal speedup),
its interval, its bound (always set; a claim with two thresholds, one to hold and one to fail, names both:
`bound` and `fail_bound`), its word, its basis and the blocks behind it, and any further facts (`facts`: S*, the
kernel it was set against). Its `name`, the label prose uses, is written from the key, never parsed back. A
condition a claim lists but does not judge (measured at too few lengths, a backend with no trait to judge it by)
has the word NOT_JUDGED: the claim's word ignores it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, INCONCLUSIVE, NOT_JUDGED, NOT_MEASURED

# a ratio whose whole interval lies within this factor of its bound meets the bound: runs of the same code put one
# kernel pair a few percent apart (flex's softcap prefill over its plain twin: 1.27x, 1.30x and 1.32x in three runs,
# against 1.3x), so no number of blocks in one run tells a side of the bound that another run would agree on
AT_BOUND = 1.05
FROM_CIS = "each case's CI"  # one measurement per case: the interval is the timings' noise within that measurement
FROM_BLOCKS = "interleaved blocks"  # both sides in ABBA blocks across fresh workers
COUNTED = "counted"  # bytes counted, not timed: no timing interval applies

# What a ratio counts, and how it reads
TIME_RATIO = "time ratio"  # one time over another: 1.48×
BYTE_RATIO = "byte ratio"  # one cache's bytes over another's: 8×
SHARE = "share"  # a part of a whole: 49.9% (truncated to 0.1%, so that one just under half never reads as 50%)
EXPONENT = "exponent"  # k of a fit ∝ S^k: S^1.91
OF_IDEAL = "share of ideal"  # a speedup over the speedup it would ideally reach: 0.81 of ideal
UNITS = (TIME_RATIO, BYTE_RATIO, SHARE, EXPONENT, OF_IDEAL)

Key = tuple[tuple[str, Any], ...]
# a key field's name where a label or a table shows it; a field not named here reads as its value alone
FIELD_NAMES = {"group_size": "Hq/Hkv", "seq_kv": "KV", "seq": "S", "seq_q": "Sq", "n_heads": "Hq", "n_kv_heads": "Hkv",
               "head_dim": "D", "batch": "B", "page_size": "pages of", "prefix": "P", "suffix": "L", "v_heads": "Hv",
               "qk_heads": "Hqk", "against": "vs", "where": "where",
               "tokens": "N"}


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (a key goes into JSON and CSV as it is)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def value_text(value: Any) -> str:
    """A key field's value as a reader reads it: whole numbers with thousands separators, others to three
    significant digits, '—' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, float):
        return f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def label(key: Key | Mapping[str, Any]) -> str:
    """'sdpa · fp32 · GQA · Hq/Hkv 4 · KV 16,384': each field's value, with its name where FIELD_NAMES has one."""
    items = key.items() if isinstance(key, Mapping) else key
    return " · ".join(f"{FIELD_NAMES[f]} {value_text(v)}" if f in FIELD_NAMES else value_text(v) for f, v in items)


def amount(x: float, unit: str = TIME_RATIO) -> str:
    """A ratio in its unit: '1.48×', '49.9%', 'S^1.91', '8×', '0.81 of ideal'; '∞' or '—' where not finite."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if math.isinf(x):
        return "∞"
    if unit == SHARE:
        return f"{math.floor(1000 * x) / 10:.1f}%"
    if unit == EXPONENT:
        return f"S^{x:.2f}"
    if unit == BYTE_RATIO:
        return f"{x:.3g}×"
    if unit == OF_IDEAL:
        return f"{x:.2f} of ideal"
    return f"{x:.2f}×"


def threshold(x: float, unit: str = TIME_RATIO) -> str:
    """A bound as its claim states it: '2×', '1.05×', '50.0%', 'S^1.70'."""
    return f"{x:g}×" if unit in (TIME_RATIO, BYTE_RATIO) and math.isfinite(x) else amount(x, unit)


def interval_text(low: float, high: float, unit: str = TIME_RATIO) -> str:
    """'1.42–1.52×', '38.1–52.0%', 'S^1.84–1.95': an interval in its unit, the unit said once."""
    if unit == EXPONENT:
        return f"S^{low:.2f}–{high:.2f}"
    first, last = amount(low, unit), amount(high, unit)
    tail = {TIME_RATIO: "×", BYTE_RATIO: "×", SHARE: "%", OF_IDEAL: " of ideal"}[unit]
    return f"{first.removesuffix(tail)}–{last}" if first.endswith(tail) else f"{first}–{last}"


@dataclass(frozen=True)
class Condition:
    """One condition of a claim: its key fields, its ratio in its unit, its 95% interval, its bound(s) and its word."""

    key: Key  # what it is, field by field: (("backend", …), ("dtype", "fp32"), ("variant", "GQA"), ...)
    ratio: float
    low: float
    high: float
    verdict: str  # HOLDS, FAILS, INCONCLUSIVE, or NOT_JUDGED (listed, not judged: the claim's word ignores it)
    bound: float  # where it holds: at or above it when holds_above, at or below it otherwise
    holds_above: bool = True
    within: bool = False  # it holds within its band of the bound, on either side (a count that must match)
    unit: str = TIME_RATIO
    # where it fails, for a claim with a second threshold (between the two: open); None: the bound itself
    fail_bound: float | None = None
    why: str = ""  # a reason that overrides the interval's word (an on-chip cache, too few lengths), if any
    basis: str = FROM_CIS
    blocks: int = 0  # interleaved blocks run on it (bench.analysis.decided), whatever its basis now
    # the cases whose times make the ratio, as (top, bottom) case ids: ratio = top's time / bottom's time (the
    # median over the pairs). A run re-measures them in interleaved blocks to decide the condition (bench.engine.decide)
    pairs: tuple[tuple[str, str], ...] = ()
    pair_scale: float = 1.0  # its ratio per time ratio of its pairs (sparse-ideal: a speedup over the ideal 1/density)
    band: float = AT_BOUND  # the band around the bound where a condition is at its bound (module docstring)
    at_bound: bool = False  # its estimate is at its bound: `verdict` is then what its claim counts that as
    at_bound_means: str = HOLDS  # what "at its bound" counts as for its claim: HOLDS or FAILS
    facts: Key = ()  # further numbers and names of it, field by field: (("s_star", 4096), ("against", …))

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit {self.unit!r} is not one of {UNITS}")
        for name in ("key", "facts"):  # a mapping passed in is kept as its items, in order (frozen, hashable)
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"a condition's {name} is its fields (a mapping), not a label: {value!r}")
            items = value.items() if isinstance(value, Mapping) else value
            object.__setattr__(self, name, tuple((str(f), _plain(v)) for f, v in items))
        if self.fail_bound is None:
            object.__setattr__(self, "fail_bound", self.bound)
        object.__setattr__(self, "pairs", tuple((str(t), str(b)) for t, b in self.pairs))

    @property
    def name(self) -> str:
        """Its label for prose, written from its key: 'sdpa · fp32 · GQA · Hq/Hkv 4 · KV 16,384'."""
        return label(self.key)

    @property
    def fields(self) -> dict[str, Any]:
        return dict(self.key)

    @property
    def holds_by_tolerance(self) -> bool:
        """It holds only because its estimate is at a bound it may reach: no run tells its side (combine)."""
        return self.at_bound and self.verdict == HOLDS

    def as_dict(self) -> dict[str, Any]:
        return {"condition": self.name, "key": dict(self.key), "ratio": self.ratio, "unit": self.unit,
                "low": self.low, "high": self.high, "verdict": self.verdict, "why": self.why, "basis": self.basis,
                "blocks": self.blocks, "bound": self.bound, "fail_bound": self.fail_bound,
                "holds_above": self.holds_above, "within": self.within, "pairs": [list(p) for p in self.pairs],
                "at_bound": self.at_bound, "facts": dict(self.facts)}

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


def condition(key: Mapping[str, Any] | Key, ratio: float, interval: tuple[float, float], bound: float,
              holds_above: bool, **more: Any) -> Condition:
    """A condition judged by its estimate and interval against its bound, by `word` (the band and at_bound_means
    among `more`: what its claim counts "at its bound" as). `more`: Condition's other fields (unit, basis, pairs,
    facts ...)."""
    low, high = interval
    verdict, on = word(ratio, low, high, bound, holds_above, more.get("band", AT_BOUND),
                       more.get("at_bound_means", HOLDS))
    return Condition(key, ratio, low, high, verdict, bound, holds_above, at_bound=on, **more)


def between(key: Mapping[str, Any] | Key, ratio: float, interval: tuple[float, float], holds_at: float,
            fails_at: float, **more: Any) -> Condition:
    """A condition of a claim with two thresholds: holds when its whole interval is on the holding side of
    `holds_at`, does not hold when it is wholly past `fails_at` (the far side), else open (its interval reaches
    between the two, or straddles one)."""
    low, high = interval
    below = holds_at < fails_at  # holds at or below holds_at, fails at or above fails_at
    holds = high <= holds_at if below else low >= holds_at
    fails = low >= fails_at if below else high <= fails_at
    verdict = HOLDS if holds else FAILS if fails else INCONCLUSIVE
    return Condition(key, ratio, low, high, verdict, holds_at, not below, fail_bound=fails_at, **more)


def not_judged(key: Mapping[str, Any] | Key, ratio: float, interval: tuple[float, float], bound: float,
               holds_above: bool, why: str, **more: Any) -> Condition:
    """A condition its claim lists but does not judge, and why (the claim's word ignores it)."""
    return Condition(key, ratio, *interval, NOT_JUDGED, bound, holds_above, why=why, **more)


def spans(lengths: Sequence[int], least: int, factor: float) -> bool:
    """Whether these lengths are at least `least` of them spanning at least `factor` times: enough to say a line
    never crosses its bound (a crossover moves with length)."""
    return len(lengths) >= least and max(lengths) >= factor * min(lengths)


def pairs_of(rows: Any, top: str, bottom: str = "case_id") -> list[tuple[str, str]]:
    """The (top, bottom) case ids of a frame's rows, from two case id columns (rows without both are left out)."""
    if top not in rows or bottom not in rows:
        return []
    return [(t, b) for t, b in zip(rows[top], rows[bottom], strict=True) if isinstance(t, str) and isinstance(b, str)]


def combine(conditions: Iterable[Condition | str]) -> str:
    """The claim's word from its conditions' (Conditions or their words), by the rule in this module's docstring."""
    def word_of(c: Condition | str) -> str:
        return c.verdict if isinstance(c, Condition) else c

    measured = [c for c in conditions if word_of(c) not in (NOT_MEASURED, NOT_JUDGED)]
    if not measured:
        return NOT_MEASURED
    placed = [c for c in measured if not (isinstance(c, Condition) and c.holds_by_tolerance)]
    words = {word_of(c) for c in placed or measured}
    if words == {HOLDS}:
        return HOLDS
    if words == {FAILS}:
        return FAILS
    if HOLDS in words and FAILS in words:
        return DEPENDS
    return INCONCLUSIVE


def bound_text(c: Condition) -> str:
    """'≥ 2×', '≤ 1.3×'; with a second threshold '≤ 0.95× holds, ≥ 1.05× fails'; 'within 2% of 8×'."""
    if c.within:
        return f"within {c.band - 1:.0%} of {threshold(c.bound, c.unit)}"
    mine = f"{'≥' if c.holds_above else '≤'} {threshold(c.bound, c.unit)}"
    if c.fail_bound == c.bound:
        return mine
    return f"{mine} holds, {'≤' if c.holds_above else '≥'} {threshold(c.fail_bound, c.unit)} fails"


def shown(c: Condition) -> str:
    """'sdpa · fp32 · GQA · Hq/Hkv 4 · KV 16,384 1.48× (1.42–1.52×)': a condition with its number and interval
    (one number where its interval is that number: counted)."""
    spread = "" if c.low == c.high == c.ratio else f" ({interval_text(c.low, c.high, c.unit)})"
    return f"{c.name} {amount(c.ratio, c.unit)}{spread}"


def listing(conditions: Sequence[Condition]) -> str:
    """Every judged condition with its ratio, interval and word, grouped by word: 'holds in 2 of 4 (a: …; b: …);
    does not hold in 1 (c: …); inconclusive in 1 (d: …)'."""
    judged_ = [c for c in conditions if c.verdict != NOT_JUDGED]
    parts = []
    for w in (HOLDS, FAILS, INCONCLUSIVE):
        these = [c for c in judged_ if c.verdict == w]
        if these:
            body = "; ".join(shown(c) + (f", {c.why}" if c.why else "")
                             + (f", at its bound (within {c.band - 1:.0%} of {threshold(c.bound, c.unit)})"
                                if c.at_bound else "") for c in these)
            parts.append(f"{w} in {len(these)} of {len(judged_)} ({body})")
    basis = sorted({c.basis for c in judged_})
    return "; ".join(parts) + (f" [95% intervals from {', '.join(basis)}]" if basis else "")


# What narrows a timed interval, said one way for every claim: decide_by composes it with what else would decide one
MORE_ROUNDS = "more rounds per case (a larger --budget)"


def decide_by(*ways: str) -> str:
    """'More rounds per case (a larger --budget) or longer lengths decide it'."""
    said = " or ".join(ways)
    return f"{said[0].upper()}{said[1:]} decide it"


def undecided_why(conditions: Sequence[Condition], decide: str = decide_by(MORE_ROUNDS)) -> str:
    """The `why` of a claim with open conditions: those whose interval straddles the bound (and what decides them),
    then those left open for a stated reason (their `why`)."""
    straddling = [c for c in conditions if c.verdict == INCONCLUSIVE and not c.why]
    reasoned = [c for c in conditions if c.verdict == INCONCLUSIVE and c.why]
    parts = []
    if straddling:
        names = "; ".join(f"{c.name} ({interval_text(c.low, c.high, c.unit)})" for c in straddling)
        many = len(straddling) > 1
        bounds = ", ".join(dict.fromkeys(threshold(c.bound, c.unit) for c in straddling))
        parts.append(f"{len(straddling)} condition{'s' * many} straddle{'' if many else 's'} {bounds} within "
                     f"{'their' if many else 'its'} own timings' interval: {names}. {decide}.")
    parts.extend(f"{c.name} is open: {c.why}." for c in reasoned)
    return " ".join(parts)
