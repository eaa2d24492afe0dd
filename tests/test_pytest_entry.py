"""The engine as a plain pytest plugin: `python -m pytest --pyargs bench.suite --attn-...` runs the same cases as
`bench run`, and pytest-benchmark's own files are attnbench results files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import build_parser
from bench.engine import options, sweeps
from bench.measure.calibrate import REUSE_ENV
from bench.results import read_run

REPO = Path(__file__).resolve().parents[1]
AXES = ["--profile", "quick", "--backend", "naive,sdpa-flash", "--kv-heads", "8,1", "--seq", "32",
        "--phase", "prefill", "--budget", "0.05", "--device", "cpu"]


def attn(args: list[str]) -> list[str]:
    """bench run's flags as the plugin's: --seq 32 -> --attn-seq=32."""
    out, it = [], iter(args)
    for flag in it:
        out.append(f"--attn-{flag[2:]}={next(it)}")
    return out


def pytest_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "KINETO_LOG_LEVEL": "5", "PATH": "/usr/bin:/bin",
           **{k: os.environ[k] for k in (REUSE_ENV, "OMP_NUM_THREADS") if k in os.environ}}  # tests/conftest.py
    return subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "bench.suite", "-p", "bench.suite.plugin",
                           "-p", "no:cacheprovider", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_every_axis_and_run_option_has_both_flags():
    run_flags = build_parser()._subparsers._group_actions[0].choices["run"]._option_string_actions
    for f in sweeps.axis_fields():
        assert f"--{f.metadata['flag']}" in run_flags
    for o in options.RUN_OPTIONS:
        assert f"--{o.flag}" in run_flags
    help_text = pytest_run(["--help"], REPO).stdout
    attn_flags = set(re.findall(r"--attn-[a-z-]+", help_text))
    assert {f"--attn-{f.metadata['flag']}" for f in sweeps.axis_fields()} <= attn_flags
    assert {"--attn-profile", "--attn-backend", "--attn-heads", "--attn-kv-heads", "--attn-seq", "--attn-dtype",
            "--attn-mask", "--attn-phase", "--attn-pass", "--attn-device"} <= attn_flags


def test_a_requests_command_line_round_trips_through_plan():
    request = options.RunRequest(profile="quick", device="cpu", axes={"seqs": (32, 64), "backends": ("naive",)})
    flags = request.command_line()
    assert flags == ["--profile=quick", "--device=cpu", "--backend=naive", "--seq=32,64"]
    again = options.RunRequest.from_args(build_parser().parse_args(["run", *flags]))
    assert options.plan(again, default_out=False).cases == options.plan(request, default_out=False).cases
    assert request.command_line(drop=("device",)) == ["--profile=quick", "--backend=naive", "--seq=32,64"]


@pytest.mark.slow  # runs a small sweep in a fresh pytest process
def test_pytest_entry_writes_an_attnbench_results_file(tmp_path):
    out = tmp_path / "OUT.json"
    proc = pytest_run([*attn(AXES), f"--benchmark-json={out}", "-q"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = read_run(out)  # validates it as ours: schema, records, untimed
    parsed = build_parser().parse_args(["run", *AXES])
    cases = options.plan(options.RunRequest.from_args(parsed), default_out=False).cases
    assert sorted(doc.case_ids()) == sorted(c.id for c in cases)  # the same cases as `bench run`
    assert doc.meta.complete is True and doc.meta.sweep_id == sweeps.sweep_id(cases)
    assert doc.meta.calibration.gemm_flops_per_s > 0 and doc.environment["device"] == "cpu"
    for entry in doc.benchmarks:  # pytest-benchmark's statistics are of the rounds our timer measured
        assert entry.stats["median"] == pytest.approx(entry.record.median_s, rel=1e-9)
        assert entry.to_dict()["params"] == {"case": entry.case_id}

    # bench report and bench compare accept it
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    report = subprocess.run([sys.executable, "-m", "bench", "report", str(out), "--out", str(tmp_path / "r")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r" / "index.html").exists()
    compare = subprocess.run([sys.executable, "-m", "bench", "compare", str(out), str(out), "--format", "json"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert compare.returncode == 0, compare.stderr
    assert json.loads(compare.stdout)["n_matched"] == len(cases)

    # pytest-benchmark's own regression gate works against it
    again = pytest_run([*attn(AXES), f"--benchmark-compare={out}", "--benchmark-compare-fail=median:100000%",
                        "-q", "-k", "naive"], tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "Comparing against benchmarks from" in again.stdout + again.stderr


@pytest.mark.slow
def test_k_selects_cases_and_the_file_says_it_is_partial(tmp_path):
    out = tmp_path / "r.json"
    proc = pytest_run([*attn(AXES), f"--attn-out={out}", "-k", "mqa and naive", "-q"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = read_run(out)
    assert doc.case_ids() == ["naive/mqa/b1-hq8-hkv1-q32-kv32-d64/fp32/causal/prefill/fwd/cpu"]
    assert doc.meta.complete is False  # the file does not cover its sweep


def test_bad_attn_option_is_a_usage_error(tmp_path):
    proc = pytest_run(["--attn-profile=huge"], tmp_path)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "unknown profile 'huge'" in proc.stderr


def test_without_attn_options_the_suite_runs_nothing(tmp_path):
    proc = pytest_run(["-q"], tmp_path)
    assert proc.returncode in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), proc.stdout + proc.stderr
    assert "passed" not in proc.stdout
