"""Sweep specs (bench.engine.sweeps) and `python -m bench run`: results file, bad input, interrupt and resume."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.backends import get_backend
from bench.cli import build_parser, main
from bench.commands import run as run_cmd
from bench.engine import options, sweeps
from bench.errors import InputError
from bench.results import entries, read_run, write_atomic
from tests.results_factory import make_record, make_run
from tests.shared import once

REPO = Path(__file__).resolve().parents[1]


# --- spec: profiles, cases, ids, shards ------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", ["quick", "default", "heads", "decode", "serving", "full"])
def test_profiles_expand_with_unique_stable_ids(device, name):
    sweep = sweeps.profile(name, device)
    first = sweeps.cases(sweep, device)
    again = sweeps.cases(sweep, device)
    assert first, f"{name} on {device} has no cases"
    ids = [c.id for c in first]
    assert len(set(ids)) == len(ids)
    assert ids == [c.id for c in again]
    assert sweeps.sweep_id(first) == sweeps.sweep_id(again)
    assert {c.device for c in first} == {device}
    # every backend of the sweep has cases, but one that runs only sparse attention in a sweep without any
    dense_capable = {b for b in sweep.backends if get_backend(b).dense}
    assert dense_capable <= {c.backend for c in first} <= set().union(*(p.backends for p in sweeps.parts(sweep)))
    for c in first:
        assert c.id.endswith(f"/{c.phase}/{c.pass_}/{device}")


def test_case_id_format():
    c = sweeps.cases(sweeps.Sweep(backends=("naive",), kv_heads=(2,), seqs=(128,), phases=("prefill",)), "cpu")[0]
    assert c.id == "naive/gqa/b1-hq8-hkv2-q128-kv128-d64/fp32/causal/prefill/fwd/cpu"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_decode_cases(device):
    sweep = sweeps.profile("decode", device)
    cases = sweeps.cases(sweep, device)
    assert {c.phase for c in cases} == {"decode"}
    assert {c.shape.seq_q for c in cases} == set(sweep.decode_q)
    assert {c.shape.seq_kv for c in cases} == set(sweep.decode_kv)
    assert {c.pass_ for c in cases} == {"fwd"}
    assert all(c.shape.causal for c in cases)


def test_full_profile_decode_uses_decode_axes_and_only_fwd():
    sweep = sweeps.profile("full", "cpu")
    decode = [c for c in sweeps.cases(sweep, "cpu") if c.phase == "decode"]
    assert decode
    assert {c.shape.seq_q for c in decode} <= set(sweep.decode_q)
    assert {c.pass_ for c in decode} == {"fwd"}  # even though the full profile lists fwd+bwd
    assert "none" not in {c.shape.mask for c in decode}  # decoding is causal


@pytest.mark.parametrize("device, d_model", [("cpu", 512), ("cuda", 2048)])
def test_heads_profile_splits_d_model(device, d_model):
    cases = sweeps.cases(sweeps.profile("heads", device), device)
    heads = {c.shape.n_heads for c in cases}
    assert heads == {1, 2, 4, 8, 16, 32}
    for c in cases:
        assert c.shape.head_dim * c.shape.n_heads == d_model
        assert c.shape.n_kv_heads == c.shape.n_heads  # MHA only


def test_tokens_per_batch_sets_batch():
    cases = sweeps.cases(sweeps.profile("default", "cuda"), "cuda")
    for c in cases:
        if c.phase == "prefill" and c.shape.serving is None:  # a replayed trace's batch is the trace's own
            assert c.shape.batch * c.shape.seq_q == 16384


def test_unknown_profile_and_backend():
    with pytest.raises(InputError, match="unknown profile 'huge'"):
        sweeps.profile("huge", "cpu")
    with pytest.raises(InputError, match="unknown backend 'turbo'"):
        sweeps.Sweep(backends=("naive", "turbo"))


def test_decode_only_with_no_mask_is_refused():
    with pytest.raises(InputError, match="decode needs a causal or window mask"):
        sweeps.cases(sweeps.Sweep(masks=("none",), phases=("decode",)), "cpu")


def test_repeated_axis_values_are_refused():
    with pytest.raises(InputError, match="same case twice"):
        sweeps.cases(sweeps.Sweep(backends=("naive",), seqs=(256, 256)), "cpu")


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_shards_partition_the_cases(n):
    cases = sweeps.cases(sweeps.profile("quick", "cpu"), "cpu")
    shards = [sweeps.shard(cases, f"{k}/{n}") for k in range(1, n + 1)]
    ids = [c.id for s in shards for c in s]
    assert len(ids) == len(set(ids)) == len(cases)  # disjoint, and together all
    assert set(ids) == {c.id for c in cases}
    assert [sweeps.shard(cases, f"{k}/{n}") for k in range(1, n + 1)] == shards  # deterministic
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1  # balanced


@pytest.mark.parametrize("bad", ["0/3", "4/3", "a/b", "1/0", "3", "1/2/3", ""])
def test_shard_rejects_bad_specs(bad):
    cases = sweeps.cases(sweeps.profile("quick", "cpu"), "cpu")
    with pytest.raises(InputError, match="--shard"):
        sweeps.shard(cases, bad)


def test_sweep_id_follows_the_case_list():
    cases = sweeps.cases(sweeps.profile("quick", "cpu"), "cpu")
    sid = sweeps.sweep_id(cases)
    assert re.fullmatch(r"[0-9a-f]{16}", sid)
    assert sweeps.sweep_id(list(cases)) == sid
    assert sweeps.sweep_id(cases[:-1]) != sid
    assert sweeps.sweep_id(cases[::-1]) != sid
    assert sweeps.sweep_id(sweeps.shard(cases, "1/2")) != sweeps.sweep_id(sweeps.shard(cases, "2/2"))
    other = sweeps.cases(sweeps.profile("quick", "cpu").with_axes(seqs=(256, 1024)), "cpu")
    assert sweeps.sweep_id(other) != sid
    # the budget is not part of the case list: changing it keeps the sweep (resume may change it)
    assert sweeps.sweep_id(sweeps.cases(sweeps.profile("quick", "cpu").with_axes(case_budget_s=0.1), "cpu")) == sid


# --- `python -m bench run` in a fresh process ----------------------------------------------------------

SWEEP_ARGS = ["--profile", "quick", "--backend", "naive,sdpa-flash,sdpa-efficient", "--kv-heads", "8,1",
              "--seq", "32", "--phase", "prefill", "--budget", "0.05", "--device", "cpu"]


# pytest-benchmark's console script, run with this interpreter (`python -m pytest_benchmark.cli` does nothing)
COMPARE = [sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.exit(main())", "compare"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(REPO)
    env["KINETO_LOG_LEVEL"] = "5"
    return env


def bench_run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", "run", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def expected_cases(args: list[str]) -> list[sweeps.Case]:
    """The cases `bench run <args>` sweeps, computed in this process from the same parser and plan."""
    parsed = build_parser().parse_args(["run", *args])
    return options.plan(options.RunRequest.from_args(parsed), default_out=False).cases


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One tiny sweep: 2 backends that run on CPU and one that does not, MHA and MQA, S = 32. Run once per test
    run (tests/shared.py); the tests only read it."""
    def run(cwd: Path) -> dict:
        proc = bench_run([*SWEEP_ARGS, "--out", "tmp/r.json"], cwd)
        return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    cwd, proc = once(tmp_path_factory, "run-cli-sweep", run)
    return subprocess.CompletedProcess(SWEEP_ARGS, **proc), cwd / "tmp" / "r.json"


@pytest.mark.slow  # runs a sweep
def test_sweep_writes_a_complete_results_file(sweep):
    proc, out = sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = read_run(out)
    cases = expected_cases(SWEEP_ARGS)
    assert len(cases) == 6
    ids = [b.case_id for b in entries(doc)]
    assert sorted(ids) == sorted(c.id for c in cases)
    assert len(set(ids)) == len(ids)
    meta = doc.meta
    assert meta.complete is True
    assert meta.sweep_id == sweeps.sweep_id(cases)
    assert meta.cases == 6 and meta.profile == "quick"
    assert meta.calibration.gemm_flops_per_s > 1e8 and meta.calibration.copy_bytes_per_s > 1e8
    assert meta.fingerprint["device"] == "cpu"
    assert doc.environment["device"] == "cpu"
    assert doc.environment["profile"] == "quick"
    assert "allocator" in doc.environment
    for b in (e.to_dict() for e in entries(doc)):  # the file's layout: pytest-benchmark's, our record in extra_info
        rec = b["extra_info"]
        assert b["params"] == {"case": rec["case_id"]}
        if rec["backend"] == "sdpa-efficient":
            assert rec["status"] == "unsupported" and "CUDA" in rec["reason"]
            assert b["stats"] is None
        else:
            assert rec["status"] == "ok", rec["reason"]
            data = b["stats"]["data"]
            assert data and len(data) == rec["rounds"] == b["stats"]["rounds"]
            # pytest-benchmark's statistics are of the very rounds the engine measured
            assert b["stats"]["median"] == pytest.approx(rec["median_s"], rel=1e-9)
            assert rec["ci_low_s"] <= rec["median_s"] <= rec["ci_high_s"]
            assert rec["max_abs_err"] < 1e-4
    assert "6 cases (6 to run)" in proc.stdout


@pytest.mark.slow
def test_pytest_benchmark_compare_reads_the_results_file(sweep, tmp_path):
    _, out = sweep
    proc = subprocess.run([*COMPARE, str(out)], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Failed to load" not in proc.stderr, proc.stderr
    assert "naive/mqa/b1-hq8-hkv1-q32-kv32-d64/fp32/causal/prefill/fwd/cpu" in proc.stdout


@pytest.mark.slow
def test_results_file_has_umask_permissions(sweep):
    _, out = sweep
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


@pytest.mark.slow  # runs a sweep
def test_resume_of_a_complete_file_runs_nothing(sweep, tmp_path):
    _, out = sweep
    copy = tmp_path / "r.json"
    copy.write_text(out.read_text())
    before = read_run(copy)
    proc = bench_run([*SWEEP_ARGS, "--out", str(copy), "--resume"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "6 cases (0 to run)" in proc.stdout
    after = read_run(copy)
    assert entries(after) == entries(before)
    assert after.meta.complete is True


def test_bad_input_in_a_fresh_process_is_one_error_line(tmp_path):
    proc = bench_run(["--profile", "huge", "--out", "r.json"], tmp_path, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown profile 'huge'"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r.json").exists()


# In-process: bad input must be refused before any work, so the engine's session never runs.

@pytest.fixture
def no_work(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the sweep started despite bad input")

    monkeypatch.setattr(run_cmd.Session, "run", refuse)


BASE = ["run", "--profile", "quick", "--backend", "naive", "--kv-heads", "8", "--seq", "32", "--phase", "prefill",
        "--device", "cpu"]


def other_sweep(tmp_path: Path) -> Path:
    path = tmp_path / "other.json"
    write_atomic(path, make_run([make_record()]))  # sweep_id "synthetic"
    return path


@pytest.mark.parametrize("extra, message", [
    (["--profile", "huge"], "unknown profile 'huge'"),
    (["--backend", "naive,turbo"], "unknown backend 'turbo'"),
    (["--dtype", "fp64"], "unknown dtype 'fp64'"),
    (["--heads", "8", "--kv-heads", "3"], "n_heads=8 is not divisible by n_kv_heads=3"),
    (["--shard", "5/4"], "--shard 5/4"),
    (["--out", "/proc/x/r.json"], "cannot write results to /proc/x/r.json"),
    (["--out", "{tmp}/exists.json"], "exists; pass --resume"),
    (["--out", "{other}", "--resume"], "is from another sweep"),
    (["--out", "{tmp}/missing.json", "--resume"], "no such file"),
    (["--resume"], "--resume needs --out"),
    (["--mask", "window:0"], "window=0"),
    (["--mask", "diagonal"], "unknown mask"),
    (["--phase", "train"], "unknown phase"),
    (["--pass", "bwd"], "unknown pass"),
    (["--budget", "0"], "must be positive"),
    (["--threads", "0"], "at least 1"),
    (["--seq", "0"], "seq_q=0 must be a positive integer"),
    (["--heads", "8", "--kv-heads", "16"], "n_kv_heads=16 exceeds n_heads=8"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_bad_input_exits_2_before_any_work(tmp_path, capsys, no_work, extra, message):
    (tmp_path / "exists.json").write_text("{}")
    other = other_sweep(tmp_path)
    extra = [x.format(tmp=tmp_path, other=other) for x in extra]
    out = tmp_path / "r.json"
    argv = [*BASE, *extra]
    if "--out" not in extra and "--resume" not in extra:
        argv += ["--out", str(out)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and message in lines[0], err
    assert not out.exists()
    assert json.loads((tmp_path / "exists.json").read_text()) == {}  # nothing overwritten


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_cuda_is_refused(tmp_path, capsys, no_work):
    assert main([*BASE, "--device", "cuda", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device cuda: torch sees no CUDA device") and err.count("\n") == 1


def test_list_prints_the_case_ids(tmp_path, capsys, no_work):
    out = tmp_path / "r.json"
    args = ["--profile", "quick", "--backend", "naive,sdpa-flash", "--device", "cpu"]
    assert main(["run", *args, "--out", str(out), "--list"]) == 0
    printed = capsys.readouterr().out.split()
    cases = expected_cases(args)
    assert printed == [c.id for c in cases]
    assert len(cases) == 2 * 3 * 3  # 2 backends x MHA/GQA/MQA x (2 prefill lengths + 1 decode)
    assert not out.exists()


def test_list_with_shard(capsys, no_work):
    args = ["--profile", "quick", "--device", "cpu"]
    assert main(["run", *args, "--shard", "2/3", "--list"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [c.id for c in sweeps.shard(expected_cases(args), "2/3")]


# --- interrupted, then resumed -------------------------------------------------------------------------

INTERRUPT_ARGS = ["--profile", "quick", "--backend", "naive,sdpa-math,sdpa-flash", "--kv-heads", "8,1",
                  "--seq", "64,128", "--phase", "prefill", "--budget", "0.1", "--device", "cpu"]
PROGRESS = re.compile(r"^\[\d+/\d+ eta [^\]]*\] (\S+)  ", re.M)


def _count(path: Path) -> int:
    try:
        return len(read_run(path).entries())  # the journal's cases while the run is going
    except InputError:
        return 0


def interrupt(args: list[str], out: Path, cwd: Path, sig: signal.Signals, after: int) -> tuple[int, str, str]:
    """Start `bench run`, send `sig` once the results file holds `after` cases; (returncode, stdout, stderr)."""
    # SIG_DFL in the child: a shell may have started us with SIGINT ignored, which Python would inherit
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", *args, "--out", str(out)], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while _count(out) < after:
            assert proc.poll() is None, "the run ended before it could be interrupted"
            assert time.monotonic() < deadline, f"no {after} cases finished in time"
            time.sleep(0.01)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, stdout, stderr


@pytest.mark.slow  # runs a sweep
def test_interrupted_run_keeps_finished_cases_and_resumes(tmp_path):
    """SIGINT a fresh run, SIGKILL its resumption, resume again: nothing lost, nothing run twice."""
    out = tmp_path / "r.json"
    cases = expected_cases(INTERRUPT_ARGS)
    all_ids = {c.id for c in cases}
    total = len(cases)
    assert total == 12

    # 1. Ctrl-C: the run stops cleanly, the file says incomplete, exit code 130
    code, stdout, stderr = interrupt(INTERRUPT_ARGS, out, tmp_path, signal.SIGINT, after=2)
    assert code == 130, stderr[-2000:]
    first = read_run(out)  # still valid JSON in the engine's format
    assert first.meta.complete is False
    done = [b.case_id for b in entries(first)]
    assert 2 <= len(done) <= total - 4, "interrupted too late to test anything"
    assert len(set(done)) == len(done) and set(done) <= all_ids
    reported = PROGRESS.findall(stdout)
    assert reported and set(reported) <= set(done)  # every case reported finished is in the file
    assert len(done) - len(reported) <= 1  # at most one saved between its write and its progress line
    assert not list(tmp_path.glob(".r.json.*.tmp"))  # a clean stop leaves no temporary file behind
    assert "Traceback" not in stderr, stderr[-3000:]  # one line, no traceback, whatever the moment
    assert stderr.strip().splitlines()[-1].startswith(
        f"interrupted: {len(done)} of {total} cases kept in {out}; resume with: python -m bench run")

    # 2. resume, then kill -9 mid-way: whatever was written is still a valid, incomplete file
    code, stdout, stderr = interrupt([*INTERRUPT_ARGS, "--resume"], out, tmp_path, signal.SIGKILL,
                                     after=len(done) + 2)
    assert code == -signal.SIGKILL
    assert f"{total} cases ({total - len(done)} to run)" in stdout
    second = read_run(out)
    assert second.meta.complete is False
    done2 = [b.case_id for b in entries(second)]
    assert len(done) + 2 <= len(done2) < total, "killed too late to test anything"
    assert len(set(done2)) == len(done2) and set(done2) <= all_ids
    assert entries(second)[:len(done)] == entries(first)

    # 3. resume to the end
    resumed = bench_run([*INTERRUPT_ARGS, "--out", str(out), "--resume"], tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"{total} cases ({total - len(done2)} to run)" in resumed.stdout
    assert set(PROGRESS.findall(resumed.stdout)) == all_ids - set(done2)  # nothing run twice

    final = read_run(out)
    ids = [b.case_id for b in entries(final)]
    assert len(ids) == len(set(ids)) == total
    assert set(ids) == all_ids
    assert final.meta.complete is True
    assert entries(final)[:len(done2)] == entries(second)  # the earlier entries, unchanged
    assert final.machine_info == first.machine_info
    assert final.meta.calibration == first.meta.calibration
    assert final.meta.sweep_id == first.meta.sweep_id


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_default_profile_carries_a_heads_sweep_for_the_heads_claim(device):
    cases = sweeps.cases(sweeps.profile("default", device), device)
    by_d_model: dict[tuple, set[int]] = {}
    for c in cases:
        s = c.shape
        if c.phase == "prefill" and s.variant == "mha":
            by_d_model.setdefault((c.backend, s.n_heads * s.head_dim, s.seq_kv, s.dtype, s.mask), set()).add(s.n_heads)
    assert max(len(h) for h in by_d_model.values()) >= 3  # what the claim needs: >= 3 head counts at one d_model
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))  # the parts' shared cases are swept once


def test_axes_set_by_hand_drop_the_profiles_extra_sweeps():
    default = sweeps.profile("default", "cpu")
    assert default.also
    assert not default.with_axes(seqs=(256,)).also
    assert default.with_axes(case_budget_s=0.1).also  # the budget changes no case
