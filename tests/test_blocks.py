"""`bench ab`'s verdict from a case's own ABBA blocks (bench.regress.blocks, bench.regress.ab.verdict) and the
`--blocks auto` stop rule (bench.regress.ab.auto), on synthetic block ratios: no timing here."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from bench.errors import UsageError
from bench.regress.ab.auto import AutoBlocks, more, parse_blocks, parse_time, to_extend
from bench.regress.ab.rounds import WORKERS_KEY, block_ratios, pair_ratios
from bench.regress.ab.verdict import judge
from bench.regress.blocks import block_stats, describe
from bench.regress.noise import Rule
from bench.regress.render import render_markdown, render_text, strip
from bench.results import RunDocument, RunMeta

RULE = Rule(threshold=0.05)


def scattered(factor: float, n: int, spread: float, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [factor * math.exp(rng.gauss(0, spread)) for _ in range(n)]


def test_a_clear_slowdown_with_tight_blocks_regresses():
    s = block_stats(scattered(1.1, 7, 0.01), RULE)
    assert s.verdict == "regressed" and s.decided
    assert 1.05 < s.low < s.estimate < s.high and s.p < RULE.alpha
    assert s.estimate == pytest.approx(1.1, rel=0.03)


def test_a_clear_speedup_improves():
    assert block_stats(scattered(1 / 1.2, 7, 0.01), RULE).verdict == "improved"


def test_aa_blocks_are_unchanged_not_regressed():
    verdicts = [block_stats(scattered(1.0, 7, 0.01, seed), RULE).verdict for seed in range(50)]
    assert "regressed" not in verdicts and "improved" not in verdicts
    assert verdicts.count("unchanged") >= 45  # a 1% scatter over 7 blocks lies well within +-5%


def test_blocks_straddling_the_threshold_are_inconclusive_with_their_interval():
    s = block_stats([1.02, 1.12, 1.0, 1.09, 1.06, 1.11, 1.03], RULE)  # the centre is past 5%, the interval not
    assert s.verdict == "inconclusive" and not s.decided
    assert s.low < 1.05 < s.high


def test_one_wild_block_weighs_as_one_block():
    # six A/A blocks and one the host slowed x3 on side B only: no regression, and the estimate stays near x1
    s = block_stats([1.0, 1.01, 0.99, 1.0, 1.005, 0.995, 3.0], RULE)
    assert s.verdict != "regressed" and s.estimate < 1.05


def test_two_slowed_blocks_move_a_mean_past_the_threshold_but_not_the_estimate():
    # blocks of an unchanged case where the host sat beside side B for two whole slices: their mean is x1.2
    ratios = [1.0, 1.01, 0.99, 1.0, 1.005, 0.995, 1.002, 0.998, 2.5, 2.4]
    assert math.exp(sum(map(math.log, ratios)) / len(ratios)) > 1.15
    s = block_stats(ratios, RULE)
    assert s.verdict != "regressed" and s.estimate < 1.05


@pytest.mark.parametrize("n", [1, 6])
def test_too_few_blocks_have_no_interval(n):
    s = block_stats([1.5] * n, RULE)
    assert s.verdict == "inconclusive" and math.isnan(s.low) and "at least 7" in describe(s, RULE)


def test_the_signed_rank_test_matches_scipy():
    from scipy.stats import wilcoxon

    ratios = scattered(1.03, 12, 0.04, seed=5)
    s = block_stats(ratios, RULE)
    logs = [math.log(r) for r in ratios]
    assert s.p == pytest.approx(wilcoxon(logs, alternative="greater" if s.estimate > 1 else "less").pvalue)


def test_more_blocks_decide_what_few_could_not():
    ratios = scattered(1.1, 40, 0.05, seed=3)
    assert block_stats(ratios[:7], RULE).verdict == "inconclusive"
    assert block_stats(ratios, RULE).verdict == "regressed"


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, float("nan")], [-1.0, 1.0]])
def test_bad_ratios_are_refused(bad):
    with pytest.raises(ValueError, match="block ratios"):
        block_stats(bad, RULE)


def test_block_ratios_pair_the_sides_block_by_block():
    a = [(0, [1.0, 1.0, 1.0, 9.0]), (0, [1.0] * 4), (1, [2.0] * 4), (1, [2.0] * 4)]
    b = [(0, [1.2] * 4), (0, [1.2] * 4), (1, [2.4] * 4), (1, [2.4, 2.4, 2.4, 30.0])]
    assert block_ratios(a, b) == pytest.approx([1.2, 1.2])  # slow rounds dropped, each block its own ratio


# --- --blocks auto: the stop rule ------------------------------------------------------------------------------


def test_auto_extends_only_undecided_cases_below_their_maximum():
    auto = AutoBlocks(start=7, step=3, max_blocks=13, time_s=60)
    assert to_extend({"a": 7, "b": 13, "c": 10}, elapsed_s=10, auto=auto) == ["a", "c"]
    assert more(7, auto) == 3 and more(12, auto) == 1 and more(13, auto) == 0


def test_auto_stops_when_the_time_is_spent_or_nothing_is_undecided():
    auto = AutoBlocks(time_s=60)
    assert to_extend({"a": 7}, elapsed_s=60, auto=auto) == []
    assert to_extend({}, elapsed_s=0, auto=auto) == []


def test_auto_loop_reaches_a_decision_or_stops_at_the_maximum():
    """The engine's loop on synthetic blocks: a x1.1 case with 5% scatter decides; an x1.05 case takes longer."""
    auto = AutoBlocks(start=7, step=3, max_blocks=43, time_s=1e9)
    source = {"clear": scattered(1.1, 100, 0.05, seed=1), "edge": scattered(1.05, 100, 0.05, seed=2)}
    have = dict.fromkeys(source, auto.start)
    while todo := to_extend({c: n for c, n in have.items() if not block_stats(source[c][:n], RULE).decided}, 0, auto):
        for c in todo:
            have[c] += more(have[c], auto)
    assert block_stats(source["clear"][:have["clear"]], RULE).verdict == "regressed" and have["clear"] < 43
    # at the threshold itself the interval keeps straddling it, but for an alpha-sized chance either way per look
    assert have["edge"] > have["clear"] and block_stats(source["edge"][:have["edge"]], RULE).verdict != "regressed"


@pytest.mark.parametrize(("text", "message"), [("1", "at least 7"), ("x", "whole number"), ("6", "at least 7")])
def test_bad_blocks_are_refused(text, message):
    with pytest.raises(UsageError, match=message):
        parse_blocks(text)


def test_blocks_and_time_parse():
    assert parse_blocks("auto") is None and parse_blocks("7") == 7
    assert parse_time("300") == 300 and parse_time("5m") == 300
    with pytest.raises(UsageError, match="--ab-time"):
        parse_time("-1")


# --- the A/B verdict on two documents with ab_slices -----------------------------------------------------------


def _doc(label: str, cases: dict[str, list[float]], workers: dict[str, list[int] | None] | None = None) -> RunDocument:
    """A side's run document whose case c has one ABBA block per value (two slices of 6 equal rounds each), block j
    in worker workers[c][j] (default: each block in its own, as bench ab runs them; None: not recorded)."""
    from bench.results.entry import Slice, case_entry, pooled_entry
    from bench.results.record import Record

    doc = RunDocument(meta=RunMeta(run_id=label, profile="t", complete=True, cases=len(cases),
                                   fingerprint={"device": "cpu", "cpu_model": "x", "gpu_name": None, "torch": "t",
                                                "cuda": None, "threads": 1}), machine_info={}, commit_info={})
    for cid, levels in cases.items():
        rec = Record(case_id=cid, status="ok", median_s=levels[0], peak_mem_bytes=100)
        slices = tuple(Slice(j, (v,) * 6) for j, v in enumerate(levels) for _ in (0, 1))
        entry = case_entry(rec, name=cid, group=None, ab_slices=slices)
        per_block = (workers or {}).get(cid, list(range(len(levels))))
        if per_block is not None:
            entry = dataclasses.replace(entry, unknown={WORKERS_KEY: [per_block[s.block] for s in slices]})
        doc.add(pooled_entry(entry, [v for v in levels for _ in range(12)], 100))
    return doc


def _ab(factors: dict[str, list[float]],
        workers: dict[str, list[int] | None] | None = None) -> tuple[RunDocument, RunDocument]:
    base = {cid: [1e-3 * (1 + 0.3 * j) for j in range(len(f))] for cid, f in factors.items()}
    cur = {cid: [a * r for a, r in zip(base[cid], f, strict=True)] for cid, f in factors.items()}
    return _doc("A", base, workers), _doc("B", cur, workers)


def test_one_case_regression_is_judged_by_its_blocks_alone():
    """The issue's case: one case, x1.43 in every block; compare's cross-case prior would call it noise."""
    cmp = judge(*_ab({"only": [1.42, 1.44, 1.43, 1.45, 1.41, 1.46, 1.40]}), RULE)
    (v,) = cmp.cases
    assert v.verdict == "regressed" and cmp.summary.exit_code == 1 and cmp.summary.method == "blocks"
    assert v.blocks == pytest.approx((1.42, 1.44, 1.43, 1.45, 1.41, 1.46, 1.40)) and v.interval[0] > 1.05
    text = render_text(cmp)
    assert "1.42 1.44 1.43 1.45 1.41" in text and "cross-case guard off" in text
    assert "1.42 1.44 1.43 1.45 1.41" in render_markdown(cmp)


def test_an_inconclusive_case_does_not_fail_and_the_report_says_why():
    cmp = judge(*_ab({"c": [1.02, 1.12, 1.0, 1.09, 1.06, 1.11, 1.03]}), RULE)
    assert cmp.cases[0].verdict == "inconclusive" and cmp.summary.exit_code == 0
    assert "straddles the threshold" in cmp.cases[0].reason and "1 inconclusive" in render_text(cmp)


def test_guard_demotes_a_case_that_does_not_stand_out_of_many():
    """12 cases whose estimates scatter +-15% from process to process: a tight x1.12 is within that spread."""
    rng = random.Random(5)
    factors = {f"c{i}": [f] * 7 for i, f in enumerate(math.exp(rng.gauss(0, 0.15)) for _ in range(11))}
    factors["c11"] = [1.12, 1.121, 1.119, 1.12, 1.12, 1.122, 1.118]
    cases = {v.case_id: v for v in judge(*_ab(factors), RULE).cases}
    assert cases["c11"].verdict == "noisy" and "does not stand out" in cases["c11"].reason


def test_guard_keeps_a_move_of_the_whole_ab():
    factors = {f"c{i}": [1.1 * (1 + 0.002 * ((i + j) % 3)) for j in range(7)] for i in range(12)}
    cmp = judge(*_ab(factors), RULE)
    assert cmp.summary.counts["regressed"] == 12 and "cross-case guard (12 cases)" in render_text(cmp)


# --- the unit is the worker pair: a process's state lasts for all its blocks ------------------------------------


def test_pair_ratios_are_each_pair_s_median_block_ratio_in_block_order():
    a = [(k, [1.0] * 4) for k in range(5) for _ in (0, 1)]
    b = [(k, [r] * 4) for k, r in enumerate([1.1, 1.3, 1.2, 2.0, 0.9]) for _ in (0, 1)]
    assert pair_ratios(a, b, {0: "p", 1: "p", 2: "p", 3: "q", 4: "q"}) == pytest.approx([1.2, math.sqrt(1.8)])
    assert pair_ratios(a, b, {k: k for k in range(5)}) == pytest.approx(block_ratios(a, b))
    assert pair_ratios(a, b, {}) == pytest.approx([1.2])  # no worker recorded: all one pair


def test_a_slow_process_in_every_block_of_one_pair_is_not_a_regression():
    """The issue's A/A: 7 blocks, all ran by one pair of workers whose B process landed 12% slower. Counted as 7
    independent blocks that read 'regressed'; as what they are, one pair, they decide nothing."""
    ratios = [1.12, 1.10, 1.13, 1.11, 1.14, 1.12, 1.09]
    assert block_stats(ratios, RULE).verdict == "regressed"  # the hole: the blocks as independent units
    (v,) = judge(*_ab({"c": ratios}, {"c": [0] * 7}), RULE).cases
    assert v.verdict == "inconclusive" and not v.failing and v.workers == (1, 1)
    assert "1 worker pair of 7 blocks" in v.reason and "1 worker process a side" in v.reason
    # a file from before the workers were recorded: its one worker a side ran every block, so the same
    (old,) = judge(*_ab({"c": ratios}, {"c": None}), RULE).cases
    assert old.verdict == "inconclusive" and old.workers == (1, 1)


def test_one_slow_process_among_fresh_ones_is_not_a_regression():
    # every block in its own pair; one B process 12% slower for its block, the others equal
    (v,) = judge(*_ab({"c": [1.12, 1.0, 1.003, 0.998, 1.001, 0.999, 1.002]}), RULE).cases
    assert v.verdict != "regressed" and v.workers == (7, 7) and "7 worker processes a side" in v.reason
    # three pairs of seven blocks each, the first pair's B process 12% slower in all of its blocks
    ratios = [1.12] * 7 + [1.0] * 7 + [1.002] * 7
    (v,) = judge(*_ab({"c": ratios}, {"c": [j // 7 for j in range(21)]}), RULE).cases
    assert v.verdict != "regressed" and v.workers == (3, 3) and "3 worker pairs of 21 blocks" in v.reason


def test_a_slowdown_in_every_process_regresses():
    # x1.2 in every pair, each pair's processes a few % apart
    (v,) = judge(*_ab({"c": [1.2, 1.23, 1.17, 1.21, 1.18, 1.24, 1.19]}), RULE).cases
    assert v.verdict == "regressed" and v.failing and v.workers == (7, 7)


def test_the_pair_rule_keeps_aa_false_alarms_under_1_in_200_and_catches_x1_2():
    """Simulated cases: each pair of processes lands N(0, 5%) apart (log), each block N(0, 2%) around that. Judged
    by pairs (a fresh pair per block, as bench ab runs), A/A cases regress far less than 1 in 200 and x1.2 cases
    almost always; judged as 7 blocks of one pair (the old schedule), 7% of A/A cases regress."""
    rng = random.Random(11)

    def case(factor: float, pairs: int) -> list[float]:
        offsets = [rng.gauss(0, 0.05) for _ in range(pairs)]
        return [factor * math.exp(offsets[j % pairs] + rng.gauss(0, 0.02)) for j in range(7)]

    def regressed(factor: float, pairs: int, n: int = 2000) -> float:
        return sum(block_stats(case(factor, pairs), RULE).verdict == "regressed" for _ in range(n)) / n

    assert regressed(1.0, pairs=7) <= 1 / 200
    assert regressed(1.2, pairs=7) >= 0.9
    assert regressed(1.0, pairs=1) > 0.05


def test_strip_shows_each_block_then_a_count():
    assert strip((1.1, 1.2)) == "1.10 1.20" and strip(()) == "-"
    assert strip(tuple([1.0] * 15)).endswith("+3 more")
