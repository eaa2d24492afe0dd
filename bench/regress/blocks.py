"""A case's verdict from its own ABBA blocks (`bench ab`): the paired per-block ratios B/A (pure functions).

Each block measured both sides side by side (ABBA or BAAB), so its ratio r_j = b_j / a_j carries the noise of this
case on this machine at that moment, drift of the machine included. The unit judged is a pair of worker processes
(bench.regress.ab.rounds.pair_ratios: its blocks' median ratio), since a process's state lasts for all its blocks;
`bench ab` gives every block of a case a fresh pair, so a unit is one block. With l_j = ln r_j over n units:
  estimate   exp(HL), HL the Hodges-Lehmann estimate of the centre of the l_j: the median of the n(n+1)/2 Walsh
             averages (l_i + l_j) / 2, i <= j;
  interval   the distribution-free (1 - 2 alpha) interval of that centre from the same Walsh averages (the one the
             signed-rank test inverts): 98% at alpha = 0.01, so that its lower end past the threshold is the
             one-sided test at alpha that the case is slower by more than the threshold;
  test       the one-sided Wilcoxon signed-rank test of the l_j against 0 (no change), exact, in the direction of
             the estimate; p < alpha.
Verdict, with t = ln(1 + threshold):
  regressed     the interval lies above +t and the test rejects;  improved: below -t and the test rejects;
  unchanged     the interval lies within [-t, +t]: whatever moved is smaller than the threshold;
  inconclusive  the interval straddles +t or -t, or there are too few units for any interval at alpha (fewer than
                MIN_BLOCKS): more blocks, in fresh workers, would decide (--blocks auto).
False alarms: an unchanged case regresses only when all of 7 units (or nearly all of more) lie above +t; with
normal between-process spreads (sd of l_j) of 5%, 20% and 50% that is 3e-6, 0.002 and 0.004 of cases, never over
2^-7 = 0.0078 at 7 units. A x1.2 case regresses at 7 units with 97% chance at a 5% spread, 81% at 7%; undecided, it
gets more (--blocks auto).
Ranks, not a t-interval: on a shared machine a block ratio is sometimes far off (a process that ran beside one side
only for a whole slice), and one such block moves a mean and its standard deviation, so the t-interval of 5-44
blocks of a x1.1 kernel on a loaded 2-core machine spanned x1.05-x1.64; ranks give it the weight of any one block.
The price: the interval needs 2^-n <= alpha, so at least MIN_BLOCKS blocks.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.regress.noise import Rule

DECIDED = ("regressed", "improved", "unchanged")
MIN_BLOCKS = 7  # 2^-7 = 0.0078: the fewest blocks whose signed-rank test can reach alpha = 0.01


@dataclass(frozen=True)
class BlockStats:
    ratios: tuple[float, ...]  # b_j / a_j of each unit (a worker pair; bench ab: one block each), in block order
    estimate: float  # exp of the Hodges-Lehmann estimate of the log ratios
    low: float  # the (1 - 2 alpha) interval of the estimate, as ratios (nan with too few blocks)
    high: float
    p: float  # one-sided signed-rank test against no change, in the direction of the estimate
    verdict: str  # regressed | improved | unchanged | inconclusive
    blocks: int = 0  # the ABBA blocks behind the units (0: one each)

    @property
    def n(self) -> int:
        return len(self.ratios)

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED


@functools.lru_cache(maxsize=64)
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(T+ <= t) for t = 0 .. n(n+1)/2 under no change: T+ is the sum of the ranks of the positive l_j, each rank
    positive or negative with probability 1/2 (the exact null distribution, by counting subsets of 1..n)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return np.cumsum(counts) / 2.0**n


def _critical(n: int, alpha: float) -> int | None:
    """The largest c with P(T+ <= c - 1) <= alpha, i.e. how many Walsh averages each end of the interval drops;
    None when even T+ = 0 is likelier than alpha (too few blocks for an interval)."""
    cdf = _signed_rank_cdf(n)
    below = np.nonzero(cdf <= alpha)[0]
    return int(below[-1]) + 1 if len(below) else None


def _t_plus(logs: np.ndarray) -> float:
    """Sum of the ranks of |l_j| over the positive l_j (average ranks for ties; a zero counts half each way)."""
    order = np.abs(logs)
    ranks = np.empty(len(logs))
    sorted_idx = np.argsort(order, kind="stable")
    ranks[sorted_idx] = np.arange(1, len(logs) + 1)
    for value in np.unique(order):  # ties share their average rank
        same = order == value
        if same.sum() > 1:
            ranks[same] = ranks[same].mean()
    return float(ranks[logs > 0].sum() + 0.5 * ranks[logs == 0].sum())


def block_stats(ratios: Sequence[float], rule: Rule, blocks: int = 0) -> BlockStats:
    """Estimate, interval, test and verdict of one case from its units' B/A ratios (the module docstring); blocks:
    how many ABBA blocks they summarise (0: one each)."""
    r = np.asarray(ratios, dtype=float)
    if not len(r) or not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise ValueError(f"block ratios must be positive and finite, got {list(ratios)}")
    logs, n = np.log(r), len(r)
    i, j = np.triu_indices(n)
    walsh = np.sort((logs[i] + logs[j]) / 2)
    centre = float(np.median(walsh))
    thr = math.log1p(rule.threshold)
    c = _critical(n, rule.alpha)
    if c is None:  # no interval at alpha from this few blocks
        return BlockStats(tuple(map(float, r)), math.exp(centre), math.nan, math.nan, 1.0, "inconclusive", blocks)
    lo, hi = float(walsh[c - 1]), float(walsh[len(walsh) - c])
    t_plus, cdf = _t_plus(logs), _signed_rank_cdf(n)
    total = n * (n + 1) // 2
    if centre >= 0:  # P(T+ >= observed) = P(T+ <= total - observed), by symmetry
        p = float(cdf[int(math.floor(total - t_plus + 1e-9))])
    else:
        p = float(cdf[int(math.floor(t_plus + 1e-9))])
    if lo > thr and centre > 0 and p < rule.alpha:
        verdict = "regressed"
    elif hi < -thr and centre < 0 and p < rule.alpha:
        verdict = "improved"
    elif -thr <= lo and hi <= thr:
        verdict = "unchanged"
    else:
        verdict = "inconclusive"
    return BlockStats(tuple(map(float, r)), math.exp(centre), math.exp(lo), math.exp(hi), p, verdict, blocks)


def describe(stats: BlockStats, rule: Rule) -> str:
    """One phrase for the report: the estimate, its interval, and why that is the verdict."""
    units = _units(stats)
    if math.isnan(stats.low):
        return (f"x{stats.estimate:.2f} from {units}: too few for an interval at alpha {rule.alpha:g} "
                f"(give at least {MIN_BLOCKS} blocks, each in fresh workers)")
    level = f"{1 - 2 * rule.alpha:.0%}"
    span = f"x{stats.estimate:.3f} [{stats.low:.3f}, {stats.high:.3f}] ({level}, {units})"
    edge = f"x{1 + rule.threshold:.2f}"
    if stats.verdict == "regressed":
        return f"slower: {span}, all above {edge}"
    if stats.verdict == "improved":
        return f"faster: {span}, all below x{1 / (1 + rule.threshold):.2f}"
    if stats.verdict == "unchanged":
        return f"{span} within {edge} both ways"
    return f"{span} straddles the threshold ({edge}): more blocks would decide"


def _units(stats: BlockStats) -> str:
    """'7 blocks' when each unit is one block, else '2 worker pairs of 7 blocks'."""
    if stats.blocks in (0, stats.n):
        return f"{stats.n} blocks"
    return f"{stats.n} worker pair{'s' * (stats.n != 1)} of {stats.blocks} blocks"
