"""The claim that torch SDPA's automatic choice is within 10% of the fastest forced kernel, per shape family, with
an interval from the cases' own CIs: holds, does not hold, inconclusive when the interval straddles the bound."""

from __future__ import annotations

import json

import pytest

from bench.analysis.load import read_results
from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED
from bench.claims import AUTO_WITHIN
from bench.claims.auto_choice import auto_choice, default_loss
from tests.results_factory import make_record, make_run

SEQS = (512, 1024, 2048)


def case(backend: str, seq: int, median_s: float, ci: float = 0.01, **kw) -> dict:
    return make_record(backend, n_kv_heads=2, seq=seq, median_s=median_s, ci_low_s=median_s * (1 - ci),
                       ci_high_s=median_s * (1 + ci), **kw)


def frame(records, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(make_run(records)))
    return read_results(path)[0]


def run(tmp_path, auto_over_flash: float, ci: float = 0.01, **kw):
    recs = [r for s in SEQS for r in (case("sdpa-flash", s, 1e-3 * s / 512, ci, **kw),
                                       case("sdpa-math", s, 3e-3 * s / 512, ci, **kw),
                                       case("sdpa", s, auto_over_flash * 1e-3 * s / 512, ci, **kw))]
    return frame(recs, tmp_path)


def test_an_automatic_choice_as_fast_as_the_fastest_kernel_holds(tmp_path):
    v = auto_choice(run(tmp_path, 1.0))
    assert v.verdict == HOLDS and "prefill · GQA · fp32 · causal · fwd: 1.00×" in v.numbers
    assert v.detail[0]["fastest"] == "sdpa-flash" and v.detail[0]["shapes"] == len(SEQS)


def test_an_automatic_choice_slower_beyond_the_bound_fails_naming_the_kernel_that_won(tmp_path):
    v = auto_choice(run(tmp_path, 1.3))
    assert v.verdict == FAILS and "1.30× the fastest forced kernel, sdpa-flash" in v.numbers
    assert "forcing sdpa-flash would save 23%" in v.why


def test_an_interval_that_straddles_the_bound_is_inconclusive(tmp_path):
    v = auto_choice(run(tmp_path, AUTO_WITHIN, ci=0.05))  # at the bound, each side +-5%
    assert v.verdict == INCONCLUSIVE and "More rounds" in v.why
    assert v.detail[0]["low"] < AUTO_WITHIN < v.detail[0]["high"]


def test_families_are_judged_apart_and_one_holding_beside_one_failing_depends(tmp_path):
    good = [r for s in SEQS for r in (case("sdpa-flash", s, 1e-3, phase="decode"), case("sdpa", s, 1e-3,
                                                                                          phase="decode"))]
    bad = [r for s in SEQS for r in (case("sdpa-flash", s, 1e-3), case("sdpa", s, 2e-3))]
    v = auto_choice(frame([*good, *bad], tmp_path))
    assert v.verdict == DEPENDS and {d["verdict"] for d in v.detail} == {HOLDS, FAILS}
    assert "forcing sdpa-flash would save 50% in prefill" in v.why
    assert default_loss(frame([*good, *bad], tmp_path)) == pytest.approx(
        {"decode · GQA · fp32 · causal · fwd": 1.0, "prefill · GQA · fp32 · causal · fwd": 2.0})


def test_without_a_forced_kernel_beside_the_automatic_one_it_is_not_measured(tmp_path):
    v = auto_choice(frame([case("sdpa", s, 1e-3) for s in SEQS] + [case("naive", s, 1e-2) for s in SEQS], tmp_path))
    assert v.verdict == NOT_MEASURED and "--backend sdpa," in v.numbers
