"""From the two sides' raw slices of one case to what is judged (pure functions): each block's B/A ratio, which
bench.regress.blocks turns into the case's verdict, and the pooled rounds each side's run document keeps.

The block ratios (block_ratios) use each slice's fastest round. The pooled rounds of each side's document take two
steps, applied to both sides alike, so that a shared machine's interference cancels instead of deciding:
1. Per slice, the fastest half of its rounds (at least 3). Interference on a busy host only ever adds time to a
   round (a preempted process waits; nothing runs code faster), so a slice's slow rounds measure the host and its
   fast rounds the code. Both sides lose the same share of rounds.
2. Per ABBA block, one common level: every round of block j (both sides) is multiplied by G / sqrt(a_j * b_j),
   with a_j and b_j the sides' medians in that block and G their geometric mean over the blocks. A slow spell that
   spans a block moves both sides' slices of it; this removes it, while each block's ratio b_j / a_j, measured
   side by side, is kept exactly.
"""

from __future__ import annotations

import math
import statistics

KEEP_AT_LEAST = 3


def fastest_half(rounds: list[float]) -> list[float]:
    """The fastest half of one slice's rounds, in their order (at least KEEP_AT_LEAST, or all when fewer)."""
    if len(rounds) <= KEEP_AT_LEAST:
        return list(rounds)
    keep = max(KEEP_AT_LEAST, math.ceil(len(rounds) / 2))
    cut = sorted(rounds)[keep - 1]
    out = [x for x in rounds if x < cut]
    return out + [cut] * (keep - len(out))


def _block_medians(slices: list[tuple[int, list[float]]]) -> dict[int, float]:
    by_block: dict[int, list[float]] = {}
    for block, rounds in slices:
        by_block.setdefault(block, []).extend(rounds)
    return {k: statistics.median(v) for k, v in by_block.items() if v}


def judged_rounds(a: list[tuple[int, list[float]]],
                  b: list[tuple[int, list[float]]]) -> tuple[list[float], list[float]]:
    """Each side's pooled rounds for the comparison, from its (block, raw rounds) slices."""
    a = [(k, fastest_half(r)) for k, r in a]
    b = [(k, fastest_half(r)) for k, r in b]
    ma, mb = _block_medians(a), _block_medians(b)
    level = {k: math.sqrt(ma[k] * mb[k]) for k in ma if k in mb and ma[k] > 0 and mb[k] > 0}
    if len(level) >= 2:
        grand = math.exp(statistics.fmean(math.log(v) for v in level.values()))
        a = [(k, [x * grand / level[k] for x in r] if k in level else r) for k, r in a]
        b = [(k, [x * grand / level[k] for x in r] if k in level else r) for k, r in b]
    return [x for _, r in a for x in r], [x for _, r in b for x in r]


def block_ratios(a: list[tuple[int, list[float]]], b: list[tuple[int, list[float]]]) -> list[float]:
    """b_j / a_j of every block both sides timed, in block order: each side's mean over the block's slices of each
    slice's fastest round. What bench.regress.blocks judges a case by.

    The fastest round, not the fastest half: on a shared 2-core machine a slice's rounds are two populations, the
    rounds the process had its core to itself and the rounds it shared it (x2.3 slower here), in any proportion; a
    median of any share of them follows the proportion, the fastest round does not (the sd of the log block ratios
    of one case, 44 blocks at load 3-6: 0.24 by the fastest half's median, 0.20 by the fastest round)."""
    ma = _block_means([(k, min(r)) for k, r in a if r])
    mb = _block_means([(k, min(r)) for k, r in b if r])
    return [mb[k] / ma[k] for k in sorted(ma) if k in mb and ma[k] > 0 and mb[k] > 0]


def _block_means(fastest: list[tuple[int, float]]) -> dict[int, float]:
    by_block: dict[int, list[float]] = {}
    for block, value in fastest:
        by_block.setdefault(block, []).append(value)
    return {k: statistics.fmean(v) for k, v in by_block.items()}

