"""A condition re-measured in interleaved blocks is judged on its blocks, and the claim's word follows."""

import pytest

from bench.analysis.conditions import FROM_BLOCKS, FROM_CIS, condition
from bench.analysis.decided import MIN_DECIDE_BLOCKS, block_ratio, judged_by_blocks, with_blocks
from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, INCONCLUSIVE, Verdict


def _open(backend="sdpa", ratio=2.05, interval=(1.6, 2.6), pairs=(("mha-id", "gqa-id"),)):
    return condition({"backend": backend, "dtype": "fp32", "variant": "GQA"}, ratio, interval, 2.0, holds_above=True,
                     pairs=pairs)


def _blocks(ratios):
    return [{"ratio": r, "worker": i, "order": "ABBA", "top_s": [[r, r]], "bottom_s": [[1.0, 1.0]]}
            for i, r in enumerate(ratios)]


def test_a_block_s_ratio_is_the_geometric_mean_over_pairs_of_mean_slices():
    assert block_ratio([[2.0, 2.2]], [[1.0, 1.0]]) == pytest.approx(2.1)
    assert block_ratio([[4.0, 4.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]) == pytest.approx(2.0)


def test_a_stalled_slice_gives_way_to_its_sides_fastest():
    # hf-sdpa's last slice of an ABBA block ran 1.65x its first in a default run: the mean made the block 1.47x
    assert block_ratio([[57.1, 94.1]], [[51.4, 51.5]]) == pytest.approx(57.1 / 51.45)
    assert block_ratio([[1.0, 1.0]], [[1.3, 1.0]]) == pytest.approx(1.0)  # on either side
    assert block_ratio([[1.0, 1.2]], [[1.0, 1.0]]) == pytest.approx(1.1)  # a drift within SLICE_STALL is averaged


def test_blocks_that_clear_the_bound_decide_an_open_condition_both_ways():
    held = judged_by_blocks(_open(), _blocks([2.31, 2.28, 2.35, 2.30, 2.26, 2.33, 2.29]))
    assert held.verdict == HOLDS and held.low >= 2.0 and held.basis == FROM_BLOCKS and held.blocks == 7
    failed = judged_by_blocks(_open(), _blocks([1.71, 1.75, 1.69, 1.80, 1.73, 1.77]))
    assert failed.verdict == FAILS and failed.high < 2.0


def test_blocks_that_straddle_stay_open_and_too_few_blocks_keep_the_ci():
    straddling = judged_by_blocks(_open(), _blocks([1.7, 2.4, 1.8, 2.3, 2.2, 2.35, 2.5, 1.9]))  # 2.12x, 1.8-2.4x
    assert straddling.verdict == INCONCLUSIVE and straddling.low < 2.0 < straddling.high
    few = judged_by_blocks(_open(), _blocks([2.3] * (MIN_DECIDE_BLOCKS - 1)))
    assert few.verdict == INCONCLUSIVE and (few.low, few.high) == (1.6, 2.6) and few.blocks == 5
    assert few.basis == FROM_CIS


def test_the_claim_s_word_is_recombined_over_its_re_judged_conditions():
    failing = _open("naive", 0.9, (0.85, 0.95), pairs=())
    verdict = Verdict("claim", INCONCLUSIVE, "numbers", "open", conditions=(failing, _open()))
    decided = [{"claim": "fused-decode", "condition": "sdpa · fp32 · GQA", "blocks": _blocks([2.3] * 7)}]
    after = with_blocks(verdict, "fused-decode", decided)
    assert after.verdict == DEPENDS and "Re-measured in interleaved blocks" in after.numbers
    assert with_blocks(verdict, "other-claim", decided) is verdict  # another claim's blocks are not this one's


def test_a_run_s_blocks_find_their_condition_by_its_cases_whatever_its_label_was_then():
    verdict = Verdict("claim", INCONCLUSIVE, "numbers", "open", conditions=(_open(),))
    # a file written before conditions were keyed: the label it names is not today's, its cases are
    decided = [{"claim": "c", "condition": "sdpa · fp32 · GQA (Hq/Hkv 4) at KV 16,384",
                "pairs": [["mha-id", "gqa-id"]], "blocks": _blocks([2.31, 2.28, 2.35, 2.30, 2.26, 2.33, 2.29])}]
    (after,) = with_blocks(verdict, "c", decided).conditions
    assert after.verdict == HOLDS and after.basis == FROM_BLOCKS and after.blocks == 7


def test_a_condition_its_blocks_leave_open_says_how_many_blocks_would_decide_it():
    verdict = Verdict("claim", INCONCLUSIVE, "numbers", "open", conditions=(_open(),))
    near = [{"claim": "c", "condition": "sdpa · fp32 · GQA", "blocks": _blocks([1.9, 2.5, 2.1, 2.45, 2.2, 2.35, 1.95])}]
    why = with_blocks(verdict, "c", near).why
    assert "Still open after its blocks: sdpa · fp32 · GQA" in why and "over 7 blocks: about" in why
    on = [{"claim": "c", "condition": "sdpa · fp32 · GQA", "blocks": _blocks([1.5, 2.6] * 4)}]  # far wider than 5%
    assert "no practical number of blocks decides it" in with_blocks(verdict, "c", on).why
