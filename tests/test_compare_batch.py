"""compare's batched within-run tests (bench.regress.compare._within_all) give exactly the per-case answers."""

from __future__ import annotations

import numpy as np

from bench.regress.compare import _Timed, _within, _within_all
from bench.regress.noise import Rule


def test_batched_tests_equal_one_call_per_case():
    rng = np.random.default_rng(0)
    rule = Rule()
    timed = {}
    for i in range(60):
        nb, nc = (12, 12) if i % 3 else (int(rng.integers(5, 20)), int(rng.integers(5, 20)))
        base = rng.lognormal(0, 0.05, nb)
        cur = rng.lognormal(rng.choice([-0.3, 0.0, 0.3]), 0.05, nc)
        if i % 5 == 0:
            cur[:3] = base[:3]  # ties between the runs
        cur_value, base_value = float(np.median(cur)), float(np.median(base))
        timed[f"c{i}"] = _Timed(base, cur, base_value, cur_value, (base_value,), (cur_value,))
    batched = _within_all(timed, rule)
    thr = np.log1p(rule.threshold)
    moved = {cid for cid, t in timed.items() if abs(t.log_ratio) > thr}
    assert set(batched) == moved and len(moved) > 20
    for cid in moved:
        assert batched[cid] == _within(timed[cid], rule)
