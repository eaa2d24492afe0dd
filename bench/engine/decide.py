"""Once its cases have run, a run under a time budget spends the share it kept
(bench.engine.budget.DECIDE_SHARE) deciding the claims' open conditions: those whose 95% interval, from each case's
own CI, straddles their bound; those within NEAR_PIVOTAL of it whose word could turn their claim's; and those within
NEAR_BOUND of it (one worker's CI does not see what another worker would give).

Each such condition names the (top, bottom) cases behind its ratio (bench.analysis.conditions). They are measured again
in blocks, each pair as ABBA or BAAB at random, so a slow spell of the machine lands on both sides alike; a slice is the
case's headline timing alone (Runner.slice: its call built and warmed up at its first slice in a worker, and kept for
its second), so a block costs its timing, not a whole case's run. A case is checked against float64 at its first slice
of the deciding, not again in each later round's worker: the same code on the same seeded inputs gives the same output
there, and the check of a prefill case (its float64 reference) cost more than its block. The blocks run in rounds: each
round is a fresh worker process that takes one block of every condition still being decided, in a random order, so a
worker's state (where its buffers landed, what it compiled) is part of the spread across rounds, not a constant that
reads as a difference, and its start-up is paid once per round, not once per block; the worker is forked from a server
that imported torch, the compiler and transformers once (bench.engine.forked), so that start-up is its cases' own builds
and compiles. Conditions join in order (those whose word could turn their claim's first, the nearest their bound
before the farther, the claims taking turns; the straddling ones first among a claim's, then the least decided) while
each of them could still get MIN_DECIDE_BLOCKS blocks in the time left, at the costs the rounds so far have shown (a
round: its start-up, then each block's usual seconds); the last to join leaves first when they cannot. One leaves once
its blocks decide it (bench.analysis.decided: at least MIN_DECIDE_BLOCKS, judged by their signed-rank interval; at its
bound is decided too: bench.analysis.conditions), show it on its bound, or reach MAX_BLOCKS, and the next joins. A
condition open for a stated reason (a cache on-chip, too few lengths) is not re-measured: more rounds cannot decide
it. The blocks go into the run's metadata (RunMeta.decided), with the seconds spent on each condition; the report
judges those conditions on their blocks.

Before that, the timings that look stalled or ran in a slow spell of the host are measured once more
(bench.engine.remeasure).

The frame the claims' judges read needs pandas: it is loaded here, once the sweep is over (the planner imports none).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.analysis.conditions import combine
from bench.analysis.decided import MIN_DECIDE_BLOCKS, block_ratio, judged_by_blocks, on_the_bound
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE
from bench.claims import CLAIMS, verdicts
from bench.engine.execute import RunnerSetup
from bench.engine.forked import preload
from bench.engine.isolate import Isolated
from bench.engine.remeasure import remeasure_suspects
from bench.problem.case import Case

SLICE_BUDGET_S = 0.25  # timing seconds of one slice (a block has four per pair)
SLICE_TIMEOUT_S = 120.0  # a slice past this (its first in a worker builds, checks and compiles) is dropped
MAX_BLOCKS = 12  # a condition still open after this many blocks is left as it is: its ratio sits on the bound
MAX_PAIRS = 4  # a condition resting on more pairs than this costs too much a block to re-measure here
# a condition whose CI-based word is decided but whose ratio is within this factor of its bound is re-measured too:
# one worker's CI does not see what another worker, or another moment, would give
NEAR_BOUND = 1.10
# ... and within this factor where its word could turn the claim's: flex's paged decode step over its contiguous twin
# read 1.02x on one worker's CI and 1.36x over fresh workers' blocks, in two runs of the same code (bound 1.3x), and
# transformers' masked prefill over torch's kernel 1.75x in one worker where four other runs read 1.09-1.11x (bound
# 1.2x). The least decided go first, so the far ones take only what the near ones leave.
NEAR_PIVOTAL = 2.0
# ... taking blocks in steps of this log distance from it, the nearest first: over 51 saved default runs the blocks
# changed the word of 13 of 204 pivotal conditions within 1.1-1.22x of their bound (their CI's ratio), of 4 of 138
# at 1.22-1.35x, and of 1 of 132 farther (to inconclusive), which had taken 823 s of blocks, 17 s a run
FAR_STEP = 0.1
BLOCK_GUESS_S = 1.5  # a pair's block before one has run, where the sweep's records do not say (guess_block_s)
# a case's first call in a fresh worker over its first call in the sweep (whose process had compiled others): flex's
# paged decode took 0.6 s in the sweep and 2.5 s in a fresh worker, its block-sparse prefill 1 s and 4.7 s. Its set-up
# too (its inputs, call and cold copies: setup_s): a fresh worker's pages are new, where the sweep's process reuses
# freed ones. A fp32 MHA decode step at KV 16,384 (64 MiB of K/V, 3 copies) took 0.08 s in the sweep and 0.22 s in a
# fresh process, its MQA twin (8 MiB, 24 copies) 0.018 s and 0.11 s (2-core AMD EPYC)
SETUP_FACTOR = 3.0
SLICE_FLOOR_S = 0.1  # a slice's seconds at least: its rotation's fill and the timer's rounds
ROUND_GUESS_S = 5.0  # a round's start-up before one has run, guessed high: 0.1-0.2 s forked, seconds if new


@dataclass(frozen=True)
class OpenCondition:
    claim: str  # the claim's key
    condition: Any  # the report's Condition (its name, pairs, interval and bound), to judge the blocks as they come
    guess_s: float = 0.0  # its block's seconds before one has run (guess_block_s); 0: BLOCK_GUESS_S per pair

    @property
    def name(self) -> str:
        return self.condition.name

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        return self.condition.pairs

    @property
    def block_guess_s(self) -> float:
        return self.guess_s or BLOCK_GUESS_S * len(self.pairs)

    @property
    def openness(self) -> float:
        """How near the middle of the interval the bound sits (0.5: the middle, the least decided; 0: an end)."""
        c = self.condition
        lo, hi, b = math.log(c.low), math.log(c.high), math.log(c.bound)
        return min(b - lo, hi - b) / (hi - lo) if hi > lo else 0.0


def open_conditions(doc: Any, path: Any, by_id: dict[str, Case]) -> list[OpenCondition]:
    """The run's conditions worth blocks, whose cases this run has: those whose interval straddles their bound,
    those within NEAR_PIVOTAL of it whose word could turn their claim's (pivotal), those within NEAR_BOUND of it.
    In three tiers (tier): pivotal ones near their bound, then the other pivotal ones, then the rest; within each
    the claims take turns (in_turns)."""
    from bench.analysis.load import doc_frame

    frame, info = doc_frame(doc, path)
    records = frame.drop_duplicates("case_id").set_index("case_id")
    found = []
    for spec, verdict in zip(CLAIMS, verdicts(frame, info.meta), strict=True):
        for c in verdict.conditions:
            if not measurable(c, by_id):
                continue
            cond, turns = OpenCondition(spec.key, c, guess_block_s(c.pairs, records)), pivotal(c, verdict.conditions)
            far = _far(c)
            if c.verdict == INCONCLUSIVE or far < math.log(NEAR_BOUND) or (turns and far < math.log(NEAR_PIVOTAL)):
                found.append((tier(c, turns), c.verdict != INCONCLUSIVE, -cond.openness, far, cond))
    return in_turns([(rank, o) for rank, *_, o in sorted(found, key=lambda item: item[:4])])


def tier(c: Any, turns: bool) -> int:
    """0: its word could turn its claim's and its interval straddles the bound, or its ratio is within NEAR_BOUND
    of it; 1: its word could turn its claim's, farther from the bound (a worker's CI can miss by that much, seldom);
    2: the rest. Where the time cannot decide them all (a loud host's run: 19 pivotal of 26 open, 89 s for them) the
    nearest are the likeliest to change word: over 51 default runs on a 2-core AMD EPYC, the blocks changed the word
    of 56 of 193 tier-0 conditions they judged (33 to the other word), of 18 of 474 in tier 1 (11) and of none of 36
    in tier 2. That loud run had left paging's pages of 16 at 1.33x against 1.3x with five blocks and sparse-ideal's
    straddling one with none, and given six each to heads' 2.33x (2.07-2.80x) against 1.5x and cascade's 1.45x
    against 0.95x. The farther ones are not left out: a worker's CI missed FlexAttention's score variants by 30% on
    that host (1.48x and 1.68x where blocks read 1.12x and 1.28x, against 1.3x)."""
    if not turns:
        return 2
    return 0 if c.verdict == INCONCLUSIVE or _far(c) < math.log(NEAR_BOUND) else 1


def in_turns(ranked: list[tuple[int, OpenCondition]]) -> list[OpenCondition]:
    """(tier, condition) in their order (straddling first, then the least decided) reordered so that, tier by tier,
    the claims take turns: every claim's first condition of the tier, the cheapest block first, then every claim's
    second, and so on; tier 1 in steps of FAR_STEP from the bound, the nearest step first. A claim with many
    conditions near its bound (auto-choice has eighteen) would otherwise take the deciding time from claims that one
    or two blocked conditions settle, and one costly block (a block-sparse FlexAttention prefill's, 6 s) the time
    that five cheap ones need."""
    seen: dict[tuple[str, int, int], int] = {}
    turns = []
    for place, (rank, cond) in enumerate(ranked):
        step = int(min(_far(cond.condition), 10.0) / FAR_STEP) if rank == 1 else 0
        turn = seen[cond.claim, rank, step] = seen.get((cond.claim, rank, step), -1) + 1
        turns.append(((rank, step, turn, cond.block_guess_s, place), cond))
    return [cond for _, cond in sorted(turns, key=lambda item: item[0])]


def guess_block_s(pairs: Any, records: Any) -> float:
    """A block's seconds before one has run, from the sweep's records of its cases (records: the run's frame indexed
    by case_id): per case, its setup in a fresh worker (SETUP_FACTOR times the sweep's first call and its setup_s:
    its inputs, call and cold copies built again, on new pages) and two slices, each SLICE_FLOOR_S to SLICE_BUDGET_S
    as the timer's rounds of its calls need (MIN_ROUNDS, LONG_CALL_MIN_ROUNDS for a long one); 0 where a case's
    record is missing."""
    from bench.measure.timer import LONG_CALL_MIN_ROUNDS, MIN_ROUND_S, MIN_ROUNDS

    total = 0.0
    for case in (case for pair in pairs for case in pair):
        if case not in records.index:
            return 0.0
        first, median, built = (float(records.at[case, name]) if name in records else math.nan
                                for name in ("first_call_s", "median_s", "setup_s"))
        if not median > 0:
            return 0.0
        one = max(SLICE_FLOOR_S, min(SLICE_BUDGET_S, MIN_ROUNDS * max(median, MIN_ROUND_S)),
                  LONG_CALL_MIN_ROUNDS * median)
        total += SETUP_FACTOR * sum(s for s in (first, built) if s > 0) + 2 * one
    return total


def measurable(c: Any, by_id: dict[str, Case]) -> bool:
    """Whether blocks can judge a condition: its pairs are this run's cases (at most MAX_PAIRS), its interval is
    finite, and it is not open for a stated reason (a cache on-chip, too few lengths: more rounds cannot decide
    those). A word with a note (cascade's "level with plain attention", a loss) is decided by its interval, so its
    blocks can judge it again."""
    stated = bool(c.why) and c.verdict not in (HOLDS, FAILS)
    return (not stated and c.low > 0 and math.isfinite(c.high) and math.isfinite(c.bound) and bool(c.pairs)
            and len(c.pairs) <= MAX_PAIRS and all(t in by_id and b in by_id for t, b in c.pairs))


def _far(c: Any) -> float:
    """How far a condition's ratio is from its bound, as a log factor (inf where it has none)."""
    ok = c.ratio > 0 and c.bound > 0 and math.isfinite(c.ratio) and math.isfinite(c.bound)
    return abs(math.log(c.ratio / c.bound)) if ok else math.inf


def pivotal(cond: Any, conditions: Any) -> bool:
    """Whether the claim's word would change were this condition's word the other one (holds for fails), alone or
    with every condition of its claim that has its word and is within NEAR_BOUND of its bound (two kernels near the
    bound can turn the claim together where neither can alone)."""
    now = combine(conditions)
    near = math.log(NEAR_BOUND)
    together = {id(c) for c in conditions if c is cond or (c.verdict == cond.verdict and _far(c) < near)}
    return any(combine([alt if (c is cond if alone else id(c) in together) else c for c in conditions]) != now
               for alt in (HOLDS, FAILS) for alone in (True, False))


def block(executor: Isolated, cond: OpenCondition, by_id: dict[str, Case], rng: random.Random,
          worker: int, checked: set[str] | None = None) -> dict[str, Any] | None:
    """One block of a condition in the round's worker: each pair ABBA or BAAB; None when a case did not end ok.
    checked: the cases a slice of this deciding has already checked against float64 (their first slice in a later
    round's worker is not checked again); each case this block times is added."""
    order = rng.choice(("ABBA", "BAAB"))
    checked = set() if checked is None else checked
    tops, bottoms = [], []
    for top, bottom in cond.pairs:
        slices: dict[str, list[float]] = {"A": [], "B": []}
        for side in order:
            case_id = top if side == "A" else bottom
            seconds = executor.slice(by_id[case_id], SLICE_TIMEOUT_S, check=case_id not in checked)
            if seconds is None:
                return None
            checked.add(case_id)
            slices[side].append(seconds)
        tops.append(slices["A"])
        bottoms.append(slices["B"])
    return {"ratio": block_ratio(tops, bottoms), "worker": worker, "order": order, "top_s": tops,
            "bottom_s": bottoms}


def decide(doc: Any, path: Any, by_id: dict[str, Case], setup: RunnerSetup, threads: int | None,
           seconds_left: Callable[[], float], say: Callable[[str], None],
           executor: Isolated | None = None) -> list[dict[str, Any]]:
    """First the timings that look stalled, each re-measured once (doc.meta.suspects); then the open conditions in
    blocks while seconds_left() allows (the module docstring). Returns RunMeta.decided (also set on doc.meta): per
    condition its claim, name, pairs, blocks and the seconds spent. executor: where the blocks run (default: worker
    processes with the run's threads, each slice SLICE_BUDGET_S of timing)."""
    from bench.analysis.load import doc_frame

    frame, behind, first = None, frozenset(), frozenset()
    if doc is not None:
        from bench.analysis.suspects import turning

        frame, info = doc_frame(doc, path)
        found = [c for verdict in verdicts(frame, info.meta) for c in verdict.conditions]
        behind = frozenset(case for c in found for pair in c.pairs for case in pair)
        first = turning(found, frame)
    # each round's fresh worker forked from a server that has imported what the claims' cases need (bench.engine.forked)
    cases = [by_id[case] for case in behind if case in by_id]
    executor = executor or Isolated(threads, preload((c.backend for c in cases), cases[0].device if cases else "cpu"))
    executor.start(RunnerSetup(setup.calibration, setup.gpu_name, SLICE_BUDGET_S, None, threads))
    try:
        if frame is not None:
            doc.meta.suspects = remeasure_suspects(frame, by_id, executor, seconds_left, say, behind, first) or None
        decided = _decide_open(doc, path, by_id, executor, seconds_left, say)
    finally:
        executor.close()
    if doc is not None and decided:
        doc.meta.decided = decided
    return decided


def _decide_open(doc: Any, path: Any, by_id: dict[str, Case], executor: Isolated,
                 seconds_left: Callable[[], float], say: Callable[[str], None]) -> list[dict[str, Any]]:
    queue = open_conditions(doc, path, by_id)
    if not queue:
        return []
    say(f"deciding {len(queue)} open condition(s) in interleaved blocks, a round of blocks per fresh worker "
        f"({max(0.0, seconds_left()):.0f} s left for it):")
    rng, done, active, rounds, overhead = random.Random(0), [], [], 0, ROUND_GUESS_S
    checked: set[str] = set()  # cases a slice has checked against float64: once per case is enough
    starts: list[float] = []  # each round's seconds outside its blocks: its fresh worker's start
    while (queue or active) and seconds_left() > 0:
        for entry in _over(active, overhead, seconds_left()):  # its blocks cost more than guessed
            active.remove(entry)
            done.append(entry)
            _said(entry, say)
        active += _admit(queue, active, overhead, seconds_left(), first=rounds == 0)
        if not active:  # the next condition's blocks could not reach six in the time left
            break
        rounds += 1
        round_started, ran = time.perf_counter(), []
        executor.renew()  # a fresh worker for this round: its state is one draw among the rounds'
        for entry in rng.sample(active, len(active)):  # a random order: no condition always comes first
            if seconds_left() <= 0:
                break
            started = time.perf_counter()
            got = block(executor, entry["cond"], by_id, rng, rounds, checked)
            entry["block_s"].append(time.perf_counter() - started)
            ran.append(entry)
            if got is not None:
                entry["blocks"].append(got)
            else:  # its blocks so far judge it
                say(f"  {entry['cond'].claim}: {entry['cond'].name}: a block could not run, so its blocks end here: "
                    f"{getattr(executor, 'slice_error', '') or 'a slice gave no time'}")
            if got is None or _settled(entry):
                active.remove(entry)
                done.append(entry)
                _said(entry, say)
        # what a round costs beyond its blocks: its worker's start, the median over the rounds. Not the round's time
        # less its blocks' usual seconds: the first round's blocks also check their cases against float64, and
        # that, counted as every round's, had the next round drop conditions after one block
        starts.append(max(0.0, time.perf_counter() - round_started - sum(e["block_s"][-1] for e in ran)))
        overhead = sorted(starts)[len(starts) // 2]
    for entry in active:  # the time ran out with these still taking blocks
        done.append(entry)
        _said(entry, say)
    done = [e for e in done if e["blocks"]]
    left = len(queue) + sum(1 for e in done if judged_by_blocks(e["cond"].condition, e["blocks"]).verdict
                            == INCONCLUSIVE)
    if queue:
        say(f"  {len(queue)} open condition(s) got no block: the time kept for deciding ran out")
    spent_by_claim: dict[str, float] = {}
    for e in done:
        spent_by_claim[e["cond"].claim] = spent_by_claim.get(e["cond"].claim, 0.0) + sum(e["block_s"])
    if spent_by_claim:
        say(f"  spent deciding ({rounds} rounds, a worker's start {overhead:.1f} s each, {left} condition(s) still "
            "open): "
            + ", ".join(f"{k} {v:.0f} s" for k, v in spent_by_claim.items()))
    return [{"claim": e["cond"].claim, "condition": e["cond"].name, "key": dict(e["cond"].condition.key),
             "pairs": [list(p) for p in e["cond"].pairs], "blocks": e["blocks"], "spent_s": sum(e["block_s"])}
            for e in done]


def _cost(entry: dict[str, Any]) -> float:
    """One block's usual seconds: the median of its blocks' after its first, which also checked its cases against
    float64 (a prefill case's check costs about as much as its slices: with that first alone, the guess, kept
    within half of it and all of it), else guessed (guess_block_s)."""
    seconds, guess = sorted(entry["block_s"][1:]), entry["cond"].block_guess_s
    if not seconds:
        return min(entry["block_s"][0], max(guess, entry["block_s"][0] / 2)) if entry["block_s"] else guess
    return seconds[len(seconds) // 2]


def _need(entries: list[dict[str, Any]], overhead: float) -> float:
    """Seconds for each of these to reach MIN_DECIDE_BLOCKS (one more block for those past it), in rounds that
    each cost `overhead` beyond their blocks."""
    left = [max(1, MIN_DECIDE_BLOCKS - len(e["blocks"])) for e in entries]
    return max(left, default=0) * overhead + sum(_cost(e) * n for e, n in zip(entries, left, strict=True))


def _over(active: list[dict[str, Any]], overhead: float, seconds: float) -> list[dict[str, Any]]:
    """The conditions taking blocks, last joined first, that the time left cannot also carry to MIN_DECIDE_BLOCKS
    at the costs seen: the first to join keeps its blocks coming (the queue's order is what matters most to the
    claims; dropping the costliest first instead left FlexAttention's conditions, which compile in each round's
    fresh worker, with one or two blocks each)."""
    keep = list(active)
    while len(keep) > 1 and _need(keep, overhead) > seconds:
        keep.pop()
    return [e for e in active if e not in keep]


def _admit(queue: list[OpenCondition], active: list[dict[str, Any]], overhead: float, seconds: float,
           first: bool) -> list[dict[str, Any]]:
    """The next open conditions, in the queue's order, each that the time left could still carry to
    MIN_DECIDE_BLOCKS beside the ones taking blocks (one that could not is passed over, and stays queued, for a
    cheaper one behind it); first: the phase's first condition joins whatever it costs."""
    admitted: list[dict[str, Any]] = []
    for cond in list(queue):
        entry = {"cond": cond, "blocks": [], "block_s": []}
        if _need([*active, *admitted, entry], overhead) > seconds and not first:
            continue
        first = False
        admitted.append(entry)
        queue.remove(cond)
    return admitted


def _settled(entry: dict[str, Any]) -> bool:
    """Whether a condition needs no more blocks: its blocks decide it (at its bound counts: decided), or show it on
    its bound, or it has MAX_BLOCKS."""
    n = len(entry["blocks"])
    if n >= MAX_BLOCKS:
        return True
    if n < MIN_DECIDE_BLOCKS:
        return False
    judged = judged_by_blocks(entry["cond"].condition, entry["blocks"])
    if judged.verdict == INCONCLUSIVE:
        return on_the_bound(judged, n)
    return True


def _said(entry: dict[str, Any], say: Callable[[str], None]) -> None:
    cond, blocks = entry["cond"], entry["blocks"]
    if not blocks:
        return
    judged = judged_by_blocks(cond.condition, blocks)
    say(f"  {cond.claim}: {cond.name}: {len(blocks)} blocks, {sum(entry['block_s']):.0f} s -> {judged.verdict} "
        f"{judged.ratio:.2f}× ({judged.low:.2f}–{judged.high:.2f}×)")
