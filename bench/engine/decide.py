"""Once the claims' least sets have run, a run under a time budget spends the share it kept
(bench.engine.budget.DECIDE_SHARE) deciding the claims' open conditions: those whose 95% interval, from each case's
own CI, straddles their bound, and those their CI decides within NEAR_BOUND of it (one worker's CI does not see
what another worker would give). The depth and breadth cases then get what is left.

Each such condition names the (top, bottom) cases behind its ratio (bench.report.conditions). They are measured
again in blocks, each block in a fresh worker process (a worker's state — where its buffers landed, what it
compiled — is then part of the spread, not a constant that reads as a difference), each pair as ABBA or BAAB at
random, so a slow spell of the machine lands on both sides alike. The least decided condition goes first (the bound
nearest the middle of its interval); it gets blocks until its blocks decide it (bench.report.decided: at least
MIN_DECIDE_BLOCKS, judged by their signed-rank interval) or MAX_BLOCKS, then the next, until the time is spent.
A condition open for a stated reason (a cache on-chip, too few lengths) is not re-measured: more rounds cannot
decide it. The blocks go into the run's metadata (RunMeta.decided), with the seconds spent on each condition; the
report judges those conditions on their blocks.

Before that, each timing that looks stalled (bench.report.suspects: flat against its work, or a jump against its
neighbour) is measured once more in a fresh worker (RunMeta.suspects); the report takes the second measurement where
it shows the first was stalled, and names the case.

The claims' judges need pandas: they are imported here, lazily, once the sweep is over.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.engine.execute import RunnerSetup
from bench.engine.isolate import Isolated
from bench.problem.case import Case

SLICE_BUDGET_S = 0.25  # timing seconds of one slice (a block has four per pair)
MAX_BLOCKS = 12  # a condition still open after this many blocks is left as it is: its ratio sits on the bound
MAX_PAIRS = 4  # a condition resting on more pairs than this costs too much a block to re-measure here
# a condition whose CI-based word is decided but whose ratio is within this factor of its bound is re-measured too:
# one worker's CI does not see what another worker, or another moment, would give
NEAR_BOUND = 1.10
MAX_SUSPECTS = 8  # stalled-looking timings re-measured at most: more means the machine, not a case, is the problem


@dataclass(frozen=True)
class OpenCondition:
    claim: str  # the claim's key
    condition: Any  # the report's Condition (its name, pairs, interval and bound), to judge the blocks as they come

    @property
    def name(self) -> str:
        return self.condition.name

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        return self.condition.pairs

    @property
    def openness(self) -> float:
        """How near the middle of the interval the bound sits (0.5: the middle, the least decided; 0: an end)."""
        c = self.condition
        lo, hi, b = math.log(c.low), math.log(c.high), math.log(c.bound)
        return min(b - lo, hi - b) / (hi - lo) if hi > lo else 0.0


def open_conditions(doc: Any, path: Any, by_id: dict[str, Case]) -> list[OpenCondition]:
    """The run's conditions whose interval straddles their bound, or whose ratio is within NEAR_BOUND of it, and whose
    cases this run has: the straddling ones first, least decided first."""
    from bench.claims import CLAIMS
    from bench.report.claims import verdicts
    from bench.report.load import doc_frame
    from bench.report.verdict import INCONCLUSIVE

    frame, info = doc_frame(doc, path)
    found = []
    for spec, verdict in zip(CLAIMS, verdicts(frame, info.meta), strict=True):
        for c in verdict.conditions:
            measurable = not c.why and c.low > 0 and math.isfinite(c.high) and math.isfinite(c.bound)
            near = c.verdict == INCONCLUSIVE or abs(math.log(c.ratio / c.bound)) < math.log(NEAR_BOUND)
            if measurable and near and c.pairs and len(c.pairs) <= MAX_PAIRS and all(t in by_id and b in by_id
                                                                                     for t, b in c.pairs):
                found.append(OpenCondition(spec.key, c))
    # straddling first, the least decided first; then those decided by one worker's CI near their bound
    return sorted(found, key=lambda o: (o.condition.verdict != INCONCLUSIVE, -o.openness,
                                        abs(math.log(o.condition.ratio / o.condition.bound))))


def block(executor: Isolated, cond: OpenCondition, by_id: dict[str, Case], rng: random.Random,
          worker: int) -> dict[str, Any] | None:
    """One block of a condition in a fresh worker: each pair ABBA or BAAB; None when a case did not end ok."""
    from bench.report.decided import block_ratio

    order = rng.choice(("ABBA", "BAAB"))
    tops, bottoms = [], []
    executor.close()  # the next case starts a fresh worker
    for top, bottom in cond.pairs:
        slices: dict[str, list[float]] = {"A": [], "B": []}
        for side in order:
            outcome = executor.run(by_id[top if side == "A" else bottom], None)
            if outcome.record.status != "ok" or not outcome.record.median_s:
                return None
            slices[side].append(outcome.record.median_s)
        tops.append(slices["A"])
        bottoms.append(slices["B"])
    return {"ratio": block_ratio(tops, bottoms), "worker": worker, "order": order, "top_s": tops,
            "bottom_s": bottoms}


def remeasure_suspects(frame: Any, by_id: dict[str, Case], executor: Isolated,
                       seconds_left: Callable[[], float], say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Each timing that looks stalled (bench.report.suspects), measured once more in a fresh worker."""
    from bench.report.suspects import suspects

    found = [s for s in suspects(frame) if s["case_id"] in by_id][:MAX_SUSPECTS]
    if found:
        say(f"re-measuring {len(found)} timing(s) that look stalled, each in a fresh worker:")
    first = dict(zip(frame["case_id"], frame["median_s"], strict=True))
    out = []
    for s in found:
        if seconds_left() <= 0:
            break
        executor.close()
        record = executor.run(by_id[s["case_id"]], None).record
        if record.status != "ok" or not record.median_s:
            continue
        out.append({**s, "first_s": float(first[s["case_id"]]), "again_s": record.median_s,
                    "again_low_s": record.ci_low_s, "again_high_s": record.ci_high_s})
        say(f"  {s['case_id']}: {s['reason']}; again {record.median_s * 1e3:.2f} ms")
    return out


def decide(doc: Any, path: Any, by_id: dict[str, Case], setup: RunnerSetup, threads: int | None,
           seconds_left: Callable[[], float], say: Callable[[str], None],
           executor: Isolated | None = None) -> list[dict[str, Any]]:
    """First the timings that look stalled, each re-measured once (doc.meta.suspects); then the open conditions in
    blocks while seconds_left() allows (the module docstring). Returns RunMeta.decided (also set on doc.meta): per
    condition its claim, name, pairs, blocks and the seconds spent. executor: where the blocks run (default: worker
    processes with the run's threads, each slice SLICE_BUDGET_S of timing)."""
    from bench.report.load import doc_frame

    executor = executor or Isolated(threads)
    executor.start(RunnerSetup(setup.calibration, setup.gpu_name, SLICE_BUDGET_S, None, threads))
    try:
        if doc is not None:
            frame, _ = doc_frame(doc, path)
            doc.meta.suspects = remeasure_suspects(frame, by_id, executor, seconds_left, say) or None
        decided = _decide_open(doc, path, by_id, executor, seconds_left, say)
    finally:
        executor.close()
    if doc is not None and decided:
        doc.meta.decided = decided
    return decided


def _decide_open(doc: Any, path: Any, by_id: dict[str, Case], executor: Isolated,
                 seconds_left: Callable[[], float], say: Callable[[str], None]) -> list[dict[str, Any]]:
    from bench.report.decided import MIN_DECIDE_BLOCKS, judged_by_blocks, on_the_bound
    from bench.report.verdict import INCONCLUSIVE

    opened = open_conditions(doc, path, by_id)
    if not opened:
        return []
    say(f"deciding {len(opened)} open condition(s) in interleaved blocks, each block in a fresh worker "
        f"({max(0.0, seconds_left()):.0f} s left for it):")
    rng, done, worker = random.Random(0), [], 0
    for cond in opened:
        started, blocks = time.perf_counter(), []
        decided = False  # by its blocks: enough of them for an interval, and that interval clears the bound
        while len(blocks) < MAX_BLOCKS and seconds_left() > 0 and not decided:
            worker += 1
            got = block(executor, cond, by_id, rng, worker)
            if got is None:
                break
            blocks.append(got)
            if len(blocks) >= MIN_DECIDE_BLOCKS:
                judged = judged_by_blocks(cond.condition, blocks)
                # decided, or on its bound (more blocks would not decide it): the time goes to the next condition
                decided = judged.verdict != INCONCLUSIVE or on_the_bound(judged, len(blocks))
        if not blocks:
            break  # no time left, or its cases no longer run: the later ones would fare no better
        spent = time.perf_counter() - started
        done.append({"claim": cond.claim, "condition": cond.name, "pairs": [list(p) for p in cond.pairs],
                     "blocks": blocks, "spent_s": spent})
        judged = judged_by_blocks(cond.condition, blocks)
        say(f"  {cond.claim}: {cond.name}: {len(blocks)} blocks, {spent:.0f} s -> {judged.verdict} "
            f"{judged.ratio:.2f}× ({judged.low:.2f}–{judged.high:.2f}×)")
        if seconds_left() <= 0:
            break
    left = len(opened) - len(done)
    if left:
        say(f"  {left} open condition(s) left undecided: the time kept for deciding ran out")
    spent_by_claim: dict[str, float] = {}
    for d in done:
        spent_by_claim[d["claim"]] = spent_by_claim.get(d["claim"], 0.0) + d["spent_s"]
    if spent_by_claim:
        say("  spent deciding: " + ", ".join(f"{k} {v:.0f} s" for k, v in spent_by_claim.items()))
    return done
