"""Honest verdicts: a claim whose data cannot decide it says "inconclusive", with what was measured and what would
decide it, never "does not hold"; every verdict names the range it was judged on."""

from __future__ import annotations

import json
from pathlib import Path

from bench.analysis.load import read_results
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE, NOT_JUDGED, WORDS
from bench.claims.decode import fused_decode_speedup
from bench.claims.heads import heads_free_lunch
from bench.claims.layer import attention_dominates, projected_crossing
from bench.claims.memory import memory_scaling
from bench.report.summary import claim_lines, summary_lines
from tests.results_factory import make_record, make_run
from tests.test_layer_scope import share_records


def _frame(tmp_path: Path, recs: list[dict], calibration: dict | None = None):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(make_run(recs, calibration=calibration)))
    return read_results(path)[0]


def _heads(counts, seconds=lambda h: 1e-3):
    return [make_record(b, h, h, 1024, head_dim=512 // h, median_s=seconds(h), d_model=512)
            for b in ("naive", "sdpa-flash") for h in counts]


def test_inconclusive_is_a_verdict_word():
    assert INCONCLUSIVE in WORDS


def test_heads_with_three_head_counts_is_inconclusive_and_with_four_is_judged_on_its_range(tmp_path):
    v = heads_free_lunch(_frame(tmp_path, _heads((2, 4, 8))))
    assert v.verdict == INCONCLUSIVE and "at least 4" in v.numbers and v.judged_on.startswith("Hq 2–8")
    v = heads_free_lunch(_frame(tmp_path, _heads((2, 4, 8, 16))))
    assert v.verdict == HOLDS and "Hq 2–16" in v.judged_on and "S 1024" in v.judged_on
    v = heads_free_lunch(_frame(tmp_path, _heads((2, 4, 8, 16), seconds=lambda h: 1e-3 * h)))
    assert v.verdict == FAILS


def test_heads_within_their_timings_noise_of_the_tolerance_are_inconclusive(tmp_path):
    def noisy(noise):
        return [{**r, "ci_low_s": r["median_s"] * (1 - noise), "ci_high_s": r["median_s"] * (1 + noise)}
                for r in _heads((2, 4, 8, 16), seconds=lambda h: 1e-3 * (1 + 0.45 * (h == 16)))]
    v = heads_free_lunch(_frame(tmp_path, noisy(0.01)))  # slowest / fastest 1.45x: free, and decided
    assert v.verdict == HOLDS and "sdpa-flash · fp32 · causal · fwd · S 1,024 1.45× (1.4" in v.numbers
    v = heads_free_lunch(_frame(tmp_path, noisy(0.1)))  # the same medians, timings too noisy to tell from 1.5x
    assert v.verdict == INCONCLUSIVE and "2 conditions straddle" in v.why and "--budget" in v.why


def test_memory_over_a_short_range_is_inconclusive(tmp_path):
    recs = [make_record(b, seq=s) for b in ("naive", "sdpa-flash") for s in (256, 512)]
    v = memory_scaling(_frame(tmp_path, recs))
    assert v.verdict == INCONCLUSIVE and "S 256–512" in v.numbers and "≥4×" in v.numbers
    recs = [make_record("naive", seq=s) for s in (256, 512, 1024, 2048)]
    v = memory_scaling(_frame(tmp_path, recs))  # long enough, but the flash-style side is not measured
    assert v.verdict == INCONCLUSIVE and v.judged_on.startswith("S 256–2048") and "flash-style side" in v.why


def test_the_layer_claim_still_rising_below_half_is_inconclusive_and_names_longer_lengths(tmp_path):
    times = {256: {"naive": (0.01, 0.10)}, 512: {"naive": (0.03, 0.15)}, 1024: {"naive": (0.1, 0.3)}}
    v = attention_dominates(_frame(tmp_path, share_records(times)))
    assert v.verdict == INCONCLUSIVE and "still rising" in v.why and "--seq 1024,2048,4096,8192" in v.why
    assert v.judged_on.startswith("S 256–1024")
    one = {256: {"naive": (0.01, 0.10)}}
    assert attention_dominates(_frame(tmp_path, share_records(one))).verdict == INCONCLUSIVE


def test_the_layer_claim_flat_over_a_deciding_range_does_not_hold(tmp_path):
    flat = {256: {"naive": (0.02, 0.1)}, 1024: {"naive": (0.08, 0.4)}, 4096: {"naive": (0.3, 1.5)}}
    v = attention_dominates(_frame(tmp_path, share_records(flat)))
    assert v.verdict == FAILS and "does not rise" in v.why


def test_the_layer_claim_within_its_timings_noise_of_half_is_inconclusive(tmp_path):
    times = {256: {"naive": (0.1, 0.25)}, 1024: {"naive": (0.3, 0.5)}, 4096: {"naive": (0.52, 1.0)}}

    def noisy(noise):
        return [{**r, "ci_low_s": r["median_s"] * (1 - noise), "ci_high_s": r["median_s"] * (1 + noise)}
                for r in share_records(times)]
    assert attention_dominates(_frame(tmp_path, noisy(0.01))).verdict == HOLDS  # 52% at S=4096, decided
    v = attention_dominates(_frame(tmp_path, noisy(0.1)))
    assert v.verdict == INCONCLUSIVE and "straddles 50.0%" in v.why and "S 4,096 52.0% (4" in v.numbers  # a share


def test_projected_crossing():
    assert projected_crossing([(256, 0.2)]) == 0  # one length: no trend
    assert projected_crossing([(256, 0.2), (1024, 0.2), (4096, 0.2)]) is None  # flat over 16x: decided
    assert projected_crossing([(256, 0.2), (512, 0.2)]) == 0  # flat over 2x: too short to decide
    rising = projected_crossing([(256, 1 / 9), (1024, 0.2)])  # odds 1/8 -> 1/4 over 4x: k = 0.5
    assert 15000 < rising < 17000  # odds reach 1 at 1024 * 4^2


def _decode(read_pct: float, lengths=(1024, 2048, 4096)):
    recs = []
    for kv in lengths:
        recs.append(make_record("sdpa", 8, 8, kv, phase="decode", median_s=1e-3, pct_read_ceiling=read_pct,
                                pct_gemm_ceiling=1.0))
        recs.append(make_record("sdpa", 8, 1, kv, phase="decode", median_s=0.9e-3, pct_read_ceiling=read_pct / 8,
                                pct_gemm_ceiling=1.1))
    return recs


def test_decode_whose_mha_cache_sits_on_chip_is_inconclusive(tmp_path):
    v = fused_decode_speedup(_frame(tmp_path, _decode(160.0)))
    assert v.verdict == INCONCLUSIVE and "on-chip" in v.why and "--decode-kv 16384,65536" in v.why
    assert v.judged_on.startswith("KV 1024–4096")
    assert fused_decode_speedup(_frame(tmp_path, _decode(70.0))).verdict == FAILS


def test_decode_short_of_the_claim_at_too_few_kv_lengths_is_inconclusive(tmp_path):
    v = fused_decode_speedup(_frame(tmp_path, _decode(70.0, lengths=(2048,))))
    assert v.verdict == INCONCLUSIVE and "KV 2048 only" in v.why and "--decode-kv" in v.why


def test_the_closing_summary_names_the_range_each_verdict_was_judged_on(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(make_run(_heads((2, 4, 8, 16)))))
    lines = summary_lines(path)
    heads = next(line for line in lines if "Heads are a free lunch" in line)
    assert heads.strip().startswith("holds") and "[Hq 2–16" in heads


def test_a_decode_condition_measured_at_too_few_lengths_is_listed_not_judged_beside_whole_ones(tmp_path):
    whole = _decode(70.0)  # sdpa MQA at three lengths: a finding (does not hold)
    part = [make_record("sdpa-flash", 8, h, 1024, phase="decode", median_s=t, pct_read_ceiling=70.0,
                        pct_gemm_ceiling=1.0) for h, t in ((8, 1e-3), (1, 0.95e-3))]
    v = fused_decode_speedup(_frame(tmp_path, whole + part))
    assert v.verdict == FAILS and [c.fields["backend"] for c in v.conditions if c.verdict != NOT_JUDGED] == ["sdpa"]
    assert "not judged: sdpa-flash" in v.numbers and "(measured at fewer than 3 KV lengths)" in v.numbers
    assert [c.fields["backend"] for c in v.conditions if c.verdict == NOT_JUDGED] == ["sdpa-flash"]  # still data
    alone = fused_decode_speedup(_frame(tmp_path, part))  # nothing measured whole: still open, as before
    assert alone.verdict == INCONCLUSIVE


def test_a_compiling_kernel_measured_whole_is_listed_not_judged_beside_one_that_does_not_compile(tmp_path):
    # the plan funds flex's decode steps only as time allows where sdpa runs them: judging them when a run reached
    # them would make the verdict depend on its time budget
    flex = [{**r, "backend": "flex", "case_id": r["case_id"].replace("sdpa/", "flex/", 1), "median_s": t}
            for r in _decode(70.0) for t in [r["median_s"] / (4 if r["n_kv_heads"] == 1 else 1)]]
    v = fused_decode_speedup(_frame(tmp_path, _decode(70.0) + flex))
    assert v.verdict == FAILS and [c.fields["backend"] for c in v.conditions if c.verdict != NOT_JUDGED] == ["sdpa"]
    assert "not judged: flex" in v.numbers and "a kernel that compiles, measured as time allowed" in v.numbers
    alone = fused_decode_speedup(_frame(tmp_path, flex))  # the only fused kernel there: judged
    assert alone.verdict == HOLDS and [c.fields["backend"] for c in alone.conditions] == ["flex"]


def test_the_summary_counts_conditions_holding_only_at_their_bound_apart():
    rows = [{"claim": "fused-decode", "claim_verdict": FAILS, "judged_on": "", "word": w, "at_bound": at}
            for w, at in ((HOLDS, True), (FAILS, False), (FAILS, False))]
    assert "0/3 +1 at bound  GQA/MQA speed up decoding" in claim_lines(rows)[0]


def test_a_failing_claim_s_answer_names_a_condition_holding_only_at_its_bound():
    from bench.analysis.conditions import condition
    from bench.analysis.verdict import Verdict
    from bench.claims import BY_KEY
    from bench.report.answers import answer

    at = condition({"backend": "sdpa-flash", "variant": "MQA"}, 1.98, (1.87, 2.02), 2.0, True)
    short = condition({"backend": "sdpa-flash", "variant": "GQA"}, 1.59, (1.51, 1.66), 2.0, True)
    v = Verdict("c", FAILS, "", conditions=(at, short))
    said = answer(v, BY_KEY["fused-decode"])
    assert said.startswith("None of 2 holds clearly (1 only at its bound); the closest: ") and "1.59×" in said
