"""The compare rule at its edges, as bench.regress.compare states it: the threshold, too few rounds, memory, the
global waiver."""

from __future__ import annotations

import numpy as np
import pytest

from bench.cli import main
from bench.regress.compare import compare_runs
from bench.results import write_atomic
from tests.results_factory import make_record, make_run

SHAPES = [(b, s, h) for b in ("sdpa", "naive", "sdpa-flash") for s in (256, 512, 1024) for h in (8, 2)]  # 18 cases
MOVED = SHAPES[0]


def run(seed: int, moved: float = 1.0, rounds: int = 20, spread: float = 0.002, mem: float = 1.0,
        wide: bool = False) -> dict:
    """Quiet synthetic runs (rounds within +-0.2%): only `moved` (x `moved` time, x `mem` memory) changes."""
    recs = []
    for key in SHAPES:
        backend, seq, hkv = key
        factor = moved if key == MOVED or wide else 1.0  # wide: every case moves, naive's rounds scatter +-30%
        rec = make_record(backend=backend, seq=seq, n_kv_heads=hkv, median_s=1e-3 * seq / 256 * factor,
                          rounds=rounds, spread=0.3 if wide and backend == "naive" else spread, seed=seed)
        if key == MOVED:
            rec["peak_mem_bytes"] = int(rec["peak_mem_bytes"] * mem)
        recs.append(rec)
    return make_run(recs, run_id=f"run-{seed}")


def verdict_of_moved(cmp) -> tuple[str, str]:
    cid = make_record(backend=MOVED[0], seq=MOVED[1], n_kv_heads=MOVED[2])["case_id"]
    v = next(v for v in cmp.cases if v.case_id == cid)
    return v.verdict, v.reason


@pytest.mark.parametrize(("moved", "expected"), [(1.09, "unchanged"), (1.11, "regressed"),
                                                 (1 / 1.09, "unchanged"), (1 / 1.11, "improved")])
def test_default_threshold_edge(moved, expected):
    cmp = compare_runs(run(1), run(2, moved=moved))
    assert verdict_of_moved(cmp)[0] == expected
    assert cmp.summary.exit_code == (expected == "regressed")


def test_too_few_rounds_is_noisy_whatever_the_move():
    cmp = compare_runs(run(1, rounds=4), run(2, moved=1.5, rounds=4))
    verdict, reason = verdict_of_moved(cmp)
    assert verdict == "noisy" and "too few rounds to test (4 vs 4)" in reason
    assert cmp.summary.exit_code == 0


def test_five_rounds_are_enough():
    assert verdict_of_moved(compare_runs(run(1, rounds=5), run(2, moved=1.5, rounds=5)))[0] == "regressed"


def test_memory_improved_alone_is_improved_not_failing():
    cmp = compare_runs(run(1), run(2, mem=0.5))
    verdict, reason = verdict_of_moved(cmp)
    assert verdict == "improved" and "peak memory -50%" in reason
    assert cmp.summary.exit_code == 0


def test_memory_regression_wins_over_a_time_improvement():
    verdict, reason = verdict_of_moved(compare_runs(run(1), run(2, moved=0.5, mem=1.2)))
    assert verdict == "regressed" and "faster by 50%" in reason and "peak memory +20%" in reason


@pytest.mark.parametrize(("moved", "threshold", "code"), [(1.11, "15%", 0), (1.11, "10%", 1), (1.07, "5%", 1),
                                                          (1.07, "10%", 0)])
def test_custom_threshold_changes_the_verdict(moved, threshold, code, tmp_path):
    base, cur = tmp_path / "b.json", tmp_path / "c.json"
    write_atomic(base, run(1))
    write_atomic(cur, run(2, moved=moved))
    assert main(["compare", str(base), str(cur), "--threshold", threshold]) == code


def test_a_whole_run_that_moved_waives_the_overlap_check():
    # Every case x1.3; naive's rounds scatter so wide (+-30%) in both runs that the middle 60% of its two runs'
    # rounds overlap. Alone such a case is noisy; when the whole run moved (the clean cases lean slower), each case
    # past the threshold with significantly different rounds is part of that move.
    base, cur = run(1, wide=True), run(2, moved=1.3, wide=True)
    cmp = compare_runs(base, cur, control=False)
    assert cmp.summary.noise.global_shift == 1
    rounds = {e["extra_info"]["case_id"]: e["stats"]["data"] for e in base["benchmarks"]}
    got = {v.case_id: v for v in cmp.cases}
    waived = []
    for entry in cur["benchmarks"]:
        cid, c = entry["extra_info"]["case_id"], entry["stats"]["data"]
        if np.quantile(c, 0.2) <= np.quantile(rounds[cid], 0.8):  # the middle 60% overlap
            waived.append(cid)
            assert got[cid].verdict in ("regressed", "noisy") and "overlap" not in got[cid].reason
    assert any(got[cid].verdict == "regressed" for cid in waived)
    assert all(v.verdict == "regressed" for cid, v in got.items() if not cid.startswith("naive/"))


def test_a_case_whose_rounds_wandered_in_one_run_must_stand_out_of_that_too():
    # The moved case x1.3, its rounds in the current run wandering +-20% (a disturbed spell of its own), every other
    # case quiet: its rounds differ significantly and their middle 60% do not overlap, but one run that scattered by
    # ~13% (1.4826 MAD of the log rounds) knows its level only to within that, so alone it must move x1.68
    def wandering(spread: float) -> dict:
        doc = run(2, moved=1.3)
        cid = make_record(backend=MOVED[0], seq=MOVED[1], n_kv_heads=MOVED[2])["case_id"]
        for rec in doc["benchmarks"]:
            if rec["extra_info"]["case_id"] == cid:
                moved = make_record(backend=MOVED[0], seq=MOVED[1], n_kv_heads=MOVED[2], median_s=1.3e-3,
                                    spread=spread, seed=2)
                rec["stats"]["data"] = moved["samples"]
        return doc

    verdict, reason = verdict_of_moved(compare_runs(run(1), wandering(0.2)))
    assert verdict == "noisy"
    assert "stand out of the others by x1.68 as its own rounds scattered 13% in one run" in reason
    assert verdict_of_moved(compare_runs(run(1), wandering(0.002)))[0] == "regressed"
