"""Your own attention as a backend: MODULE:FUNCTION names and entry points, their traits, their errors (exit 2),
their colours, and the runner measuring them like a built-in."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from bench.backends import get_backend
from bench.backends.outside import DEFAULTS, OutsideBackendError, forget
from bench.cli import main
from bench.engine.runner import Runner
from bench.engine.sweeps import Case
from bench.problem.columns import shape_from_fields
from bench.problem.masks import NO_MASK
from bench.problem.shapes import AttentionShape
from bench.results.meta import Calibration
from tests.byo_example import write_package

CALIBRATION = Calibration.from_dict({"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10})


@pytest.fixture
def mypkg(tmp_path, monkeypatch):
    """The example package in a fresh directory, which is the working directory (as a user's checkout is)."""
    write_package(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    forget()
    yield tmp_path
    forget()
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def shape(kv_heads: int = 2, mask: str = "causal", seq: int = 32) -> AttentionShape:
    return shape_from_fields(dict(batch=1, seq_q=seq, seq_kv=seq, n_heads=4, n_kv_heads=kv_heads, head_dim=16,
                                  dtype="fp32", mask=mask))


def run_case(backend: str, s: AttentionShape, pass_: str = "fwd", calibration: dict | None = None) -> dict:
    return Runner(calibration or CALIBRATION, case_budget_s=0.02).run(Case(backend, s, "prefill", pass_, "cpu")).record


def test_module_function_resolves_with_the_decorators_traits(mypkg):
    b = get_backend("mypkg.attn:attn")
    assert b.name == "mypkg.attn:attn" and b.label == "mine" and b.memory == "materialising"
    assert b.devices == ("cpu",) and b.dtypes == ("fp32", "bf16") and b.backward and b.layouts == ()
    assert b.origin == "import mypkg.attn:attn" and b.summary.startswith("A textbook kernel")
    plain = get_backend("mypkg.attn:plain")  # undecorated: the stated defaults
    assert (plain.memory, plain.devices, plain.dtypes, plain.layouts, plain.backward) == tuple(DEFAULTS.values())
    assert get_backend("mypkg.attn:attn") is b  # resolved once


@pytest.mark.parametrize(("name", "says"), [
    ("nopkg.attn:fn", "cannot import nopkg.attn: ModuleNotFoundError"),
    ("mypkg.attn:missing", "mypkg.attn has no missing"),
    ("mypkg.attn:not_callable", "int object is not callable"),
    ("mypkg.attn:wrong_signature", "cannot take (q, k, v, *, causal, window)"),
    ("mypkg/attn:attn", "cannot contain '/'"),
])
def test_an_unusable_outside_backend_is_one_line_and_exit_2(mypkg, capsys, name, says):
    with pytest.raises(OutsideBackendError, match=None):
        get_backend(name)
    code = main(["run", "--backend", name, "--seq", "32", "--phase", "prefill", "--out", str(mypkg / "r.json")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert name in err and says in err


def test_the_runner_measures_an_outside_backend_and_its_case_id_keeps_the_name(mypkg):
    from bench.commands.profile import case_from_id

    record = run_case("mypkg.attn:attn", shape())
    assert record.status == "ok", record.reason
    assert record.case_id.startswith("mypkg.attn:attn/gqa/") and record.backend == "mypkg.attn:attn"
    assert case_from_id(record.case_id).backend == "mypkg.attn:attn"


def test_traits_decide_unsupported(mypkg):
    assert run_case("mypkg.attn:attn", dataclasses_replace(shape(), dtype="fp16")).status == "unsupported"
    record = run_case("mypkg.attn:scribbler", shape(), pass_="fwd+bwd")
    assert record.status == "unsupported" and "declares no backward" in record.reason


def dataclasses_replace(s: AttentionShape, **kw) -> AttentionShape:
    import dataclasses
    return dataclasses.replace(s, **kw)


def test_a_kernel_wrong_only_for_gqa_is_incorrect_only_there(mypkg):
    assert run_case("mypkg.attn:gqa_bug", shape(kv_heads=4)).status == "ok"  # MHA
    assert run_case("mypkg.attn:gqa_bug", shape(kv_heads=1)).status == "ok"  # MQA
    gqa = run_case("mypkg.attn:gqa_bug", shape(kv_heads=2))
    assert gqa.status == "incorrect" and "exceeds tolerance" in gqa.reason


def test_entry_point_backends_are_found_by_name_and_listed(mypkg, monkeypatch, capsys):
    # the listing without flex's built-in row: its probe compiles a kernel per dtype (tens of seconds on a cold
    # cache) and this test is about the entry points; test_correctness.py checks flex itself
    from bench.commands import backends

    monkeypatch.setattr(backends, "BACKENDS", {k: v for k, v in backends.BACKENDS.items() if k != "flex"})
    dist = mypkg / "mypkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""
        [attnbench.backends]
        mine = mypkg.attn:attn
        broken = mypkg.attn:missing
    """))
    b = get_backend("mine")
    assert b.name == "mine" and b.fn.__name__ == "attn"
    assert b.origin == "entry point mine = mypkg.attn:attn from mypkg 0.1"
    assert main(["backends", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "entry point mine = mypkg.attn:attn from mypkg 0.1" in out
    assert "broken" in out and "mypkg.attn has no missing" in out  # listed with its error, not a crash


def test_outside_backends_get_distinct_colours_and_markers(mypkg):
    from bench.backends import BACKENDS
    from bench.report.style import backend_color, backend_marker

    names = [f"mypkg.attn:k{i}" for i in range(20)]
    looks = {(backend_color(n), backend_marker(n)) for n in names}
    assert len(looks) == len(names)
    assert not {backend_color(n) for n in names} & {b.color for b in BACKENDS.values()}
    assert backend_color(names[0]) == backend_color(names[0])


def test_working_directory_first(mypkg, monkeypatch):
    """`python -m bench` puts '' first on sys.path; other front ends (pytest) may not: the resolver adds it."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(mypkg))])
    assert get_backend("mypkg.attn:attn").fn.__name__ == "attn"
    assert str(Path.cwd()) in sys.path


# --- bench check: the conformance run -------------------------------------------------------------------------


def test_check_passes_a_correct_kernel_and_fails_one_wrong_for_gqa(mypkg, capsys):
    assert main(["check", "mypkg.attn:attn", "--dtype", "fp32", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "18 pass" in out and "bwd fp32 gqa window" in out
    assert main(["check", "mypkg.attn:gqa_bug", "--device", "cpu"]) == 1
    rows = capsys.readouterr().out.splitlines()
    failing = [r for r in rows if " fail " in r]
    assert len(failing) == 6 and all(" gqa " in r and "> tol" in r for r in failing)
    assert main(["check", "mypkg.attn:scribbler", "--dtype", "fp16", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "9 unsupported" in out and "bwd" not in out  # claims fp32 only, and no backward
    assert main(["check", "mypkg.attn:missing"]) == 2


@pytest.mark.slow
def test_conformance_runs_under_the_users_pytest(mypkg):
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(mypkg)])}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "bench.conformance",
            "--attn-dtype", "fp32"]
    good = subprocess.run([*args, "--attn-backend", "mypkg.attn:attn"], cwd=mypkg, env=env, capture_output=True,
                          text=True, timeout=600)
    assert good.returncode == 0 and "18 passed" in good.stdout, good.stdout[-2000:]
    bad = subprocess.run([*args, "--attn-backend", "mypkg.attn:gqa_bug"], cwd=mypkg, env=env, capture_output=True,
                         text=True, timeout=600)
    assert bad.returncode == 1 and "6 failed, 12 passed" in bad.stdout, bad.stdout[-2000:]


# --- timing a kernel cannot fool ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured_ceilings() -> Calibration:
    """This machine's fp32 GEMM and read ceilings, on small buffers (quick; a smaller GEMM only lowers the
    ceiling, which makes the floor easier on kernels, not harder)."""
    from bench.measure.calibrate import gemm_flops_per_s, read_bytes_per_s

    gemm = gemm_flops_per_s("cpu", "fp32", ((512, 512, 512),))
    return Calibration(gemm, 1e10, read_bytes_per_s("cpu"), {"fp32": gemm})


def big() -> AttentionShape:
    return AttentionShape(1, 256, 256, 8, 8, 64, "fp32", NO_MASK)


def test_a_kernel_that_writes_into_its_input_is_incorrect(mypkg):
    record = run_case("mypkg.attn:scribbler", shape())
    assert record.status == "incorrect"
    assert "wrote into its input q during the timed rounds" in record.reason


@pytest.mark.serial  # a measured ceiling against a timed kernel
def test_a_cached_output_is_implausible_and_a_real_kernel_is_not(mypkg, measured_ceilings):
    cached = run_case("mypkg.attn:cached", big(), calibration=measured_ceilings)
    assert cached.status == "incorrect" and cached.reason.startswith("implausible: median"), cached.reason
    assert "below the floor" in cached.reason and "GFLOP/s" in cached.reason
    honest = run_case("mypkg.attn:attn", big(), calibration=measured_ceilings)
    assert honest.status == "ok", honest.reason


def test_a_last_output_that_drifts_is_incorrect(mypkg):
    from bench.backends.base import Backend
    from bench.kinds.dense import DenseKind

    calls = []

    def drifting(q, k, v, *, mask, score):  # right on its first calls, then wrong
        calls.append(1)
        out = get_backend("mypkg.attn:attn").fn(q, k, v, mask=mask, score=score)
        return out if len(calls) < 5 else out + 1

    import bench.backends as registry
    registry.BACKENDS["drifting"] = Backend("drifting", drifting, "test", "tiled", "#000000", "o")
    try:
        record = run_case("drifting", shape())
        assert record.status == "incorrect" and "last timed call's output no longer matches" in record.reason
        case = Case("drifting", shape(), "prefill", "fwd", "cpu")
        assert DenseKind().timed_call(case, None).guard.reference is not None
    finally:
        del registry.BACKENDS["drifting"]


def test_kernel_above_warm_leaves_overhead_out():
    from bench.measure.modes import CaseTiming
    from bench.measure.timer import Timing

    modes = {"warm": Timing([2e-3] * 7, 1, False, "t"), "kernel": Timing([12e-3] * 7, 1, False, "t", "kernel")}
    t = CaseTiming(0.0, "cpu", modes)
    assert t.modes_disagree() and t.overhead_pct() is None and t.launch_bound() is None
    fine = CaseTiming(0.0, "cpu", dict(modes, kernel=Timing([1e-3] * 7, 1, False, "t", "kernel")))
    assert not fine.modes_disagree() and fine.overhead_pct() == pytest.approx(50)


# --- bench ab in a user's repository -----------------------------------------------------------------------------

# 8 cases: the fewest the cross-case guard judges (as tests/test_ab.py's REAL_CASES say)
USER_CASES = ["--backend", "mypkg.kern:kernel", "--heads", "8", "--seq", "32,64", "--kv-heads", "8,1",
              "--mask", "causal", "--dtype", "fp32", "--phase", "prefill", "--budget", "0.05", "--blocks", "7",
              "--threshold", "10%", "--seed", "3", "--format", "json"]


@pytest.fixture
def user_repo(mypkg):
    import subprocess

    (mypkg / "mypkg" / "kern.py").write_text("from mypkg.attn import attn as kernel  # noqa: F401\n")

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(mypkg), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "my attention")
    return mypkg


def regressed_of(out: str) -> tuple[int, int]:
    import json

    doc = json.loads(out)
    return doc["counts"].get("regressed", 0), doc["n_matched"]


@pytest.mark.slow
@pytest.mark.serial  # times both sides: nothing else may share the CPU
def test_ab_in_a_user_repository_aa_then_a_slower_kernel(user_repo, capsys):
    assert main(["ab", "HEAD", *USER_CASES]) == 0
    assert regressed_of(capsys.readouterr().out) == (0, 4)
    (user_repo / "mypkg" / "kern.py").write_text("from mypkg.attn import slower as kernel  # noqa: F401\n")
    assert main(["ab", "HEAD", *USER_CASES]) == 1
    regressed, matched = regressed_of(capsys.readouterr().out)
    assert matched == 4 and regressed >= 2  # half, as test_ab.py asks of its x2 slowdown


def test_ab_in_a_user_repository_needs_their_backend(user_repo, capsys):
    assert main(["ab", "HEAD", "--seq", "32"]) == 2
    assert "name your backend with --backend MODULE:FUNCTION" in capsys.readouterr().err


def test_ab_two_interpreters_flags(user_repo, capsys):
    assert main(["ab", "HEAD", "--python-a", sys.executable, "--python-b", sys.executable,
                 "--backend", "mypkg.kern:kernel"]) == 2
    assert "without REV" in capsys.readouterr().err
    assert main(["ab", "--python-a", sys.executable, "--backend", "mypkg.kern:kernel"]) == 2
    assert main(["ab", "--backend", "mypkg.kern:kernel"]) == 2
    assert "give REV" in capsys.readouterr().err


def test_the_flop_floor_is_the_machines_best_gemm_not_an_emulated_dtypes():
    """A CPU without bf16 units runs a bf16 GEMM 100x below fp32, but torch's bf16 attention computes in fp32:
    50x faster than that GEMM is plausible; faster than the fp32 GEMM by more than the margin is not."""
    from bench.kinds.guards import implausible

    calibration = Calibration.from_dict({"gemm_flops_per_s_fp32": 1e11, "gemm_flops_per_s_bf16": 1e9,
                                         "read_bytes_per_s": 1e10})
    assert implausible(0.02, 1e9, 1e3, "bf16", calibration) is None  # 50 GFLOP/s: 50x the bf16 GEMM
    # 10 TFLOP/s on a machine whose best GEMM is 100 GFLOP/s
    assert implausible(1e-4, 1e9, 1e3, "bf16", calibration).startswith("implausible: median")
    assert "best measured GEMM ceiling (fp32)" in implausible(1e-4, 1e9, 1e3, "bf16", calibration)
