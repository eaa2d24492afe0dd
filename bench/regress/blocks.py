"""A case's verdict from its own ABBA blocks (`bench ab`): the paired per-block ratios B/A (pure functions).

Each block measured both sides side by side (ABBA or BAAB), so its ratio r_j = b_j / a_j carries the noise of this
case on this machine at that moment, drift of the machine included. With l_j = ln r_j over n blocks:
  estimate   exp(mean l_j), the geometric mean of the block ratios;
  interval   exp(mean l_j +- t(1 - alpha, n - 1) * sd(l_j) / sqrt(n)): the two-sided (1 - 2 alpha) interval, 98% at
             alpha = 0.01, so that its lower end past the threshold is the one-sided test at alpha that the case is
             slower by more than the threshold;
  test       one-sided t-test of mean l_j against 0 (no change), in the direction of the estimate; p < alpha.
Verdict, with t = ln(1 + threshold):
  regressed     the interval lies above +t and the test rejects;  improved: below -t and the test rejects;
  unchanged     the interval lies within [-t, +t]: whatever moved is smaller than the threshold;
  inconclusive  the interval straddles +t or -t (or there is one block): more blocks would decide (--blocks auto).
A t-interval, not a rank test: with 5 blocks no rank test can reach alpha = 0.01 (a signed-rank p >= 1/32), and one
block slowed by the host widens the interval (more doubt), it does not make a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from bench.regress.noise import Rule

DECIDED = ("regressed", "improved", "unchanged")


@dataclass(frozen=True)
class BlockStats:
    ratios: tuple[float, ...]  # b_j / a_j of each block, in block order
    estimate: float  # geometric mean of the ratios
    low: float  # the (1 - 2 alpha) interval of the estimate, as ratios (nan with one block)
    high: float
    p: float  # one-sided t-test against no change, in the direction of the estimate (1.0 with one block)
    verdict: str  # regressed | improved | unchanged | inconclusive

    @property
    def n(self) -> int:
        return len(self.ratios)

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED


def block_stats(ratios: Sequence[float], rule: Rule) -> BlockStats:
    """Estimate, interval, test and verdict of one case from its blocks' B/A ratios (the module docstring)."""
    r = np.asarray(ratios, dtype=float)
    if not len(r) or not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise ValueError(f"block ratios must be positive and finite, got {list(ratios)}")
    logs = np.log(r)
    mean, n = float(np.mean(logs)), len(logs)
    thr = math.log1p(rule.threshold)
    if n < 2:  # one ratio has no spread: nothing to build an interval from
        return BlockStats(tuple(map(float, r)), math.exp(mean), math.nan, math.nan, 1.0, "inconclusive")
    se = float(np.std(logs, ddof=1)) / math.sqrt(n)
    half = float(student_t.ppf(1 - rule.alpha, n - 1)) * se
    lo, hi = mean - half, mean + half
    # identical blocks (synthetic data) are certain, unless there is no move at all
    p = float(student_t.sf(abs(mean) / se, n - 1)) if se > 0 else (0.0 if mean != 0 else 1.0)
    if lo > thr and mean > 0 and p < rule.alpha:
        verdict = "regressed"
    elif hi < -thr and mean < 0 and p < rule.alpha:
        verdict = "improved"
    elif -thr <= lo and hi <= thr:
        verdict = "unchanged"
    else:
        verdict = "inconclusive"
    return BlockStats(tuple(map(float, r)), math.exp(mean), math.exp(lo), math.exp(hi), p, verdict)


def describe(stats: BlockStats, rule: Rule) -> str:
    """One phrase for the report: the estimate, its interval, and why that is the verdict."""
    if stats.n < 2:
        return f"x{stats.estimate:.2f} from 1 block: no interval (give at least 2 blocks)"
    level = f"{1 - 2 * rule.alpha:.0%}"
    span = f"x{stats.estimate:.3f} [{stats.low:.3f}, {stats.high:.3f}] ({level}, {stats.n} blocks)"
    edge = f"x{1 + rule.threshold:.2f}"
    if stats.verdict == "regressed":
        return f"slower: {span}, all above {edge}"
    if stats.verdict == "improved":
        return f"faster: {span}, all below x{1 / (1 + rule.threshold):.2f}"
    if stats.verdict == "unchanged":
        return f"{span} within {edge} both ways"
    return f"{span} straddles the threshold ({edge}): more blocks would decide"
