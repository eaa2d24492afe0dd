"""Baselines are results files that pytest-benchmark's own `compare` opens (its console script, a fresh process).

A pooled baseline's entries carry pytest-benchmark's statistics of the pooled rounds (pytest_benchmark.stats.Stats),
exactly its keys: a hand-made stats dict without 'outliers' crashed `pytest-benchmark compare` with a KeyError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pytest_benchmark.stats import Stats

from bench.measure.stats import summarize
from bench.regress import baseline
from tests.results_factory import make_record, make_run

REPO = Path(__file__).resolve().parents[1]

# pytest-benchmark's console script `pytest-benchmark compare`, run with this interpreter
COMPARE = [sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.exit(main())", "compare"]

# pytest-benchmark's stats keys as its Metadata.as_dict(include_data=True) writes them
PYTEST_BENCHMARK_STATS_KEYS = set(Stats.fields) | {"data", "iterations"}

CASES = [("sdpa", 256, 8), ("sdpa", 512, 2), ("naive", 256, 8), ("naive", 512, 2)]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(REPO)
    env["KINETO_LOG_LEVEL"] = "5"
    return env


def _compare(*paths: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*COMPARE, *map(str, paths)], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=120)


def _pytest_benchmark_stats(samples: list[float], iterations: int = 1) -> dict:
    stats = Stats()
    for s in samples:
        stats.update(s)
    return stats.as_dict() | {"data": list(samples), "iterations": iterations}


def _pass(seed: int) -> dict:
    """One synthetic run whose timed entries carry the stats pytest-benchmark writes (the engine's plugin does;
    results_factory fills only the keys our readers use)."""
    recs = [make_record(backend=b, seq=s, n_kv_heads=h, median_s=1e-4 * s / 256, seed=seed, rounds=15 + seed)
            for b, s, h in CASES]
    recs.append(make_record(backend="flex", seq=256, status="unsupported"))  # untimed: kept apart
    doc = make_run(recs, run_id=f"pass-{seed}")
    for entry in doc["benchmarks"]:
        entry["stats"] = _pytest_benchmark_stats(entry["stats"]["data"])
    return doc


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _case_ids(path: Path) -> list[str]:
    return [e["extra_info"]["case_id"] for e in json.loads(path.read_text())["benchmarks"]]


def _assert_compare_lists(proc: subprocess.CompletedProcess, case_ids: list[str]) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Failed to load" not in proc.stderr, proc.stderr[-3000:]
    for cid in case_ids:
        assert f"test_attention[{cid}]" in proc.stdout, (cid, proc.stdout[-3000:])


def test_pooled_entry_has_exactly_pytest_benchmarks_stats():
    passes = [_pass(seed) for seed in (1, 2, 3)]
    pooled = baseline.merge_passes(passes)
    pooled = pooled.to_dict() if hasattr(pooled, "to_dict") else pooled
    assert len(pooled["benchmarks"]) == len(CASES)
    for entry in pooled["benchmarks"]:
        cid = entry["extra_info"]["case_id"]
        per_pass = [next(e for e in p["benchmarks"] if e["extra_info"]["case_id"] == cid) for p in passes]
        samples = [s for e in per_pass for s in e["stats"]["data"]]
        stats, info = entry["stats"], entry["extra_info"]
        assert set(stats) == PYTEST_BENCHMARK_STATS_KEYS
        assert stats == _pytest_benchmark_stats(samples)  # pytest-benchmark's numbers, rounds in pass order
        assert stats["rounds"] == info["rounds"] == 16 + 17 + 18
        assert info["median_s"] == stats["median"]
        # the record's IQR is pytest-benchmark's, and the one summarize() gives a plain run's record
        assert info["iqr_s"] == stats["iqr"] == pytest.approx(summarize(samples).iqr, rel=1e-9)
        assert info["pass_rounds"] == [16, 17, 18]
        assert len(info["pass_gemm"]) == 3
        assert "pass_medians_s" not in info  # read by nothing; no longer written
    untimed = pooled["attnbench"]["untimed"]
    assert [e["extra_info"]["status"] for e in untimed] == ["unsupported"] and untimed[0]["stats"] is None


def test_pytest_benchmark_compare_opens_a_pooled_baseline_and_a_run(tmp_path):
    paths = [_write(tmp_path / f"p{seed}.json", _pass(seed)) for seed in (1, 2, 3)]
    saved = baseline.save(paths, tmp_path / "baselines")
    case_ids = _case_ids(saved)
    assert sorted(case_ids) == sorted(_case_ids(paths[0])) and len(case_ids) == len(CASES)
    proc = _compare(saved, paths[0], cwd=tmp_path)
    _assert_compare_lists(proc, case_ids)
    assert proc.stdout.count("test_attention[") >= 2 * len(CASES)  # both files' rows


def test_pytest_benchmark_compare_opens_a_one_pass_baseline(tmp_path):
    run = _write(tmp_path / "r.json", _pass(4))
    saved = baseline.save([run], tmp_path / "baselines")
    _assert_compare_lists(_compare(saved, run, cwd=tmp_path), _case_ids(run))


# --- the real thing: two tiny sweeps, pooled with `bench baseline save` ------------------------------------------

SWEEP_ARGS = ["--profile", "quick", "--backend", "naive,sdpa", "--kv-heads", "8", "--seq", "32", "--phase", "prefill",
              "--budget", "0.05", "--device", "cpu"]


@pytest.mark.slow  # runs a sweep
def test_pytest_benchmark_compare_opens_a_baseline_pooled_from_real_runs(tmp_path):
    """A real results file, pooled with a copy of itself (two passes of one machine as far as pooling can tell)."""
    proc = subprocess.run([sys.executable, "-m", "bench", "run", *SWEEP_ARGS, "--out", "a.json"], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [tmp_path / "a.json", tmp_path / "b.json"]
    runs[1].write_text(runs[0].read_text())
    proc = subprocess.run([sys.executable, "-m", "bench", "baseline", "save", *map(str, runs), "--dir", "bl"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (saved,) = (tmp_path / "bl").glob("*.json")
    doc = json.loads(saved.read_text())
    assert doc["attnbench"]["baseline"]["passes"] == 2
    assert doc["benchmarks"] and all(set(e["stats"]) == PYTEST_BENCHMARK_STATS_KEYS for e in doc["benchmarks"])
    for entry in doc["benchmarks"]:
        n = entry["extra_info"]["pass_rounds"][0]
        assert entry["extra_info"]["pass_rounds"] == [n, n] and entry["stats"]["rounds"] == 2 * n
    case_ids = _case_ids(saved)
    assert sorted(case_ids) == sorted(_case_ids(runs[0]))
    _assert_compare_lists(_compare(saved, runs[0], cwd=tmp_path), case_ids)


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "results").rglob("*.json")),
                         ids=lambda p: p.name)
def test_every_committed_results_file_opens_in_pytest_benchmark_compare(path, tmp_path):
    proc = subprocess.run([*COMPARE, str(path)], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=300)  # not in the repository: pytest-benchmark leaves a .benchmarks folder
    _assert_compare_lists(proc, _case_ids(path)[:3])
