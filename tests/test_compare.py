"""Regression verdicts (`bench compare`) and baselines (`bench baseline`) on synthetic runs from results_factory."""

from __future__ import annotations

import json
import math
import random
import statistics

import numpy as np
import pytest

from bench.cli import main
from bench.measure import environment
from bench.regress import baseline
from bench.regress.compare import CompareError, Rule, compare_runs
from bench.regress.noise import median_mad, noise_class, noise_model, parse_threshold
from bench.regress.render import render_text
from bench.results import as_run, read_run, write_atomic
from tests.results_factory import FINGERPRINT, make_record, make_run

# 24 cases: 3 backends x 4 lengths x (MHA, GQA)
CASES = [(b, s, hkv) for b in ("sdpa", "naive", "flex") for s in (256, 512, 1024, 2048) for hkv in (8, 2)]
BIMODAL = {("naive", 512, 8), ("naive", 1024, 2), ("sdpa", 512, 2)}  # like naive/math at S=512 on a 2-core CPU


def sweep(seed, slowdown=1.0, slowed=lambda key: True, bimodal="within", modes=None, case_sigma=0.03,
          run_sigma=0.02, cases=CASES, run_id=None, rounds=20, **run_kw) -> dict:
    """One synthetic run with a shared 2-core CPU's noise (see the README), scaled down to a quiet machine by default.

    Per round: lognormal 3% jitter and 5% outliers at x1.5 (preemption). Per case and run: a drift of case_sigma
    (flash-CPU was +-3% between processes) and a whole-run drift of run_sigma. BIMODAL cases sit at x1.0 or x1.3:
    bimodal="within" mixes both modes inside each run, 35-65% of the rounds in the slow one, so the median jumps
    between runs; "between" puts a whole run in one mode (modes[key], else a coin flip) with tight rounds, as
    naive and sdpa-math at S=512 did between processes there (5.6 vs 12.2 ms).
    """
    rng = random.Random(seed)
    run_drift = math.exp(rng.gauss(0, run_sigma))
    recs = []
    for key in cases:
        backend, seq, hkv = key
        m = 2e-4 * (seq / 256) ** 1.5 * (3 if backend == "naive" else 1) * run_drift
        m *= math.exp(rng.gauss(0, case_sigma)) * (slowdown if slowed(key) else 1.0)
        if key in BIMODAL and bimodal == "within":
            share = rng.uniform(0.35, 0.65)
            samples = [m * (1.3 if rng.random() < share else 1.0) * math.exp(rng.gauss(0, 0.02)) for _ in range(rounds)]
        else:
            if key in BIMODAL and bimodal == "between":
                m *= (modes or {}).get(key, 1.3 if rng.random() < 0.5 else 1.0)
            samples = [m * math.exp(rng.gauss(0, 0.03)) * (1.5 if rng.random() < 0.05 else 1.0) for _ in range(rounds)]
        recs.append(make_record(backend=backend, seq=seq, n_kv_heads=hkv, median_s=statistics.median(samples),
                                samples=samples))
    return make_run(recs, run_id=run_id or f"run-{seed}", **run_kw)


def verdicts(cmp) -> dict[str, str]:
    return {v.case_id: v.verdict for v in cmp.cases}


def case_id(key) -> str:
    return make_record(backend=key[0], seq=key[1], n_kv_heads=key[2])["case_id"]


def write(tmp_path, name, doc) -> str:
    path = tmp_path / name
    write_atomic(path, doc)
    return str(path)


# --- the statistics -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_aa_two_runs_flag_no_regression(seed):
    cmp = compare_runs(sweep(100 + seed), sweep(200 + seed))
    assert cmp.summary.exit_code == 0, [(v.case_id, v.reason) for v in cmp.cases if v.failing]
    assert cmp.summary.counts["regressed"] == 0 and cmp.summary.counts["improved"] == 0
    assert cmp.summary.noise.global_shift == 0 and cmp.summary.noise.group_shift == 0


@pytest.mark.parametrize("seed", range(8))
def test_uniform_30pct_slowdown_is_flagged(seed):
    cmp = compare_runs(sweep(100 + seed), sweep(200 + seed, slowdown=1.3))
    got = verdicts(cmp)
    steady = [case_id(k) for k in CASES if k not in BIMODAL]
    assert sum(got[c] == "regressed" for c in steady) >= 0.95 * len(steady)
    # rounds spread over x1.0 and x1.3 cannot prove a 30% change; the mode mix can even hide it (x1.3 -> x1.0*1.3)
    assert all(got[case_id(k)] in ("regressed", "noisy", "unchanged") for k in BIMODAL)
    assert cmp.summary.exit_code == 1
    assert cmp.summary.noise.global_shift == 1


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("group", ["flex", "flex+naive256", "not sdpa"])
def test_slowdown_of_a_third_to_two_thirds_of_the_cases_is_flagged(group, seed):
    # a third of the cases moving together doubles the MAD: alone they do not stand out, but they lean
    def slowed(key):
        return key[0] == "flex" or (group != "flex" and key[0] == "naive" and (key[1] == 256 or group == "not sdpa"))

    cmp = compare_runs(sweep(10 + seed), sweep(20 + seed, slowdown=1.3, slowed=slowed))
    got = verdicts(cmp)
    hit = [k for k in CASES if slowed(k) and k not in BIMODAL]
    assert len(hit) in (8, 10, 14)
    assert sum(got[case_id(k)] == "regressed" for k in hit) >= 0.9 * len(hit)
    assert cmp.summary.exit_code == 1
    assert cmp.summary.noise.group_shift == 1 or cmp.summary.noise.global_shift == 1


def test_single_case_regression_is_flagged_and_exit_1():
    slow = ("sdpa", 1024, 8)
    cmp = compare_runs(sweep(1), sweep(2, slowdown=1.4, slowed=lambda k: k == slow))
    assert verdicts(cmp)[case_id(slow)] == "regressed"
    assert [v.case_id for v in cmp.cases if v.failing] == [case_id(slow)]
    assert cmp.cases[0].p_value < 0.01 and 1.3 < cmp.cases[0].ratio < 1.55


def test_noisy_machine_aa_is_rarely_a_regression():
    # A shared 2-core CPU: per-case ratios between identical sweeps spread 0.71-1.75 (README); here sigma 0.2 per run.
    # Most cases move past 10% by noise alone; they must come out noisy, not regressed. On 24 cases the
    # noise estimate itself is rough, so an occasional false alarm remains (about 1 in 20 in simulation).
    results = [compare_runs(sweep(10 + seed, case_sigma=0.2), sweep(100 + seed, case_sigma=0.2)) for seed in range(20)]
    assert sum(cmp.summary.exit_code for cmp in results) <= 2
    for cmp in results:
        assert cmp.summary.noise.floor_ratio > 1.8  # and each says how little it could have seen
        assert cmp.summary.exit_code or cmp.summary.counts["noisy"] >= 5


def test_between_run_bimodality_needs_a_pooled_baseline():
    # The trap of a shared CPU: a case flips between x1.0 and x1.3 from one process to the next, tight rounds each time.
    low = {k: 1.0 for k in BIMODAL}
    high = {k: 1.3 for k in BIMODAL}
    current = sweep(9, bimodal="between", modes=high)
    one_pass = sweep(1, bimodal="between", modes=low)
    # From one baseline run a flip is indistinguishable from a regression of that case:
    assert compare_runs(one_pass, current).summary.counts["regressed"] == len(BIMODAL)
    # A baseline pooled from passes that saw both modes knows the case's range: no false alarm.
    passes = [one_pass, sweep(2, bimodal="between", modes=high), sweep(3, bimodal="between", modes=low)]
    pooled = baseline.merge_passes(passes)
    cmp = compare_runs(pooled, current)
    assert cmp.summary.exit_code == 0
    assert cmp.summary.baseline.passes == 3
    # ... and still sees a real 30% regression on top of the slow mode
    worse = sweep(9, bimodal="between", modes={k: 1.69 for k in BIMODAL})
    got = verdicts(compare_runs(pooled, worse))
    assert all(got[case_id(k)] == "regressed" for k in BIMODAL)


def test_median_mad_estimates_sigma():
    rng = random.Random(0)
    center, sigma = median_mad([rng.gauss(0.02, 0.05) for _ in range(400)])
    assert abs(center - 0.02) < 0.01 and 0.045 < sigma < 0.055


def test_too_few_cases_use_the_prior_noise_and_say_so():
    few = CASES[:3]
    cmp = compare_runs(sweep(1, cases=few), sweep(2, cases=few, slowdown=2.5))
    assert cmp.summary.noise.kind == "prior"
    assert cmp.summary.counts["regressed"] == 3
    assert "only 3 cases timed in both runs, too few to measure it" in render_text(cmp)


def test_too_few_cases_to_decide_say_so_and_name_bench_ab():
    """One case x1.43 in two stored runs: compare cannot tell it from run-to-run noise, and says what can."""
    one = CASES[:1]
    cmp = compare_runs(sweep(1, cases=one), sweep(2, cases=one, slowdown=1.43))
    (v,) = cmp.cases
    assert v.verdict == "noisy" and "cannot decide" in v.reason and "bench ab" in v.reason
    assert "python -m bench ab REV" in render_text(cmp)


@pytest.mark.parametrize("metric", ["median", "mean", "min"])
def test_metrics(metric):
    cmp = compare_runs(sweep(1), sweep(2, slowdown=1.5, slowed=lambda k: k == CASES[0]), Rule(metric=metric))
    assert verdicts(cmp)[case_id(CASES[0])] == "regressed"


# --- statuses, memory, missing and new cases ------------------------------------------------------------------


def _with(doc_cases: list[dict], **kw) -> dict:
    return make_run(doc_cases, **kw)


def _recs(seed: int) -> list[dict]:
    return [make_record(backend=b, seq=s, n_kv_heads=h, median_s=1e-3 * s / 256, seed=seed) for b, s, h in CASES]


@pytest.mark.parametrize("status", ["oom", "incorrect", "error"])
def test_ok_to_failure_status_is_always_flagged(status, tmp_path, capsys):
    cur = _recs(2)
    cur[5] = make_record(backend=CASES[5][0], seq=CASES[5][1], n_kv_heads=CASES[5][2], status=status)
    cmp = compare_runs(make_run(_recs(1)), make_run(cur))
    top = cmp.cases[0]
    assert (top.verdict, top.failing, top.case_id) == ("status changed", True, cur[5]["case_id"])
    assert top.reason.startswith(f"ok -> {status}")
    code = main(["compare", write(tmp_path, "b.json", make_run(_recs(1))), write(tmp_path, "c.json", make_run(cur))])
    assert code == 1
    assert f"ok -> {status}" in capsys.readouterr().out


def test_other_status_changes_are_reported_not_failed():
    base, cur = _recs(1), _recs(2)
    base[0] = make_record(backend=CASES[0][0], seq=CASES[0][1], n_kv_heads=CASES[0][2], status="oom")
    cur[1] = make_record(backend=CASES[1][0], seq=CASES[1][1], n_kv_heads=CASES[1][2], status="unsupported")
    base[2] = make_record(backend=CASES[2][0], seq=CASES[2][1], n_kv_heads=CASES[2][2], status="error")
    cur[2] = make_record(backend=CASES[2][0], seq=CASES[2][1], n_kv_heads=CASES[2][2], status="error")
    cmp = compare_runs(make_run(base), make_run(cur))
    got = verdicts(cmp)
    assert got[base[0]["case_id"]] == "status changed" and got[cur[1]["case_id"]] == "status changed"
    assert got[base[2]["case_id"]] == "unchanged"  # error in both: nothing new
    assert cmp.summary.exit_code == 0


def test_memory_regression_is_flagged():
    cur = _recs(2)
    cur[3] = dict(cur[3], peak_mem_bytes=cur[3]["peak_mem_bytes"] * 1.5)
    cmp = compare_runs(make_run(_recs(1)), make_run(cur))
    v = cmp.cases[0]
    assert (v.case_id, v.verdict, v.failing) == (cur[3]["case_id"], "regressed", True)
    assert "peak memory +50%" in v.reason and v.mem_ratio == pytest.approx(1.5)
    assert cmp.summary.exit_code == 1


def test_missing_and_new_cases():
    extra = make_record(backend="flex", seq=4096)
    cur = _recs(2)[1:] + [extra]
    cmp = compare_runs(make_run(_recs(1)), make_run(cur))
    got = verdicts(cmp)
    assert got[_recs(1)[0]["case_id"]] == "missing" and got[extra["case_id"]] == "new"
    assert cmp.summary.counts["missing"] == 1 and cmp.summary.counts["new"] == 1
    assert cmp.summary.exit_code == 0


def test_incomplete_current_run_is_warned_about():
    cmp = compare_runs(make_run(_recs(1)), make_run(_recs(2)[:10], complete=False))
    assert any("current run is incomplete" in w for w in cmp.summary.warnings)


# --- machines: the fingerprint guard and --normalize ----------------------------------------------------------


def test_other_machine_is_refused_naming_the_field(tmp_path, capsys):
    base = write(tmp_path, "b.json", sweep(1))
    other = write(tmp_path, "c.json", sweep(2, fingerprint={"cpu_model": "Other CPU"}))
    assert main(["compare", base, other]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "cpu_model: 'Test CPU' (baseline) vs 'Other CPU' (current)" in err and "--normalize" in err


def test_normalize_compares_in_gemm_units(tmp_path, capsys):
    # a machine twice as fast at GEMM runs every case in half the time: no regression once normalized
    fast = sweep(2, slowdown=0.5, fingerprint={"cpu_model": "Other CPU"},
                 calibration={"gemm_flops_per_s": 3.9e11, "copy_bytes_per_s": 1.2e11})
    b, c = write(tmp_path, "b.json", sweep(1)), write(tmp_path, "c.json", fast)
    assert main(["compare", b, c, "--normalize"]) == 0
    out = capsys.readouterr().out
    assert "GEMM units" in out and "cpu_model" in out
    cmp = compare_runs(read_run(b), read_run(c), normalize=True)
    assert cmp.summary.normalized and cmp.summary.counts["improved"] == 0
    # in seconds, the same pair would be a wholesale "improvement" (the guard refuses it without --normalize)
    seconds = compare_runs(sweep(1), sweep(2, slowdown=0.5))
    assert seconds.summary.counts["improved"] >= 20 and seconds.summary.noise.global_shift


def test_normalize_needs_calibration():
    cur = sweep(2)
    cur["attnbench"]["calibration"] = {}
    with pytest.raises(CompareError, match="gemm_flops_per_s.*current"):
        compare_runs(sweep(1), cur, normalize=True)


# --- the CLI: formats, exit codes, bad input -------------------------------------------------------------------


def test_formats(tmp_path, capsys):
    b = write(tmp_path, "b.json", sweep(1))
    c = write(tmp_path, "c.json", sweep(2, slowdown=1.5, slowed=lambda k: k == CASES[0]))
    assert main(["compare", b, c, "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"] == "regression" and doc["exit_code"] == 1 and doc["counts"]["regressed"] == 1
    assert doc["cases"][0]["verdict"] == "regressed" and doc["noise"]["kind"] == "cross-case"

    out_file = tmp_path / "summary.md"
    assert main(["compare", b, c, "--format", "markdown", "--output", str(out_file)]) == 1
    md = capsys.readouterr().out
    assert md == out_file.read_text()
    assert md.startswith("### attnbench: :x: **regression**")
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) - 1 == sum(1 for v in compare_runs(read_run(b), read_run(c)).cases if v.verdict != "unchanged")

    assert main(["compare", b, c]) == 1
    text = capsys.readouterr().out
    assert "result: REGRESSION" in text and case_id(CASES[0]) in text


def test_markdown_when_nothing_changed(tmp_path, capsys):
    b, c = write(tmp_path, "b.json", make_run(_recs(1))), write(tmp_path, "c.json", make_run(_recs(2)))
    assert main(["compare", b, c, "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert ":white_check_mark: no regression" in md and "All 24 cases are within the threshold" in md


@pytest.mark.parametrize("threshold, expected", [("10%", 0.1), ("0.1", 0.1), (" 25% ", 0.25), ("150%", 1.5)])
def test_threshold_parses(threshold, expected):
    assert parse_threshold(threshold) == pytest.approx(expected)


@pytest.mark.parametrize("threshold", ["ten", "0", "-5%", "10", "nan", "%"])
def test_bad_threshold_is_refused(threshold):
    with pytest.raises(CompareError, match="threshold"):
        parse_threshold(threshold)


@pytest.mark.parametrize("threshold", ["10%", "0.1"])
def test_threshold_on_the_cli(threshold, tmp_path):
    b, c = write(tmp_path, "b.json", make_run(_recs(1))), write(tmp_path, "c.json", make_run(_recs(2)))
    assert main(["compare", b, c, "--threshold", threshold]) == 0


def _bad_inputs(tmp_path) -> dict[str, tuple[list[str], str]]:
    good = write(tmp_path, "good.json", make_run(_recs(1)))
    text = (tmp_path / "good.json").read_text()
    (tmp_path / "corrupt.json").write_text("{not json")
    (tmp_path / "truncated.json").write_text(text[: len(text) // 2])
    disjoint = write(tmp_path, "disjoint.json", make_run([make_record(seq=s) for s in (8192, 16384)]))
    return {
        "missing file": ([str(tmp_path / "nope.json"), good], "no such file"),
        "corrupt": ([str(tmp_path / "corrupt.json"), good], "not valid JSON"),
        "truncated": ([good, str(tmp_path / "truncated.json")], "truncated"),
        "nothing in common": ([good, disjoint], "no case in common"),
        "threshold": ([good, good, "--threshold", "ten"], "threshold 'ten' is not a number"),
    }


@pytest.mark.parametrize("case", ["missing file", "corrupt", "truncated", "nothing in common", "threshold"])
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, capsys):
    args, needle = _bad_inputs(tmp_path)[case]
    assert main(["compare", *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert captured.out == ""


# --- baselines -------------------------------------------------------------------------------------------------


@pytest.fixture
def this_machine(monkeypatch):
    """Pretend this machine is the factory's test machine (torch's real fingerprint is tested on its own)."""
    monkeypatch.setattr(baseline, "current_fingerprint", lambda device: dict(FINGERPRINT, device=device))
    monkeypatch.setattr(baseline, "default_device", lambda: "cpu")


def test_current_fingerprint_has_the_six_fields():
    fp = baseline.current_fingerprint("cpu")
    assert tuple(fp) == environment.FINGERPRINT_FIELDS
    assert fp["device"] == "cpu" and fp["gpu_name"] is None and isinstance(fp["threads"], int)
    assert isinstance(fp["torch"], str) and fp["cpu_model"]
    assert environment.fingerprint_key(fp) == environment.fingerprint_key(dict(fp))


def test_current_fingerprint_is_what_the_engine_records():
    from bench.measure.environment import fingerprint

    assert json.loads(json.dumps(fingerprint("cpu"), default=str)) == baseline.current_fingerprint("cpu")


def test_fingerprint_key_is_readable_and_distinct():
    key = environment.fingerprint_key(FINGERPRINT)
    assert key.startswith("cpu-test-cpu-torch2.13.0-cpu-t2-") and len(key.rsplit("-", 1)[1]) == 8
    assert environment.fingerprint_key(dict(FINGERPRINT, threads=4)) != key


def test_baseline_save_path_show(tmp_path, capsys, this_machine):
    folder = str(tmp_path / "baselines")
    assert main(["baseline", "path", "--dir", folder]) == 2
    assert "no baseline for this machine" in capsys.readouterr().err

    run = write(tmp_path, "run.json", sweep(1))
    assert main(["baseline", "save", run, "--dir", folder]) == 0
    saved = capsys.readouterr().out.strip()
    assert saved.endswith(f"{environment.fingerprint_key(FINGERPRINT)}.json")

    assert main(["baseline", "path", "--dir", folder]) == 0
    assert capsys.readouterr().out.strip() == saved
    assert main(["baseline", "path", "--like", write(tmp_path, "later.json", sweep(4)), "--dir", folder]) == 0
    assert capsys.readouterr().out.strip() == saved
    assert main(["baseline", "path", "--like", write(tmp_path, "t4.json", sweep(4, fingerprint={"threads": 4})),
                 "--dir", folder]) == 2
    assert "no baseline for this machine" in capsys.readouterr().err

    other = write(tmp_path, "other.json", sweep(2, fingerprint={"cpu_model": "Other CPU"}))
    assert main(["baseline", "save", other, "--dir", folder]) == 0
    capsys.readouterr()
    assert main(["baseline", "show", "--dir", folder]) == 0
    shown = capsys.readouterr().out
    assert shown.count("<- this machine") == 1 and f"{saved}  <- this machine" in shown
    assert "'Other CPU'" in shown and "24 cases" in shown

    # the saved baseline is an ordinary results file: compare reads it, or finds it in the folder
    cur = write(tmp_path, "cur.json", sweep(3))
    assert main(["compare", saved, cur]) == 0
    assert main(["compare", folder, cur]) == 0
    assert "baseline run-1 (quick) vs current run-3" in capsys.readouterr().out
    t8 = write(tmp_path, "t8.json", sweep(3, fingerprint={"threads": 8}))
    assert main(["compare", folder, t8]) == 2
    assert "no baseline for the machine of" in capsys.readouterr().err
    assert main(["compare", folder, t8, "--normalize"]) == 0  # the nearest machine, named in the report
    assert "machines differ: threads: 2 (baseline) vs 8 (current)" in capsys.readouterr().out


def test_baseline_path_closest(tmp_path, capsys, this_machine):
    folder = str(tmp_path / "baselines")
    assert main(["baseline", "save", write(tmp_path, "o.json", sweep(1, fingerprint={"cpu_model": "Other CPU"})),
                 "--dir", folder]) == 0
    capsys.readouterr()
    assert main(["baseline", "path", "--dir", folder]) == 2
    capsys.readouterr()
    assert main(["baseline", "path", "--closest", "--dir", folder]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().endswith(".json") and "cpu_model" in captured.err and "--normalize" in captured.err


def test_baseline_pools_passes(tmp_path):
    passes = [sweep(s, run_id=f"pass-{s}") for s in (1, 2, 3)]
    paths = [write(tmp_path, f"p{s}.json", doc) for s, doc in enumerate(passes)]
    target = baseline.save(paths, tmp_path / "b")
    doc = read_run(target)
    assert doc.meta.baseline["passes"] == 3
    assert doc.meta.baseline["run_ids"] == ["pass-1", "pass-2", "pass-3"]
    entry = doc.benchmarks[0]
    assert entry.pass_rounds == (20, 20, 20) and entry.stats["rounds"] == 60
    assert entry.record.median_s == pytest.approx(statistics.median(entry.samples))


def test_baseline_refuses_mixed_machines_and_incomplete_runs(tmp_path, capsys):
    a = write(tmp_path, "a.json", sweep(1))
    b = write(tmp_path, "b.json", sweep(2, fingerprint={"threads": 4}))
    assert main(["baseline", "save", a, b, "--dir", str(tmp_path / "x")]) == 2
    assert "threads: 2 (first) vs 4 (this)" in capsys.readouterr().err
    partial = write(tmp_path, "p.json", sweep(3, complete=False))
    assert main(["baseline", "save", partial, "--dir", str(tmp_path / "x")]) == 2
    assert "incomplete" in capsys.readouterr().err


def test_flaky_status_across_passes_is_kept_non_ok():
    oom = [make_record(backend=b, seq=s, n_kv_heads=h, status="oom" if (b, s, h) == CASES[0] else "ok")
           for b, s, h in CASES]
    pooled = baseline.merge_passes([make_run(_recs(1)), make_run(oom)])
    first = next(e for e in pooled.untimed if e.case_id == case_id(CASES[0]))
    assert first.status == "oom" and "ok, oom" in first.record.reason
    # so the same OOM in a later run is not an ok -> oom failure
    assert compare_runs(pooled, make_run(oom)).summary.exit_code == 0


# --- the in-run control and several current passes ---------------------------------------------------------------


def _gemm(flops_per_s: float) -> dict:
    return {"gemm_flops_per_s": flops_per_s, "copy_bytes_per_s": 3e10}


def test_machine_wide_slow_spell_is_explained_by_the_in_run_control():
    # Every case 30% slower AND the run's own GEMM 30% slower: the machine was slower, not the code.
    base = sweep(1, calibration=_gemm(2e11))
    slow_machine = sweep(2, slowdown=1.3, calibration=_gemm(2e11 / 1.3))
    cmp = compare_runs(base, slow_machine)
    assert cmp.summary.controlled and cmp.summary.exit_code == 0
    assert cmp.summary.counts["regressed"] == 0
    assert all("in-run control" in v.reason for v in cmp.cases if v.verdict == "noisy" and v.ratio > 1.2)
    # without the control the same runs look like a regression of every case
    assert compare_runs(base, slow_machine, control=False).summary.exit_code == 1


def test_slower_code_on_an_unchanged_machine_is_still_caught_with_the_control():
    base = sweep(1, calibration=_gemm(2e11))
    slow_code = sweep(2, slowdown=1.3, calibration=_gemm(2e11))
    cmp = compare_runs(base, slow_code)
    assert cmp.summary.exit_code == 1 and cmp.summary.counts["regressed"] >= 0.95 * len(CASES)


def test_a_stall_in_one_current_pass_is_not_a_regression_when_the_other_pass_is_clean():
    stalled_key = CASES[5]
    base = sweep(1)
    stalled = sweep(2, slowdown=3.0, slowed=lambda key: key == stalled_key)  # one case hit by a stall
    clean = sweep(3)
    alone = compare_runs(base, stalled)
    assert verdicts(alone)[case_id(stalled_key)] == "regressed"  # one pass cannot tell a stall from a change
    pooled = compare_runs(base, baseline.merge_passes([stalled, clean]))
    assert verdicts(pooled)[case_id(stalled_key)] == "noisy"
    assert pooled.summary.exit_code == 0
    # a real slowdown shows in every pass and stays a regression
    both = baseline.merge_passes([sweep(4, slowdown=3.0, slowed=lambda key: key == stalled_key),
                                  sweep(5, slowdown=3.0, slowed=lambda key: key == stalled_key)])
    assert verdicts(compare_runs(base, both))[case_id(stalled_key)] == "regressed"


def test_compare_cli_pools_several_current_files(tmp_path, capsys):
    base = write(tmp_path, "base.json", sweep(1))
    cur1 = write(tmp_path, "c1.json", sweep(2))
    cur2 = write(tmp_path, "c2.json", sweep(3))
    assert main(["compare", base, cur1, cur2, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["current"]["passes"] == 2 and out["n_matched"] == len(CASES) and out["controlled"] is True


# --- the local control: each case's own probe, timed between its rounds (bench.measure.control) ---------------------

SPELL = set(CASES[3:5])  # a slow spell of the host over two cases of the current run


def _probed(doc: dict, probe_of=lambda key: 9e10) -> dict:
    """The run with each case's control_flops set, as a CPU run records it."""
    by_id = {case_id(key): key for key in CASES}
    for entry in doc["benchmarks"]:
        entry["extra_info"]["control_flops"] = probe_of(by_id[entry["extra_info"]["case_id"]])
    return doc


def _spell(seed: int, probe_slower: bool) -> dict:
    run = sweep(seed, slowdown=1.6, slowed=lambda key: key in SPELL)
    return _probed(run, lambda key: 9e10 / 1.6 if probe_slower and key in SPELL else 9e10)


def test_a_slow_spell_over_some_cases_is_explained_by_their_own_probes():
    base = _probed(sweep(1))
    cmp = compare_runs(base, _spell(2, probe_slower=True))
    spell = {case_id(key) for key in SPELL}
    assert cmp.summary.exit_code == 0 and cmp.summary.locally_controlled == len(CASES)
    assert all(v.verdict == "noisy" and "in-run control" in v.reason for v in cmp.cases if v.case_id in spell)
    assert "each timed case against its own GEMM probe" in render_text(cmp)
    # the run-level control (its GEMM at the start and end) cannot see a spell of a few cases
    assert compare_runs(sweep(1), sweep(2, slowdown=1.6, slowed=lambda key: key in SPELL)).summary.exit_code == 1


def test_slower_code_beside_steady_probes_is_still_caught():
    cmp = compare_runs(_probed(sweep(1)), _spell(2, probe_slower=False))
    assert {v.case_id for v in cmp.cases if v.verdict == "regressed"} == {case_id(key) for key in SPELL}


def test_a_side_without_probes_falls_back_to_the_runs_gemm():
    # an older results file has no control_flops: its cases are held to each run's GEMM, as before
    cmp = compare_runs(sweep(1), _spell(2, probe_slower=False))
    assert cmp.summary.locally_controlled == 0 and cmp.summary.exit_code == 1
    assert {v.case_id for v in cmp.cases if v.verdict == "regressed"} == {case_id(key) for key in SPELL}


def _pooled(tmp_path, docs: list[dict]):
    """A baseline pooled from the runs, written and read back: (its path, its first case)."""
    path = write(tmp_path, "pooled.json", baseline.merge_passes(docs).to_dict())
    return path, next(iter(read_run(path).entries()))


def test_a_pooled_baseline_keeps_each_pass_probe(tmp_path):
    path, entry = _pooled(tmp_path, [_probed(sweep(1), lambda key: 8e10), _probed(sweep(3), lambda key: 1e11)])
    assert entry.pass_control == (8e10, 1e11) and entry.record.control_flops == pytest.approx(9e10)
    assert compare_runs(read_run(path), _spell(2, probe_slower=True)).summary.locally_controlled == len(CASES)



def _cold(doc: dict, read_of=lambda key: 3e10) -> dict:
    """The run's cases timed cold, each with its memory probe (control_read, bytes/s) beside its GEMM probe."""
    by_id = {case_id(key): key for key in CASES}
    for entry in doc["benchmarks"]:
        info = entry["extra_info"]
        info["timing_mode"], info["control_read"] = "cold", read_of(by_id[info["case_id"]])
    return _probed(doc)


def _contended(seed: int, read_slower: bool) -> dict:
    """Some cold cases 1.6x slower, their memory probes slower with them (the host's other tenants) or not (code)."""
    run = sweep(seed, slowdown=1.6, slowed=lambda key: key in SPELL)
    return _cold(run, lambda key: 3e10 / 1.6 if read_slower and key in SPELL else 3e10)


def test_cold_cases_slowed_with_the_memory_are_explained_by_their_memory_probes():
    cmp = compare_runs(_cold(sweep(1)), _contended(2, read_slower=True))
    spell = {case_id(key) for key in SPELL}
    assert cmp.summary.exit_code == 0 and cmp.summary.read_controlled == len(CASES)
    assert all(v.verdict == "noisy" and "units of its own memory probe" in v.reason
               for v in cmp.cases if v.case_id in spell)
    assert "cold cases against a read from their own copies" in render_text(cmp)
    # their GEMM probes ran at the usual speed: against them alone the same runs fail
    gemm_only = compare_runs(_cold(sweep(1), lambda key: None), _contended(2, read_slower=True))
    assert gemm_only.summary.read_controlled == 0 and gemm_only.summary.exit_code == 1


def test_slower_cold_code_beside_steady_memory_probes_is_still_caught():
    cmp = compare_runs(_cold(sweep(1)), _contended(2, read_slower=False))
    assert {v.case_id for v in cmp.cases if v.verdict == "regressed"} == {case_id(key) for key in SPELL}


def test_a_pooled_baseline_keeps_each_pass_memory_probe(tmp_path):
    path, entry = _pooled(tmp_path, [_cold(sweep(1), lambda key: 2e10), _cold(sweep(3), lambda key: 4e10)])
    assert entry.pass_read == (2e10, 4e10) and entry.record.control_read == pytest.approx(3e10)
    assert compare_runs(read_run(path), _contended(2, read_slower=True)).summary.exit_code == 0

def _moded(seed: int, moved: dict[tuple, float] | None = None) -> dict:
    """24 cold cases with 12% run-to-run noise and 24 warm ones with 2%, as a shared host's memory contention gives."""
    rng = random.Random(seed)
    recs = []
    for mode, sigma in (("cold", 0.12), ("warm", 0.02)):
        for key in CASES:
            backend, seq, hkv = key
            m = 1e-3 * (seq / 256) * math.exp(rng.gauss(0, sigma)) * (moved or {}).get((mode, *key), 1.0)
            samples = [m * math.exp(rng.gauss(0, 0.01)) for _ in range(20)]
            recs.append(make_record(backend=backend, seq=seq, n_kv_heads=hkv, phase="decode" if mode == "cold" else
                                    "prefill", median_s=statistics.median(samples), samples=samples, timing_mode=mode))
    return make_run(recs, run_id=f"moded-{seed}")


def test_each_timing_mode_has_its_own_noise():
    warm_key, cold_key = ("warm", *CASES[0]), ("cold", *CASES[1])
    cmp = compare_runs(_moded(1), _moded(2, {warm_key: 1.3, cold_key: 1.3}))
    by_mode = {c.name: c.sigma for c in cmp.summary.noise.classes}
    assert by_mode["cold"] > 3 * by_mode["warm"]
    cases = {v.case_id: v for v in cmp.cases}
    warm = cases[make_record(backend=CASES[0][0], seq=CASES[0][1], n_kv_heads=CASES[0][2])["case_id"]]
    cold = cases[make_record(backend=CASES[1][0], seq=CASES[1][1], n_kv_heads=CASES[1][2],
                             phase="decode")["case_id"]]
    # x1.3 is far out of the warm cases' 2% noise, and within the cold ones' 12%
    assert warm.verdict == "regressed" and cold.verdict == "noisy" and "within run-to-run noise" in cold.reason
    assert "by timing mode" in render_text(cmp) and "cold sigma" in render_text(cmp)


def _ragged(seed: int, moved: dict[str, float] | None = None) -> dict:
    """24 cold decode steps with 2% noise per run, and 24 cold ragged batches (a replayed trace's steps) with 10%."""
    rng = random.Random(seed)
    recs = []
    for ragged, sigma in ((False, 0.02), (True, 0.10)):
        for key in CASES:
            backend, seq, hkv = key
            rec = make_record(backend=backend, seq=seq, n_kv_heads=hkv, phase="decode", batch=16 if ragged else 1)
            m = 1e-3 * (seq / 256) * math.exp(rng.gauss(0, sigma)) * (moved or {}).get(rec["case_id"], 1.0)
            samples = [m * math.exp(rng.gauss(0, 0.01)) for _ in range(20)]
            recs.append(make_record(backend=backend, seq=seq, n_kv_heads=hkv, phase="decode", batch=16 if ragged else 1,
                                    median_s=statistics.median(samples), samples=samples, timing_mode="cold",
                                    lengths="uniform" if ragged else None))
    return make_run(recs, run_id=f"ragged-{seed}")


def test_cold_ragged_batches_have_their_own_noise():
    grid = make_record(backend=CASES[0][0], seq=CASES[0][1], n_kv_heads=CASES[0][2], phase="decode")["case_id"]
    ragged = make_record(backend=CASES[0][0], seq=CASES[0][1], n_kv_heads=CASES[0][2], phase="decode",
                         batch=16)["case_id"]
    cmp = compare_runs(_ragged(1), _ragged(2, {grid: 1.3, ragged: 1.5}))
    by_class = {c.name: c.sigma for c in cmp.summary.noise.classes}
    assert set(by_class) == {"cold", "cold, ragged batch"} and by_class["cold, ragged batch"] > 2 * by_class["cold"]
    cases = {v.case_id: v for v in cmp.cases}
    # x1.3 is out of the cold decode steps' noise, and x1.5 within the ragged batches'; all cases together would have
    # called the first noise and the second a regression
    assert 1.3 < cmp.summary.noise.floor_ratio < 1.5
    assert cases[grid].verdict == "regressed"
    assert cases[ragged].verdict == "noisy" and "within run-to-run noise" in cases[ragged].reason
    assert "cold, ragged batch sigma" in render_text(cmp)


def _materialising(seed: int, moved: dict[str, float] | None = None) -> dict:
    """The warm prefills of CASES: naive's with 10% run-to-run noise (its scores placed anew by each process's
    malloc), sdpa's and flex's with 2%."""
    rng = random.Random(seed)
    recs = []
    for backend, seq, hkv in CASES:
        rec = make_record(backend=backend, seq=seq, n_kv_heads=hkv)
        sigma = 0.10 if backend == "naive" else 0.02
        m = 1e-3 * (seq / 256) * math.exp(rng.gauss(0, sigma)) * (moved or {}).get(rec["case_id"], 1.0)
        samples = [m * math.exp(rng.gauss(0, 0.01)) for _ in range(20)]
        recs.append(make_record(backend=backend, seq=seq, n_kv_heads=hkv, median_s=statistics.median(samples),
                                samples=samples, timing_mode="warm"))
    return make_run(recs, run_id=f"materialising-{seed}")


def test_a_materialising_kernels_warm_cases_have_their_own_noise():
    naive, tiled = (make_record(backend=b, seq=512, n_kv_heads=2)["case_id"] for b in ("naive", "sdpa"))
    cmp = compare_runs(_materialising(1), _materialising(2, {naive: 1.3, tiled: 1.3}))
    by_class = {c.name: c.sigma for c in cmp.summary.noise.classes}
    assert set(by_class) == {"warm", "warm, op-by-op kernel"}
    assert by_class["warm, op-by-op kernel"] > 2 * by_class["warm"]
    cases = {v.case_id: v for v in cmp.cases}
    # x1.3 is out of the tiled kernels' noise, and within naive's: one process's malloc, not the code
    assert cases[tiled].verdict == "regressed"
    assert cases[naive].verdict == "noisy" and "within run-to-run noise" in cases[naive].reason
    assert "warm op-by-op kernels' cases apart" in render_text(cmp)


def test_only_a_cpus_warm_cases_of_an_op_by_op_kernel_are_a_class_apart():
    def cls(**fields) -> str | None:
        return noise_class(as_run(make_run([make_record(**fields)])).entries()[0].record)
    assert cls(backend="naive", timing_mode="warm") == "warm, op-by-op kernel"
    assert cls(backend="sdpa-math", timing_mode="warm") == "warm, op-by-op kernel"
    assert cls(backend="hf-gdn", timing_mode="warm") == "warm, op-by-op kernel"  # a linear layer's torch path
    assert cls(backend="sdpa", timing_mode="warm") == "warm"
    assert cls(backend="naive", timing_mode="cold", phase="decode") == "cold"
    assert cls(backend="naive", timing_mode="warm", device="cuda") == "warm"


def test_a_ragged_batch_of_a_class_too_small_for_its_own_noise_is_judged_by_its_timing_mode_s():
    def few(doc: dict) -> dict:  # the 24 decode steps and the 6 ragged batches at KV 256
        kept = [b for b in doc["benchmarks"] if b["extra_info"]["batch"] == 1 or b["extra_info"]["seq_kv"] == 256]
        return dict(doc, benchmarks=kept)
    noise = compare_runs(few(_ragged(1)), few(_ragged(2))).summary.noise
    assert {name for name, *_ in noise.classes} == {"cold"}  # six ragged batches: too few for a sigma of their own
    assert noise.of("cold, ragged batch") == noise.of("cold") != (noise.center, noise.sigma)



def test_a_run_that_drifted_with_symmetric_noise_does_not_lean():
    # 5% slower as a whole, each case +-8% around that: unchanged code, so no group (counting only the cases past the
    # threshold from 0 as well once found 3 slower for every faster one here)
    rng = np.random.default_rng(0)
    x = math.log(1.05) + rng.normal(0, 0.08, 600)
    noise = noise_model(x, [True] * len(x), Rule())
    assert noise.group_shift == 0 and 0.7 < noise.n_slower / noise.n_faster < 1.4


def test_a_class_with_its_own_noise_leans_on_its_own():
    # the warm cases lean slower (a partial regression of them); the cold ones move as much both ways
    rng = np.random.default_rng(1)
    warm = np.concatenate([rng.normal(0, 0.03, 60), rng.normal(0.2, 0.01, 20)])
    cold = rng.normal(0, 0.08, 80)
    x = np.concatenate([warm, cold])
    noise = noise_model(x, [True] * len(x), Rule(), ["warm"] * len(warm) + ["cold"] * len(cold))
    leans = {c.name: c.group_shift for c in noise.classes}
    assert leans == {"warm": 1, "cold": 0}
    assert noise.group_of("warm")[1] == 1 and noise.group_of("cold")[1] == 0

def test_cases_timed_one_after_another_that_move_together_lean_as_one_stretch():
    # 320 cases in run order (ten stretches): twelve neighbours read x0.7 together (one stretch of the process's
    # state, as twelve sdpa-math prefills did in an A/A), the rest move +-4%; tested case by case they lean faster
    rng = np.random.default_rng(2)
    x = rng.normal(0, 0.04, 320)
    x[100:112] = math.log(0.7) + rng.normal(0, 0.03, 12)
    clean, pos = [True] * len(x), list(range(len(x)))
    assert noise_model(x, clean, Rule()).group_shift == -1
    assert noise_model(x, clean, Rule(), positions=pos).group_shift == 0
    # a change of every fourth case shows in every stretch: it still leans
    y = rng.normal(0, 0.04, 320)
    y[::4] += math.log(1.2)
    assert noise_model(y, clean, Rule(), positions=pos).group_shift == 1
    # 24 cases are one stretch: their test could never reach alpha, so they are tested case by case
    few = x[104:128]  # eight of them moved
    assert noise_model(few, clean[:24], Rule()).group_shift == -1
    assert noise_model(few, clean[:24], Rule(), positions=pos[:24]) == noise_model(few, clean[:24], Rule())


def test_a_case_timed_in_a_slow_spell_cannot_regress():
    # memory contention slows a decode step 2x while the GEMM probe slows only 1.25x: in GEMM units it still moved,
    # but its probe ran well under its run's usual speed, so its time says little about the code
    run = _probed(sweep(2, slowdown=2.0, slowed=lambda key: key in SPELL),
                  lambda key: 9e10 / 1.25 if key in SPELL else 9e10)
    cmp = compare_runs(_probed(sweep(1)), run)
    spell = {case_id(key) for key in SPELL}
    assert cmp.summary.exit_code == 0
    assert all(v.verdict == "noisy" and "slow spell of the host in the current run (its probe at 0.80" in v.reason
               for v in cmp.cases if v.case_id in spell)


def test_a_memory_regression_in_a_slow_spell_still_fails():
    run = _probed(sweep(2, slowdown=2.0, slowed=lambda key: key in SPELL),
                  lambda key: 9e10 / 1.25 if key in SPELL else 9e10)
    spell = {case_id(key) for key in SPELL}
    for entry in run["benchmarks"]:
        if entry["extra_info"]["case_id"] in spell:
            entry["extra_info"]["peak_mem_bytes"] *= 1.5  # memory needs no timing: a spell cannot explain it
    cmp = compare_runs(_probed(sweep(1)), run)
    assert {v.case_id for v in cmp.cases if v.verdict == "regressed"} == spell


def test_a_change_of_allocator_is_warned_about_and_an_unrecorded_thp_mode_is_not():
    from bench.regress.compare import allocator_warnings

    tuned = {"MALLOC_MMAP_THRESHOLD_": "4294967296"}
    base, cur = make_run(_recs(1)), make_run(_recs(2))
    base["machine_info"]["attnbench"]["allocator"] = dict(tuned)  # written before the THP variable and mode
    cur["machine_info"]["attnbench"]["allocator"] = {**tuned, "THP_MEM_ALLOC_ENABLE": "1",
                                                     "transparent_hugepage": "madvise"}
    warned = [w for w in compare_runs(base, cur).summary.warnings if "allocator differs" in w]
    assert warned == [allocator_warnings(base["machine_info"]["attnbench"]["allocator"],
                                         cur["machine_info"]["attnbench"]["allocator"])[0]]
    assert "THP_MEM_ALLOC_ENABLE unset (baseline) vs 1 (current)" in warned[0]
    assert "transparent_hugepage" not in warned[0]  # the baseline did not record the kernel's mode
    assert allocator_warnings({**tuned, "transparent_hugepage": "never"},
                              {**tuned, "transparent_hugepage": "madvise"}) != []
    assert allocator_warnings(tuned, dict(tuned)) == [] and allocator_warnings(None, tuned) == []
