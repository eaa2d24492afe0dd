"""bench.regress.power's bookkeeping on synthetic A/B documents (no timing): how one 12-case A/B is judged as
1-case and 3-case A/Bs, and how a cell of the table reads."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.regress.noise import Rule
from bench.regress.power import _cell, shapes, tally
from tests.test_blocks import _doc  # a side's document with one ABBA block per level

RULE = Rule(threshold=0.05)


def test_one_ab_is_judged_whole_in_groups_and_case_by_case():
    factors = {f"c{i}": [1.2 + 0.001 * j for j in range(7)] for i in range(5)}  # 5 cases, each x1.2 in 7 blocks
    factors["c5"] = [1.0 + 0.001 * (j % 2) for j in range(7)]  # one unchanged case
    base = _doc("A", {c: [1e-3] * 7 for c in factors})
    cur = _doc("B", {c: [1e-3 * f for f in fs] for c, fs in factors.items()})
    got = tally(base, cur, RULE, [1, 3, 6])
    assert got[1]["regressed"] == 5 and got[1]["unchanged"] == 1 and got[1]["a/b"] == 6 and got[1]["a/b failed"] == 5
    assert got[3]["a/b"] == 2 and got[3]["a/b failed"] == 2 and got[3]["regressed"] == 5
    assert got[6]["a/b"] == 1 and got[6]["regressed"] + got[6]["noisy"] == 5


def test_cells_read_as_caught_or_false_alarms():
    assert _cell(Counter(regressed=9, inconclusive=1, unchanged=2), 1.1) == "9/12 (75%), 1 inc."
    assert _cell(Counter(unchanged=12), 1) == "0/12 false"
    assert _cell(Counter(), 1.2) == "-"


def test_shapes_take_a_prefix_of_the_grid_with_every_kv_head_count():
    assert shapes(3) == [(64, 8), (64, 2), (64, 1)] and len(shapes(12)) == 12
    with pytest.raises(SystemExit, match="between 1 and 12"):
        shapes(13)
