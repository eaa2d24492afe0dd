"""Conditions decided by interleaved blocks: where a run re-measured a condition's cases (bench.engine.decide,
after the claims' least sets), the condition is judged on those blocks instead of on each case's own CI.

A block ran in a fresh worker process: each (top, bottom) pair of the condition measured as ABBA or BAAB (A the top
case), so a slow spell lands on both sides alike. The block's ratio is the geometric mean over its pairs of the top's
mean slice over the bottom's (a side's fastest, where one slice was stalled: side_time), times the condition's
pair_scale where its ratio is not a time ratio (sparse-ideal: the dense twin's time over the sparse kernel's, over the
ideal 1/density). Over n >= MIN_DECIDE_BLOCKS blocks, the estimate
is the Hodges-Lehmann centre of the log ratios and the interval the distribution-free 95% interval of that centre
(bench.regress.blocks at alpha 0.025 on each side): ranks, so a block that ran beside a busy neighbour weighs no more
than any other, and a fresh process per block, so what a worker's state does to a case (where its buffers landed, what
it compiled) is part of the spread the interval covers. With fewer blocks the condition keeps its CI-based interval and
says how many blocks it has.

Run metadata (RunMeta.decided): one dict per condition re-measured, {"claim", "condition", "key", "pairs", "blocks",
"spent_s"} ("key": the condition's key fields; files before it have its label alone, "condition"); a block is
{"ratio", "worker", "order", "top_s", "bottom_s"} (seconds of each slice, per pair). A condition is found by its
claim and its case pairs (the cases its blocks timed), which no change to how conditions are named moves.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from bench.analysis.conditions import FROM_BLOCKS, Condition, combine, listing
from bench.analysis.verdict import INCONCLUSIVE, NOT_JUDGED, Verdict

MIN_DECIDE_BLOCKS = 6  # 2^-6 = 0.016 <= 0.025: the fewest blocks with a 95% signed-rank interval
ALPHA = 0.025  # each side: a 95% interval, as every claim's
ON_THE_BOUND = 20  # needing this many times the blocks run so far: the estimate is, for any purpose, on the bound


# A side's slices further apart than this: one was stalled, and the side is its fastest slice. Over two default runs
# on a shared 2-core AMD EPYC, 98% of a side's two slices lay within 1.14x of each other (a block's drift), and the
# four past 1.25x (1.45-1.65x) each stretched its condition's 95% interval to that one block.
SLICE_STALL = 1.25


def side_time(slices: Sequence[float]) -> float:
    """One side of a pair in one block: the mean of its slices (ABBA cancels a drift across the block), or, when
    they lie more than SLICE_STALL apart, the fastest (a stall only ever adds time)."""
    return min(slices) if max(slices) > SLICE_STALL * min(slices) else sum(slices) / len(slices)


def block_ratio(top_s: Sequence[Sequence[float]], bottom_s: Sequence[Sequence[float]]) -> float:
    """One block's ratio: the geometric mean over pairs of side_time(top slices) / side_time(bottom slices)."""
    logs = [math.log(side_time(t) / side_time(b)) for t, b in zip(top_s, bottom_s, strict=True)]
    return math.exp(sum(logs) / len(logs))


def blocks_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """(estimate, low, high) of the blocks' ratios: Hodges-Lehmann centre and its 95% signed-rank interval (nan
    ends with fewer than MIN_DECIDE_BLOCKS blocks)."""
    from bench.regress.blocks import block_stats
    from bench.regress.noise import Rule

    stats = block_stats(ratios, Rule(alpha=ALPHA))
    return stats.estimate, stats.low, stats.high


def judged_by_blocks(cond: Condition, blocks: Sequence[dict[str, Any]]) -> Condition:
    """The condition judged on its blocks (as the module docstring says), or as it was with a note of how many
    blocks it has when they are too few for an interval."""
    ratios = [float(b["ratio"]) * cond.pair_scale for b in blocks if _positive(b.get("ratio"))]
    if len(ratios) < MIN_DECIDE_BLOCKS or cond.verdict == NOT_JUDGED:  # too few for an interval: its CI stands
        return dataclasses.replace(cond, blocks=len(ratios))
    estimate, low, high = blocks_interval(ratios)
    return cond.judged(estimate, low, high, why="", basis=FROM_BLOCKS, blocks=len(ratios))


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _pairs(pairs: Any) -> frozenset[tuple[str, str]]:
    return frozenset((str(t), str(b)) for t, b in pairs or ())


def with_blocks(verdict: Verdict, claim_key: str, decided: Sequence[dict[str, Any]] | None) -> Verdict:
    """The verdict with each condition the run re-measured judged on its blocks (found by its case pairs, else by
    its label), and the claim's word recombined."""
    mine = [d for d in decided or () if d.get("claim") == claim_key]
    by_pairs = {_pairs(d.get("pairs")): d.get("blocks") or [] for d in mine if d.get("pairs")}
    by_name = {d.get("condition"): d.get("blocks") or [] for d in mine}
    if not mine or not verdict.conditions:
        return verdict

    def blocks_of(c: Condition) -> list[dict[str, Any]] | None:
        return by_pairs.get(_pairs(c.pairs)) if c.pairs and _pairs(c.pairs) in by_pairs else by_name.get(c.name)

    conditions = tuple(judged_by_blocks(c, blocks) if (blocks := blocks_of(c)) is not None else c
                       for c in verdict.conditions)
    changed = [c for c, old in zip(conditions, verdict.conditions, strict=True) if c is not old]
    if not changed:
        return verdict
    word_now = combine(conditions)
    numbers = verdict.numbers + f" Re-measured in interleaved blocks: {listing(changed)}."
    why = verdict.why
    if word_now != verdict.verdict:  # the CI-based why described the open conditions the blocks have now judged
        why = ""
    still = [c for c in changed if c.verdict == INCONCLUSIVE and c.basis == FROM_BLOCKS]
    if still:  # what the blocks say first; what each case's own CI said before them after it
        why = "Still open after its blocks: " + "; ".join(
            f"{c.name}, {c.low:.2f}–{c.high:.2f}× over {c.blocks} blocks: {blocks_needed(c, c.blocks)}"
            for c in still) + "." + (f" Before them, from each case's CI: {why}" if why else "")
    return dataclasses.replace(verdict, verdict=word_now, numbers=numbers, why=why, conditions=conditions)


def _needed(cond: Condition, blocks: int) -> float:
    """About how many blocks at the spread seen would decide it (the interval narrows as 1/sqrt(blocks)): its
    interval must clear the bound, or, with its estimate within the condition's band of the bound, fit within that
    band, whichever is nearer."""
    distance, band = abs(math.log(cond.ratio / cond.bound)), math.log(cond.band)
    if distance < band:
        distance = max(distance, band - distance)
    half = (math.log(cond.high) - math.log(cond.low)) / 2
    return blocks * (half / distance) ** 2 if distance > 0 else math.inf


def on_the_bound(cond: Condition, blocks: int) -> bool:
    """Whether its estimate sits on the bound: it would need ON_THE_BOUND times the blocks it has."""
    return _needed(cond, blocks) > ON_THE_BOUND * blocks


def blocks_needed(cond: Condition, blocks: int) -> str:
    """What would decide a condition its blocks left open: about how many blocks at the spread seen, or nothing,
    where its estimate sits on the bound."""
    if on_the_bound(cond, blocks):
        return "its estimate sits on the bound; no practical number of blocks decides it"
    return f"about {math.ceil(_needed(cond, blocks))} blocks at the spread seen would decide it"
