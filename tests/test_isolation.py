"""Cases that hang, crash, abort, exit or exhaust memory on purpose (bench.engine.isolate): each ends as its own
status with its reason, a fresh worker takes the next case, nothing finished is lost, and the run exits 1.

The misbehaving backends are registered by a sitecustomize module on PYTHONPATH, so that both `bench run` and its
worker process know them, exactly as a backend shipped by another package would be."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench.results import read_run
from bench.results.meta import Calibration

REPO = Path(__file__).resolve().parents[1]

SITECUSTOMIZE = '''
import ctypes, os, time

import bench.backends as registry
from bench.backends.base import Backend
from bench.backends.naive import naive_attention


def hang(q, k, v, *, causal, window):
    time.sleep(3600)


def segfault(q, k, v, *, causal, window):
    ctypes.string_at(0)


def aborts(q, k, v, *, causal, window):
    os.abort()


def exits(q, k, v, *, causal, window):
    os._exit(3)


def hungry(q, k, v, *, causal, window):
    import torch
    return torch.empty(1 << 62, dtype=torch.uint8)  # more than any machine: the allocator refuses


for fn in (hang, segfault, aborts, exits, hungry):
    registry.BACKENDS[fn.__name__] = Backend(fn.__name__, fn, "misbehaves on purpose (tests)", "tiled", "#000000",
                                             "o", devices=("cpu",), dtypes=("fp32",))
'''

CALIBRATION = Calibration.from_dict({"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10, "read_bytes_per_s": 1e10})
# The hang waits this out. Small, as the test waits it out, but with room for the cases that must finish: the limit
# covers a case's check and timing, not its worker's start (naive and sdpa at S=32 take well under a second).
CASE_TIMEOUT_S = 3
ARGS = ["--heads", "2", "--kv-heads", "2", "--seq", "32", "--dtype", "fp32", "--mask", "causal", "--phase",
        "prefill", "--budget", "0.02", "--device", "cpu"]


def bench_run(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=f"{site}{os.pathsep}{REPO}", KINETO_LOG_LEVEL="5")
    return subprocess.run([sys.executable, "-m", "bench", "run", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # waits out the hang's time limit (not serial: it times nothing, and the limit leaves room)
def test_hanging_and_crashing_cases_end_with_their_status_and_the_run_goes_on(tmp_path):
    out = tmp_path / "r.json"
    t0 = time.monotonic()
    proc = bench_run(tmp_path, "--backend", "naive,hang,segfault,aborts,exits,hungry,sdpa", *ARGS,
                     "--case-timeout", f"{CASE_TIMEOUT_S}s", "--out", str(out))
    wall = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-3000:]
    by_backend = {e.record.backend: e.record for e in read_run(out).entries()}
    assert set(by_backend) == {"naive", "hang", "segfault", "aborts", "exits", "hungry", "sdpa"}
    assert by_backend["naive"].status == by_backend["sdpa"].status == "ok"  # before and after the wreckage
    assert by_backend["hang"].status == "timeout" and f"{CASE_TIMEOUT_S} s" in by_backend["hang"].reason
    assert by_backend["segfault"].status == "crashed" and "SIGSEGV" in by_backend["segfault"].reason
    assert by_backend["aborts"].status == "crashed" and "SIGABRT" in by_backend["aborts"].reason
    assert by_backend["exits"].status == "crashed" and "exited with code 3" in by_backend["exits"].reason
    assert by_backend["hungry"].status == "oom", by_backend["hungry"].reason
    assert all(r.predicted_s > 0 and r.wall_s >= 0 for r in by_backend.values())
    assert wall < 300, f"the sweep took {wall:.0f} s"
    assert "CRASHED" in proc.stdout and "TIMEOUT" in proc.stdout


def test_a_time_budget_skips_what_does_not_fit_and_keeps_every_familys_small_shapes(tmp_path, monkeypatch):
    from bench.cli import build_parser
    from bench.engine import options, session

    monkeypatch.setattr("bench.measure.calibrate.calibrate", lambda device, dtypes=None: CALIBRATION)
    monkeypatch.setattr("bench.models.kvcache.measured_presets", lambda device: [])
    # the cost model says the long shapes take 100 s each: with 60 s to spend, only the short ones fit
    monkeypatch.setattr("bench.plan.cost.predict", lambda case, *a, **k: 100.0 if case.shape.seq_q > 32 else 0.01)
    args = build_parser().parse_args(["run", "--backend", "naive,sdpa", *ARGS[:2], "--kv-heads", "2,1", "--seq",
                                      "32,48,64", *ARGS[6:], "--time-budget", "60s", "--out", str(tmp_path / "r.json")])
    plan = options.plan(options.RunRequest.from_args(args))
    lines: list[str] = []
    assert session.Session(plan, say=lines.append).run() == 0
    records = [e.record for e in read_run(plan.out).entries()]
    ran = {(r.backend, r.shape.variant, r.shape.seq_q) for r in records if r.status == "ok"}
    assert ran == {(b, v, 32) for b in ("naive", "sdpa") for v in ("mha", "mqa")}  # every family's smallest
    skipped = [r for r in records if r.status == "skipped"]
    assert len(skipped) == 8 and all("over the 60 s time budget" in r.reason for r in skipped)
    assert all(r.predicted_s == 100.0 for r in skipped)
    assert read_run(plan.out).meta.complete is True  # every case has its record, skipped ones included


def test_cases_run_family_by_family_from_the_cheapest():
    from bench.engine.budget import TimeBudget, priority_order
    from bench.engine.sweeps import Sweep, cases
    from bench.problem.case import family_key

    sweep = Sweep(backends=("naive", "sdpa"), heads=(2,), kv_heads=(2,), seqs=(64, 32, 128), case_budget_s=0.1)
    all_cases = cases(sweep, "cpu")
    predicted = {c.id: float(c.shape.seq_q) for c in all_cases}
    order = priority_order(all_cases, predicted)
    assert [(c.backend, c.shape.seq_q) for c in order] == [("naive", 32), ("sdpa", 32), ("naive", 64),
                                                           ("sdpa", 64), ("naive", 128), ("sdpa", 128)]
    assert family_key(order[0]) == family_key(order[4]) != family_key(order[1])  # naive 32 and 128; not sdpa
    assert family_key(order[0])[:5] == ("naive", "mha", "prefill", "fwd", "cpu")
    planner = TimeBudget(100.0)  # the cases' room: 56.7 s of it (the closing and a third for deciding keep the rest)
    assert planner.fits(26.0, elapsed_s=30.0) and not planner.fits(27.0, elapsed_s=30.0)
    assert planner.fits(55.0, elapsed_s=30.0, least=True)  # a claim's least case may use the time kept to decide
    planner.ran(predicted_s=10.0, measured_s=30.0, key="bf16")  # 3x optimistic for bf16 so far: it scales bf16
    assert planner.scale("bf16") == 3.0 and not planner.fits(25.0, elapsed_s=30.0, key="bf16")
    planner.ran(predicted_s=10.0, measured_s=10.0, key="fp32")
    assert planner.scale("fp32") == 1.0 and planner.fits(25.0, elapsed_s=30.0, key="fp32")
    assert planner.eta_s([(10.0, "bf16"), (5.0, "fp32")], elapsed_s=0.0) == 35.0
    assert planner.eta_s([(100.0, "bf16")], elapsed_s=50.0) == pytest.approx(100.0 * (0.9 - 1 / 3) - 50.0)  # the rest


def test_a_slice_times_a_case_in_its_worker_and_a_case_it_cannot_run_gives_none():
    from bench.engine.execute import RunnerSetup
    from bench.engine.isolate import Isolated
    from bench.problem.case import Case
    from bench.problem.shapes import AttentionShape
    from bench.results.meta import Calibration

    workers = Isolated(1)
    workers.start(RunnerSetup(Calibration(), None, 0.05, None, 1))
    try:
        case = Case("naive", AttentionShape(1, 2, 2, 32, 32, 16), "prefill", "fwd", "cpu")
        first, second = workers.slice(case), workers.slice(case)  # built, checked and warmed once, then kept
        assert first and second and first > 0 and second > 0
        assert workers.slice(Case("flash-attn", AttentionShape(1, 2, 2, 32, 32, 16), "prefill", "fwd", "cpu")) is None
        assert workers.slice_error.startswith("flash-attn/") and "CUDA" in workers.slice_error  # which case, and why
        workers.slice(case)
        assert workers.slice_error == ""
    finally:
        workers.close()
