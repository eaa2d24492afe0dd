"""A verdict knows its uncertainty: a judged ratio carries a 95% interval from its timings' own CIs and the cases
behind it, and a verdict whose interval straddles the claim's threshold is inconclusive, never a coin toss."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.interval import ratio_interval, straddles
from bench.analysis.load import read_results
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE
from bench.claims.decode import fused_decode_speedup
from bench.problem.columns import shape_from_fields
from tests.results_factory import make_record, make_run


def _frame(tmp_path: Path, recs: list[dict]):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(make_run(recs)))
    return read_results(path)[0]


def timed(backend, hq, hkv, kv, median_s, ci):
    return make_record(backend, hq, hkv, kv, phase="decode", median_s=median_s, ci_low_s=median_s * (1 - ci),
                       ci_high_s=median_s * (1 + ci), pct_read_ceiling=70.0, pct_gemm_ceiling=1.0)


def decode(speedup: float, ci: float) -> list[dict]:
    """The fused-decode claim's least set: MHA and GQA twins of two fused backends at three KV lengths."""
    return [timed(b, 8, hkv, kv, 1e-3 if hkv == 8 else 1e-3 / speedup, ci)
            for b in ("sdpa", "flex") for kv in (1024, 2048, 4096) for hkv in (8, 2)]


@pytest.mark.parametrize(("speedup", "ci", "verdict"), [(2.13, 0.005, HOLDS), (1.85, 0.005, FAILS),
                                                        (1.98, 0.005, HOLDS),  # within 5% of 2x: at its bound
                                                        (2.13, 0.10, INCONCLUSIVE), (1.98, 0.10, INCONCLUSIVE)])
def test_the_fused_decode_claim_is_decided_only_outside_its_noise(tmp_path, speedup, ci, verdict):
    """2.13x and 1.85x against the claim's 2x, decided by tight CIs, a toss with wide ones; 1.98x with a tight CI
    meets 2x at its bound."""
    v = fused_decode_speedup(_frame(tmp_path, decode(speedup, ci)))
    assert v.verdict == verdict, v.numbers + v.why
    assert "95% interval" in v.numbers
    if verdict == INCONCLUSIVE:
        assert "straddle" in v.why and "--budget" in v.why


def test_the_interval_holds_the_estimate_widens_with_the_cis_and_is_seeded():
    def pairs(ci: float) -> pd.DataFrame:
        t = pd.Series([1.0, 1.1, 0.9, 1.05])
        return pd.DataFrame({"median_s": t, "ci_low_s": t * (1 - ci), "ci_high_s": t * (1 + ci),
                             "twin_median_s": 2 * t, "twin_ci_low_s": 2 * t * (1 - ci),
                             "twin_ci_high_s": 2 * t * (1 + ci)})
    narrow, wide = ratio_interval(pairs(0.01), "twin_", ""), ratio_interval(pairs(0.2), "twin_", "")
    assert narrow[0] <= 2.0 <= narrow[1] and wide[0] < narrow[0] and wide[1] > narrow[1]
    assert ratio_interval(pairs(0.2), "twin_", "") == wide  # seeded: a report reads the same every time
    geo = ratio_interval(pairs(0.01), "twin_", "", "geomean")
    assert geo[0] <= 2.0 <= geo[1]
    no_cis = pairs(0.0).drop(columns=["ci_low_s", "ci_high_s", "twin_ci_low_s", "twin_ci_high_s"])
    assert ratio_interval(no_cis, "twin_", "") == pytest.approx((2.0, 2.0))  # equal ratios: nothing to move
    assert straddles((1.9, 2.1), 2.0) and not straddles((2.0, 2.2), 2.0) and not straddles((1.5, 1.9), 2.0)


def test_a_variant_cost_straddling_its_bound_from_outside_the_band_is_inconclusive_and_one_on_it_is_at_it():
    from bench.analysis.traits import ALL_VARIANT_KERNELS
    from bench.claims import VARIANTS_WITHIN
    from bench.claims.variants import variants_within
    from bench.problem.columns import shape_fields

    def frame(ratio: float, ci: float) -> pd.DataFrame:
        rows = []
        for seq in (128, 256):
            for score, t in (("none", 1e-3), ("softcap:30", ratio * 1e-3)):
                shape = shape_from_fields(dict(batch=1, seq_q=seq, seq_kv=seq, n_heads=4, n_kv_heads=2, head_dim=16,
                                               mask="causal", score=score))
                rows.append({**shape_fields(shape), "backend": ALL_VARIANT_KERNELS[0], "phase": "prefill",
                             "pass": "fwd", "status": "ok", "reason": "", "median_s": t, "ci_low_s": t * (1 - ci),
                             "ci_high_s": t * (1 + ci), "noisy": False, "d_model": None})
        return pd.DataFrame(rows)
    assert variants_within(frame(1.40, 0.10)).verdict == INCONCLUSIVE  # 1.40x, outside 5% of 1.3x, straddling it
    assert variants_within(frame(1.32, 0.10)).verdict == HOLDS  # within 5% of 1.3x: at its bound, however noisy
    assert variants_within(frame(1.32, 0.002)).verdict == HOLDS
    assert variants_within(frame(1.45, 0.002)).verdict == FAILS
    assert variants_within(frame(1.1, 0.10)).verdict == HOLDS
    assert VARIANTS_WITHIN == 1.3
