"""The engine's session (bench.engine.session): `bench run` drives it directly — one plan per process, no pytest —
and every case's entry comes from bench.results.entry, with pytest-benchmark's own Stats of the measured rounds."""

from __future__ import annotations

import dataclasses

import pytest
from pytest_benchmark.stats import Stats

from bench.cli import build_parser, main
from bench.commands import run as run_cmd
from bench.engine import options
from bench.engine.runner import Runner
from bench.engine.session import Session
from bench.results import read_run
from bench.results.entry import Entry, case_entry, stats_entry
from bench.results.meta import Calibration
from bench.results.record import Record

TINY = ["run", "--backend", "naive,sdpa", "--heads", "2", "--kv-heads", "2", "--seq", "32", "--dtype", "fp32",
        "--mask", "causal", "--phase", "prefill", "--budget", "0.02", "--device", "cpu"]
CALIBRATION = Calibration.from_dict({"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10, "read_bytes_per_s": 1e10})


def test_bench_run_builds_its_plan_once_and_never_starts_pytest(tmp_path, monkeypatch, capsys):
    import pytest as pytest_module

    calls = []
    real_plan = options.plan
    monkeypatch.setattr(run_cmd.options, "plan", lambda *a, **k: calls.append(1) or real_plan(*a, **k))
    monkeypatch.setattr(pytest_module, "main", lambda *a, **k: pytest.fail("bench run started pytest"))
    monkeypatch.setattr("bench.measure.calibrate.calibrate", lambda device, dtypes=None: CALIBRATION)
    monkeypatch.setattr("bench.models.kvcache.measured_presets", lambda device: [])
    out = tmp_path / "r.json"
    assert main([*TINY, "--out", str(out)]) == 0
    assert len(calls) == 1
    doc = read_run(out)
    assert doc.meta.complete is True and len(doc.entries()) == 2
    printed = capsys.readouterr().out
    assert "2 cases (2 to run)" in printed and "== 2 cases: 2 ok" in printed


def test_an_entry_holds_pytest_benchmarks_own_statistics_of_the_rounds():
    samples = [3e-3, 1e-3, 2e-3, 5e-3, 4e-3]
    record = Record(case_id="x", status="ok", timer="perf_counter", phase="prefill", pass_="fwd")
    entry = case_entry(record, samples)
    stats = Stats()
    for s in samples:
        stats.update(s)
    assert entry.stats == stats_entry(stats) and entry.samples == tuple(samples)
    written = entry.to_dict()
    assert written["name"] == "test_attention[x]" and written["params"] == {"case": "x"}
    assert written["stats"]["data"] == samples and written["extra_info"] == record.to_dict()
    assert Entry.from_dict(written).to_dict() == written  # the file's layout round-trips
    assert case_entry(dataclasses.replace(record, status="unsupported")).to_dict()["stats"] is None


def test_a_session_records_each_case_whole_and_reports_a_failing_one(tmp_path, monkeypatch):
    monkeypatch.setattr("bench.measure.calibrate.calibrate", lambda device, dtypes=None: CALIBRATION)
    monkeypatch.setattr("bench.models.kvcache.measured_presets", lambda device: [])
    parsed = build_parser().parse_args([*TINY, "--out", str(tmp_path / "r.json")])
    plan = options.plan(options.RunRequest.from_args(parsed))
    lines: list[str] = []
    session = Session(plan, say=lines.append)
    real_run = Runner.run

    def broken_sdpa(self, case):  # one case errors: the run goes on and exits 1
        outcome = real_run(self, case)
        if case.backend == "sdpa":
            outcome.record = dataclasses.replace(outcome.record, status="error", reason="RuntimeError: injected")
            outcome.samples.clear()
        return outcome

    monkeypatch.setattr(Runner, "run", broken_sdpa)
    assert session.run() == 1
    doc = read_run(plan.out)
    statuses = sorted(e.status for e in doc.entries())
    assert statuses == ["error", "ok"] and doc.meta.complete is True
    assert sum(line.startswith("[") for line in lines) == 2  # one progress line per case
