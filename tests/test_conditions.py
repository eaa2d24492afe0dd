"""The per-condition rule: a condition's word from its own interval, the claim's word over its conditions."""

import math

import pytest

from bench.analysis.conditions import (
    EXPONENT,
    SHARE,
    TIME_RATIO,
    Condition,
    amount,
    between,
    bound_text,
    combine,
    condition,
    listing,
    not_judged,
    shown,
    undecided_why,
    word,
)
from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, INCONCLUSIVE, NOT_JUDGED, NOT_MEASURED


@pytest.mark.parametrize(("ratio", "low", "high", "above", "expected"), [
    (2.3, 2.1, 2.5, True, HOLDS), (1.7, 1.5, 1.9, True, FAILS), (1.8, 1.5, 2.05, True, INCONCLUSIVE),
    (2.25, 2.0, 2.4, True, HOLDS), (1.1, 1.0, 1.2, False, HOLDS), (2.3, 2.11, 2.5, False, FAILS),
    (2.2, 1.9, 2.5, False, INCONCLUSIVE), (1.8, 1.7, 2.0, False, HOLDS)])
def test_outside_the_band_a_condition_is_decided_only_when_its_whole_interval_clears_the_bound(ratio, low, high, above,
                                                                                               expected):
    assert word(ratio, low, high, 2.0, holds_above=above) == (expected, False)


@pytest.mark.parametrize(("ratio", "low", "high", "above"), [
    (2.0, 1.95, 2.08, True), (1.95, 1.92, 1.99, True), (2.05, 2.02, 2.09, False), (2.0, 1.96, 2.04, False),
    (1.93, 1.85, 1.99, True), (2.08, 2.05, 2.2, False), (2.0, 1.85, 2.15, True)])
def test_an_estimate_within_five_percent_of_its_bound_is_at_its_bound_whichever_side_its_interval_reaches(
        ratio, low, high, above):
    assert word(ratio, low, high, 2.0, holds_above=above) == (HOLDS, True)
    assert word(ratio, low, high, 2.0, holds_above=above, at_bound_means=FAILS) == (FAILS, True)


def test_an_interval_past_twice_the_band_on_both_sides_is_too_wide_to_place():
    assert word(2.0, 1.7, 2.4, 2.0, holds_above=True) == (INCONCLUSIVE, False)


def test_runs_that_put_a_condition_either_side_of_its_bound_within_the_band_give_it_one_word():
    # flex's softcap prefill over its plain twin against "within 1.3x", two runs of one commit: 1.28x (1.23-1.30)
    # and 1.29x (1.27-1.33); cascade-sdpa against "faster by 5%", 0.96x (0.90-1.00) and 0.97x (0.95-0.99)
    softcap = [condition({"variant": "softcap"}, r, i, 1.3, holds_above=False) for r, i in ((1.28, (1.23, 1.30)),
                                                                                (1.29, (1.27, 1.33)))]
    assert {(c.verdict, c.at_bound) for c in softcap} == {(HOLDS, True)}
    cascade = [condition({"backend": "cascade"}, r, i, 0.95, holds_above=False, at_bound_means=FAILS)
               for r, i in ((0.96, (0.90, 1.00)), (0.97, (0.95, 0.99)))]
    assert {(c.verdict, c.at_bound) for c in cascade} == {(FAILS, True)}


def test_the_listing_says_at_its_bound():
    c = condition({"variant": "softcap"}, 0.95, (0.93, 0.97), 0.95, holds_above=False)
    assert c.verdict == HOLDS and "at its bound (within 5% of 0.95×)" in listing([c])


def test_the_listing_says_which_conditions_hold_only_at_their_bound():
    at = condition({"variant": "softcap"}, 1.31, (1.28, 1.33), 1.3, holds_above=False)
    clear = condition({"variant": "alibi"}, 1.0, (0.97, 1.03), 1.3, holds_above=False)
    text = listing([at, clear])
    assert at.verdict == clear.verdict == HOLDS
    assert "softcap 1.31× (1.28–1.33×), at its bound (within 5% of 1.3×)" in text and text.count("at its bound") == 1


def _c(verdict: str, name: str = "c", why: str = "") -> Condition:
    return Condition({"backend": name}, 1.0, 0.9, 1.1, verdict, 2.0, why=why)


@pytest.mark.parametrize(("words", "expected"), [
    ((HOLDS, HOLDS), HOLDS), ((FAILS, FAILS), FAILS), ((HOLDS, FAILS), DEPENDS),
    ((HOLDS, FAILS, INCONCLUSIVE), DEPENDS),
    ((HOLDS, INCONCLUSIVE), INCONCLUSIVE), ((FAILS, INCONCLUSIVE), INCONCLUSIVE), ((), NOT_MEASURED),
    ((NOT_MEASURED, HOLDS), HOLDS)])
def test_the_claim_s_word_is_the_stated_rule_over_its_conditions(words, expected):
    assert combine(_c(w) for w in words) == expected
    assert combine(words) == expected  # words alone, as the rivals' families give them



def test_a_condition_holding_only_at_its_bound_does_not_make_failing_ones_depend():
    # GQA/MQA decode against "at least 2x" in six default runs of two commits on a 2-core AMD EPYC: every condition
    # short of 2x, and sdpa's fp32 MQA step at 1.77-1.93x, inside the band in four runs and under it in two
    mqa = [condition({"backend": "sdpa", "variant": "MQA"}, r, i, 2.0, True) for r, i in ((1.93, (1.81, 2.03)),
                                                                                        (1.77, (1.68, 1.83)))]
    gqa = condition({"backend": "sdpa", "variant": "GQA"}, 1.48, (1.41, 1.64), 2.0, True)
    assert [(c.verdict, c.at_bound) for c in mqa] == [(HOLDS, True), (FAILS, False)]
    assert combine([gqa, mqa[0]]) == combine([gqa, mqa[1]]) == FAILS
    assert combine([mqa[0]]) == HOLDS  # at its bound alone: the claim's word is its word
    assert combine([condition({"backend": "flex"}, 2.4, (2.3, 2.5), 2.0, True), gqa, mqa[0]]) == DEPENDS
    # at a margin to clear, "at its bound" is the claim's answer (not clearly faster) and sways it as a failure
    level = condition({"batch": 1}, 0.96, (0.90, 1.00), 0.95, holds_above=False, at_bound_means=FAILS)
    wins = condition({"batch": 16}, 0.3, (0.28, 0.32), 0.95, holds_above=False, at_bound_means=FAILS)
    assert combine([level, wins]) == DEPENDS

def test_the_listing_names_each_condition_with_its_number_and_basis():
    found = [condition({"backend": "sdpa", "dtype": "fp32", "variant": "GQA"}, 2.4, (2.3, 2.5), 2.0, True),
             condition({"backend": "naive", "dtype": "fp32", "variant": "GQA"}, 1.1, (1.0, 1.2), 2.0, True)]
    text = listing(found)
    assert "holds in 1 of 2 (sdpa · fp32 · GQA 2.40× (2.30–2.50×))" in text
    assert "does not hold in 1 of 2 (naive · fp32 · GQA 1.10× (1.00–1.20×))" in text
    assert "each case's CI" in text


def test_an_open_condition_says_whether_it_straddles_or_why_it_is_open():
    why = undecided_why([_c(INCONCLUSIVE, "a"), _c(INCONCLUSIVE, "b", "its cache sits on-chip"), _c(HOLDS, "c")],
                        "More rounds decide it")
    assert "1 condition straddles 2×" in why and "a (0.90–1.10×)" in why and "More rounds decide it." in why
    assert "b is open: its cache sits on-chip." in why and "c (" not in why
    assert undecided_why([_c(HOLDS)], "x") == ""


def test_a_condition_is_its_key_fields_its_unit_and_its_bounds_and_its_label_is_written_from_them():
    c = condition({"backend": "sdpa", "dtype": "fp32", "variant": "GQA", "group_size": 4, "seq_kv": 16384}, 1.48,
                  (1.42, 1.52), 2.0, holds_above=True)
    assert c.name == "sdpa · fp32 · GQA · Hq/Hkv 4 · KV 16,384" and c.fields["seq_kv"] == 16384
    assert c.fail_bound == c.bound == 2.0 and bound_text(c) == "≥ 2×" and c.unit == TIME_RATIO
    share = condition({"backend": "naive", "seq": 2048}, 0.4999, (0.45, 0.55), 0.5, holds_above=True, unit=SHARE)
    assert shown(share) == "naive · S 2,048 49.9% (45.0–55.0%)"  # a share reads as one, never as 0.50×
    assert amount(1.91, EXPONENT) == "S^1.91" and amount(math.inf) == "∞"
    with pytest.raises(TypeError, match="not a label"):
        Condition("sdpa · fp32", 1.0, 0.9, 1.1, HOLDS, 2.0)


def test_a_claim_with_two_thresholds_names_both_and_is_open_between_them():
    holds, fails, open_ = (between({"method": m}, r, i, 0.95, 1.05) for m, r, i in (
        ("a", 0.5, (0.45, 0.55)), ("b", 1.5, (1.4, 1.6)), ("c", 1.0, (0.97, 1.03))))
    assert (holds.verdict, fails.verdict, open_.verdict) == (HOLDS, FAILS, INCONCLUSIVE)
    assert (holds.bound, holds.fail_bound, holds.holds_above) == (0.95, 1.05, False)
    assert bound_text(holds) == "≤ 0.95× holds, ≥ 1.05× fails"


def test_a_condition_listed_but_not_judged_leaves_the_claim_s_word_alone():
    listed = not_judged({"backend": "sdpa-flash"}, 1.1, (1.0, 1.2), 2.0, True, "too few lengths")
    assert listed.verdict == NOT_JUDGED and combine([_c(HOLDS), listed]) == HOLDS
    assert "sdpa-flash" not in listing([_c(HOLDS), listed]) and "holds in 1 of 1" in listing([_c(HOLDS), listed])
