"""`nox -s regress`'s decision (bench.regress.gate): a stored baseline counts only when it is this machine's (host
id and ceilings); otherwise an interleaved A/B against a git revision, saying which and why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.regress import gate
from bench.regress.gate import Decision, baseline_is_here, decide
from bench.results import RunDocument, RunMeta, write_atomic
from bench.results.meta import Calibration
from tests.test_ab import ROOT, commit_all, git

HOST = "0123456789abcdef"
HERE = Calibration(117e9, 23e9)  # this machine now


def baseline(path: Path, host: str | None, gemm: float, copy: float = 23e9) -> Path:
    fp = {"device": "cpu", "cpu_model": "AMD EPYC", "gpu_name": None, "torch": "2.13.0+cpu", "cuda": None,
          "threads": 2}
    env = {"host_id": host} if host else {}
    doc = RunDocument(meta=RunMeta(run_id="base", profile="quick", complete=True, cases=0, fingerprint=fp,
                                   calibration=Calibration(gemm, copy)),
                      machine_info={"attnbench": env}, commit_info={})
    write_atomic(path, doc)
    return path


@pytest.mark.parametrize(("host", "gemm", "copy", "counts", "reason"), [
    (HOST, 120e9, 24e9, True, "recorded on this host"),
    (HOST, 183e9, 23e9, False, "GEMM ceiling moved: 183 GFLOP/s when it was recorded, 117 now"),
    (HOST, 117e9, 40e9, False, "copy ceiling moved"),
    ("fedcba9876543210", 117e9, 23e9, False, "another host"),
    (None, 117e9, 23e9, False, "records no host id"),
])
def test_a_baseline_counts_only_when_it_is_this_machine_s(tmp_path, host, gemm, copy, counts, reason):
    from bench.results import read_run

    doc = read_run(baseline(tmp_path / "b.json", host, gemm, copy))
    here, why = baseline_is_here(doc, HOST, HERE)
    assert here is counts and reason in why


def test_decide_order(tmp_path):
    mine, other = baseline(tmp_path / "mine.json", HOST, 117e9), baseline(tmp_path / "other.json", HOST, 183e9)
    pr = decide("origin/main", "b" * 40, other, HOST, HERE, "c" * 40)
    assert pr == Decision("ab", pr.reason, rev="b" * 40) and "merge base" in pr.reason
    assert decide(None, None, mine, HOST, HERE, "c" * 40).kind == "baseline"
    moved = decide(None, None, other, HOST, HERE, "c" * 40)
    assert moved.kind == "ab" and moved.rev == "c" * 40
    assert all(w in moved.reason for w in ("does not count", "GEMM ceiling moved", "previous commit"))
    none = decide(None, None, None, HOST, HERE, "c" * 40)
    assert none.kind == "ab" and "no stored baseline" in none.reason
    shallow = decide("origin/main", None, other, HOST, HERE, None)
    assert shallow.kind == "none" and "no merge base" in shallow.reason and "shallow" in shallow.reason


def test_a_workload_is_judged_by_an_ab_of_its_buckets_even_beside_a_baseline_that_counts(tmp_path, monkeypatch,
                                                                                           capsys):
    mine = baseline(tmp_path / "mine.json", HOST, 117e9)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gate, "_git", lambda *args: "c" * 40)
    ran: list[list[str]] = []
    code = gate.main(["--device", "cpu", "--workload", "azure-code", "--buckets", "2"],
                     bench=lambda argv: ran.append(list(argv)) or 0, here=lambda device: (HOST, HERE, mine))
    (argv,) = ran
    assert code == 0 and argv[:2] == ["ab", "c" * 40]
    assert argv[2:argv.index("--device")] == [*gate.TRACE_SWEEP, "--workload", "azure-code"]
    assert argv[-2:] == ["--buckets", "2"]  # the caller's flags come last, so they override the sweep's
    assert "--workload azure-code: a stored baseline holds the quick sweep" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.serial  # runs an A/B that times both sides: nothing else may share the CPU
def test_session_against_a_baseline_of_other_ceilings_passes_an_unchanged_tree(tmp_path, monkeypatch, capsys):
    """The session end to end on a copy of this tree with two commits and a stored baseline of this machine's key
    whose GEMM ceiling is 3x this machine's: no regression, exit 0, and the report names why it ran an A/B."""
    from bench.measure.calibrate import calibrate
    from bench.measure.environment import fingerprint, fingerprint_key, host_id

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "bench", repo / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    commit_all(repo, "one")
    (repo / "NOTES").write_text("no code change\n")
    commit_all(repo, "two")
    ceilings = calibrate("cpu")
    stored = baseline(repo / "results" / "baselines" / f"{fingerprint_key(fingerprint('cpu'))}.json", host_id(),
                      3 * ceilings.gemm_flops_per_s, ceilings.copy_bytes_per_s)
    monkeypatch.chdir(repo)
    code = gate.main(["--device", "cpu", "--backend", "sdpa-flash", "--seq", "64", "--kv-heads", "8", "--phase",
                      "prefill", "--budget", "0.1", "--blocks", "7"],
                     here=lambda device: (host_id(), ceilings, stored))
    err = capsys.readouterr().err
    report = (repo / "reports" / "regress.md").read_text()
    assert code == 0, report
    assert "GEMM ceiling moved" in err and "A/B against the previous commit" in err
    assert "no regression" in report and "GEMM ceiling moved" in report and "(1 matched)" in report
