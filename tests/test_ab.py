"""`bench ab`: the ABBA schedule, pooling a side's slices, the worker protocol and its refusals (on a fake revision
with the worker's interface and made-up timings), and real runs: an injected slowdown is caught."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.cli import main
from bench.commands.ab import DEFAULT_THRESHOLD
from bench.regress.ab.engine import Slices, pooled, schedule
from bench.regress.ab.rounds import fastest_half, judged_rounds
from bench.regress.noise import Rule, parse_threshold
from tests.injected_slowdown import MARK, inject

ROOT = Path(__file__).resolve().parents[1]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


# --- the schedule and the pooling ------------------------------------------------------------------------------


def test_schedule_is_abba_blocks_in_random_order():
    order = schedule(50, random.Random(1))
    blocks = ["".join(order[i:i + 4]) for i in range(0, len(order), 4)]
    assert set(blocks) == {"ABBA", "BAAB"}  # both orders occur, nothing else
    assert order.count("A") == order.count("B") == 100
    assert schedule(5, random.Random(7)) == schedule(5, random.Random(7))


def test_pooled_entry_redoes_the_statistics_from_the_judged_rounds():
    rec = {"case_id": "c", "status": "ok", "median_s": 1.0, "tflops": 2.0, "peak_mem_bytes": 100, "noisy": False}
    slices = Slices([rec, dict(rec, median_s=3.0, peak_mem_bytes=300, noisy=True)], [[1.0, 1.0, 1.0], [3.0, 3.0]],
                    [0, 0])
    entry = pooled(slices)
    info = entry.record
    assert entry.samples == (1.0, 1.0, 1.0, 3.0, 3.0) and info.rounds == 5
    assert info.median_s == 1.0 and info.tflops == 2.0 and info.noisy is True
    assert info.peak_mem_bytes == 200  # the median of the slices' peaks
    assert entry.to_dict()["extra_info"]["ab_slices"] == [{"block": 0, "rounds": [1.0, 1.0, 1.0]},
                                                          {"block": 0, "rounds": [3.0, 3.0]}]
    three = pooled(Slices([rec], [[1.0, 1.0]], [0]), rounds=[3.0, 3.0, 3.0])
    assert three.record.tflops == pytest.approx(2.0 / 3)  # throughput follows the judged median


def test_fastest_half_drops_the_rounds_the_host_slowed():
    assert fastest_half([5.0, 1.0, 9.0, 2.0, 1.5, 7.0, 3.0]) == [1.0, 2.0, 1.5, 3.0]
    assert fastest_half([2.0, 1.0, 3.0]) == [2.0, 1.0, 3.0]  # too few to drop any
    assert fastest_half([1.0] * 8) == [1.0] * 4


def test_judged_rounds_remove_a_slow_spell_that_spans_a_block_and_keep_each_block_s_ratio():
    # B is 1.2x A in every block; block 1 ran during a slow spell (everything x3)
    a = [(0, [1.0] * 6), (0, [1.0] * 6), (1, [3.0] * 6), (1, [3.0] * 6)]
    b = [(0, [1.2] * 6), (0, [1.2] * 6), (1, [3.6] * 6), (1, [3.6] * 6)]
    ja, jb = judged_rounds(a, b)
    assert len(ja) == len(jb) == 12
    assert max(ja) == pytest.approx(min(ja)) and max(jb) == pytest.approx(min(jb))  # the spell is gone
    assert jb[0] / ja[0] == pytest.approx(1.2)


def test_a_case_not_ok_is_an_untimed_entry():
    entry = pooled(Slices([{"case_id": "c", "status": "unsupported", "reason": "no"}], [[]], [0]))
    assert entry.stats is None and not entry.timed and entry.status == "unsupported"


# --- the rounds: every block of a case in fresh workers (fake sides, no processes) ------------------------------


class FakeSide:
    """A side as the engine sees it: `worker` counts restarts; each worker's process runs every case `slow(worker)`
    times as slow as 1 ms (its state: where its buffers landed), with 1% jitter."""

    def __init__(self, slow) -> None:
        self.slow, self.worker, self.rng = slow, 0, random.Random(0)

    def restart(self) -> None:
        self.worker += 1

    def ask(self, request: dict) -> dict:
        t = 1e-3 * self.slow(self.worker)
        return {"record": {"case_id": request["case"], "status": "ok"},
                "samples": [t * (1 + self.rng.uniform(0, 0.01)) for _ in range(5)]}


def _rounds(slow_b, blocks: int = 7, cases: tuple[str, ...] = ("c1", "c2", "c3")):
    from bench.regress.ab.engine import measure_rounds

    sides = {"A": FakeSide(lambda w: 1.0), "B": FakeSide(slow_b)}
    restarts = []

    def fresh() -> None:
        restarts.append(1)
        for side in sides.values():
            side.restart()

    got = measure_rounds(list(cases), sides, blocks, random.Random(2), fresh, lambda line: None, Rule(threshold=0.05))
    return got, sides, len(restarts)


def test_each_block_of_a_case_runs_in_a_fresh_pair_of_workers():
    got, sides, restarts = _rounds(lambda w: 1.0)
    assert restarts == 6  # one per round after the first, shared by every case
    for case in got.values():
        for slices in case.values():
            assert slices.blocks == [k for k in range(7) for _ in (0, 1)]
            assert slices.workers == slices.blocks  # block k ran in each side's k-th worker
    entry = pooled(got["c1"]["A"])
    assert entry.to_dict()["extra_info"]["ab_workers"] == [k for k in range(7) for _ in (0, 1)]


def test_a_slow_process_is_not_a_regression_but_a_slow_kernel_is():
    from bench.regress.ab.engine import case_stats

    rule = Rule(threshold=0.05)
    got, _, _ = _rounds(lambda w: 1.12 if w == 0 else 1.0)  # B's first process landed 12% slower
    assert all(case_stats(g, rule).verdict != "regressed" for g in got.values())
    got, _, _ = _rounds(lambda w: 1.2 * (1.03 if w % 2 else 0.98))  # x1.2 in every process, processes 5% apart
    assert all(case_stats(g, rule).verdict == "regressed" for g in got.values())


def test_auto_blocks_go_to_fresh_workers_too():
    from bench.regress.ab.auto import AutoBlocks
    from bench.regress.ab.engine import _extend

    got, sides, _ = _rounds(lambda w: 1.1 if w % 2 else 1.0, cases=("c1",))  # x1.0 and x1.1 by turns: undecided
    restarts = []

    def fresh() -> None:
        restarts.append(1)
        for side in sides.values():
            side.restart()

    auto = AutoBlocks(start=7, step=2, max_blocks=11, time_s=1e9)
    _extend(got, sides, random.Random(3), Rule(threshold=0.05), auto, 0.0, lambda line: None, fresh)
    a = got["c1"]["A"]
    assert len(restarts) == 4 and a.blocks[-8:] == [k for k in range(7, 11) for _ in (0, 1)]
    assert len(set(a.workers)) == len(set(got["c1"]["B"].workers)) == 11  # each extra block its own pair


# --- a fake revision: the worker's interface with made-up timings ----------------------------------------------

FAKE = {
    "bench/__init__.py": "",
    "bench/suite/__init__.py": "",
    "bench/measure/__init__.py": "",
    "bench/engine/options.py": """
        from types import SimpleNamespace as NS
        IDS = [f"fake/{i}" for i in range(10)]

        def plan(values, default_out=True):
            if values.get("profile") == "nope":
                raise ValueError("unknown profile 'nope'")
            return NS(cases=[NS(id=i) for i in IDS], device="cpu", threads=None, sweep=NS(case_budget_s=0.1))
        """,
    "bench/engine/runner.py": """
        import random
        from types import SimpleNamespace as NS
        FACTOR = 1.0

        class Runner:
            def __init__(self, calibration, gpu_name=None, case_budget_s=1.0):
                self.n = 0

            def run(self, case):
                self.n += 1
                rng = random.Random(f"{case.id}-{self.n}-{FACTOR}")
                samples = [1e-3 * FACTOR * (1 + rng.uniform(-0.01, 0.01)) for _ in range(10)]
                print("stray output of the revision")  # must not break the protocol
                return NS(record={"case_id": case.id, "status": "ok", "reason": "", "median_s": 1e-3 * FACTOR,
                                  "peak_mem_bytes": 100}, samples=samples)
        """,
    "bench/measure/calibrate.py": """
        def calibrate(device):
            return {"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10}
        """,
    "bench/measure/environment.py": """
        def fingerprint(device):
            return {"device": device, "cpu_model": "fake", "gpu_name": None, "torch": "x", "cuda": None, "threads": 1}

        def git_commit():
            return None
        """,
}


@pytest.fixture
def fake_repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    for name, text in FAKE.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    git(repo, "init", "-q")
    commit_all(repo, "fake revision")
    return repo


def edit(repo: Path, name: str, old: str, new: str) -> None:
    path = repo / name
    path.write_text(path.read_text().replace(old, new))


def ab(repo: Path, *args: str) -> int:
    return main(["ab", "HEAD", "--repo", str(repo), "--blocks", "7", "--seed", "3", *args])  # later flags win


@pytest.mark.slow
def test_fake_slower_working_tree_is_a_regression_and_the_worktree_is_removed(fake_repo, tmp_path, capsys):
    edit(fake_repo, "bench/engine/runner.py", "FACTOR = 1.0", "FACTOR = 1.5")
    edit(fake_repo, "bench/engine/options.py", "range(10)", "range(1, 11)")  # fake/0 only in REV, fake/10 only here
    saved = tmp_path / "saved"
    assert ab(fake_repo, "--format", "markdown", "--save", str(saved)) == 1
    out = capsys.readouterr().out
    assert "9 regressed" in out and "(9 matched)" in out
    # each of a case's 7 blocks ran in a fresh pair of workers, and the report says so
    assert "each block in fresh worker processes (7 a side in all)" in out and "7 worker processes a side" in out
    for side in ("ab-base.json", "ab-current.json"):
        for entry in json.loads((saved / side).read_text())["benchmarks"]:
            info = entry["extra_info"]
            assert info["ab_workers"] == [s["block"] for s in info["ab_slices"]] and len(set(info["ab_workers"])) == 7
    assert "1 cases only in REV's sweep, not measured: fake/0" in out
    assert "1 cases only in the working tree's sweep, not measured: fake/10" in out
    assert "seed 3" in out
    assert len(git(fake_repo, "worktree", "list").splitlines()) == 1  # the temporary worktree is gone
    # the two sides as run documents: `bench compare` reads them and agrees
    assert main(["compare", str(saved / "ab-base.json"), str(saved / "ab-current.json"), "--no-control"]) == 1


@pytest.mark.slow
def test_default_threshold_is_lower_than_compare_s(fake_repo):
    # a steady 7% slowdown: past bench ab's default threshold, within compare's (interleaving removes the drift a
    # stored baseline carries, so A/B can afford the finer threshold)
    assert parse_threshold(DEFAULT_THRESHOLD) < 0.07 < Rule().threshold
    edit(fake_repo, "bench/engine/runner.py", "FACTOR = 1.0", "FACTOR = 1.07")
    assert ab(fake_repo) == 1
    assert ab(fake_repo, "--threshold", "10%") == 0


def _refusals(repo: Path) -> dict[str, tuple[list[str], str]]:
    return {
        "unknown rev": (["ab", "no-such-branch"], "revision 'no-such-branch' is unknown"),
        "not a checkout": (["ab", "HEAD", "--repo", str(repo.parent)], "not in a git checkout"),
        "bad threshold": (["ab", "HEAD", "--threshold", "ten"], "threshold 'ten' is not a number"),
        "bad blocks": (["ab", "HEAD", "--blocks", "0"], "--blocks 0"),
    }


@pytest.mark.parametrize("case", ["unknown rev", "not a checkout", "bad threshold", "bad blocks"])
def test_refused_before_any_work_with_one_line_and_exit_2(case, fake_repo, capsys):
    argv, message = _refusals(fake_repo)[case]
    if "--repo" not in argv:
        argv = [*argv, "--repo", str(fake_repo)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize(("broken", "message"), [
    ("runner", "lacks Runner (bench.engine.runner.Runner"),
    ("disjoint", "no case in common"),
    ("bad value", "unknown profile 'nope'"),
])
def test_unusable_revision_is_exit_2_with_the_reason(broken, message, fake_repo, capsys):
    args = []
    if broken == "runner":  # REV predates the interface; the working tree has it
        runner = (fake_repo / "bench/engine/runner.py").read_text()
        (fake_repo / "bench/engine/runner.py").unlink()
        commit_all(fake_repo, "no runner")
        (fake_repo / "bench/engine/runner.py").write_text(runner)
    elif broken == "disjoint":
        edit(fake_repo, "bench/engine/options.py", 'f"fake/{i}"', 'f"other/{i}"')
    else:
        args = ["--profile", "nope"]
    assert ab(fake_repo, *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("error: ")
    assert len(git(fake_repo, "worktree", "list").splitlines()) == 1


# --- real runs: this tree's code against itself, and made slower by tests/injected_slowdown.py -----------------

# 8 cases: the fewest the cross-case guard judges (8 or more); 7 blocks, each case judged by its own
# (bench.regress.blocks).
# An A/A of this tree runs in tests/test_gate.py (the regress session against the previous commit).
REAL_CASES = ["--backend", "sdpa-flash,naive", "--seq", "128", "--kv-heads", "8,1", "--phase", "prefill",
              "--budget", "0.05", "--blocks", "7"]


@pytest.fixture
def real_repo(tmp_path) -> Path:
    repo = tmp_path / "real"
    shutil.copytree(ROOT / "bench", repo / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    commit_all(repo, "this tree")
    return repo


@pytest.mark.slow
@pytest.mark.serial  # times both sides: nothing else may share the CPU
def test_real_injected_slowdown_is_caught(real_repo, capsys):
    registry = inject(real_repo, extra=1.0)  # every backend x2 in the working tree, REV (HEAD) untouched
    assert MARK in registry.read_text()
    code = ab(real_repo, *REAL_CASES, "--format", "json")
    out = capsys.readouterr().out
    assert code == 1, out
    counts = json.loads(out)["counts"]
    # x2 everywhere; on a loaded 2-core machine a case's 7 blocks can scatter too widely to decide (inconclusive)
    assert counts["regressed"] >= 2 and counts["improved"] == 0 and counts["noisy"] == 0, out[-3000:]


@pytest.mark.slow
def test_sigterm_ends_like_ctrl_c_and_removes_the_worktree(fake_repo):
    proc = subprocess.Popen([sys.executable, "-m", "bench", "ab", "HEAD", "--repo", str(fake_repo), "--blocks", "100"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # wait until the cases are being measured
            if line.startswith("[1/"):
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130  # as after Ctrl-C
    finally:
        proc.kill()
    assert len(git(fake_repo, "worktree", "list").splitlines()) == 1


def test_both_workers_are_pinned_to_the_same_cpus(monkeypatch):
    """Left to the scheduler, the two workers can sit on different cores for a whole run, and one core of a shared
    machine can be steadily slower: both get the same last `threads` CPUs, or no pinning when that is all of them."""
    from bench.regress.ab import engine

    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert engine.pinned("1") == {"ATTNBENCH_AB_CPUS": "3"}
    assert engine.pinned(2) == {"ATTNBENCH_AB_CPUS": "2,3"}
    assert engine.pinned("4") == {} and engine.pinned(None) == {} and engine.pinned("many") == {}


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs to pin to one of them")
def test_every_thread_of_a_worker_is_pinned_once_its_imports_are_done():
    """The worker pins itself after importing (the two sides import at once), so the threads torch started by then
    must be pinned too, not only the main one: every thread of a planned worker is on the one CPU it was given."""
    from bench.regress.ab.side import Side

    cpu = max(os.sched_getaffinity(0))
    # two OpenMP threads: torch's import then starts a second thread (with one, under pytest-xdist, it starts none)
    side = Side("this tree", ROOT, env={"ATTNBENCH_AB_CPUS": str(cpu), "OMP_NUM_THREADS": "2"})
    try:
        plan = side.ask({"cmd": "plan", "values": {"backends": "naive", "heads": "2", "kv_heads": "2", "seqs": "32",
                                                   "dtypes": "fp32", "masks": "none", "phases": "prefill",
                                                   "device": "cpu", "profile": "quick", "case_budget_s": "0.02"}})
        assert plan["ok"], plan
        tasks = Path(f"/proc/{side.proc.pid}/task")
        allowed = {t.name: next(ln.split(":")[1].strip() for ln in (t / "status").read_text().splitlines()
                                if ln.startswith("Cpus_allowed_list")) for t in tasks.iterdir()}
        assert len(allowed) >= 2 and set(allowed.values()) == {str(cpu)}, allowed
    finally:
        side.close()


def test_later_slices_of_a_case_only_time_it_again():
    """A worker on this tree: the first slice of a case runs the whole engine (checked against float64), a later
    one asked with retime only times the kept call; another case runs whole again."""
    from bench.regress.ab.side import Side

    side = Side("this tree", ROOT)
    try:
        plan = side.ask({"cmd": "plan", "values": {"backends": "sdpa", "heads": "2", "kv_heads": "2", "seqs": "32,64",
                                                   "dtypes": "fp32", "masks": "causal", "phases": "prefill",
                                                   "device": "cpu", "profile": "quick", "case_budget_s": "0.02"},
                         "slices": 4, "min_slice_s": 0.02})
        assert plan["ok"] and plan["retime"], plan
        first, second = plan["cases"][:2]
        whole = side.ask({"cmd": "run", "case": first, "retime": True})
        again = side.ask({"cmd": "run", "case": first, "retime": True})
        other = side.ask({"cmd": "run", "case": second, "retime": True})
        assert whole["record"]["status"] == "ok" and whole["record"]["max_abs_err"] is not None
        assert not whole["retimed"] and again["retimed"] and not other["retimed"]
        assert again["samples"] and all(s > 0 for s in again["samples"])
        assert again["record"]["case_id"] == first and other["record"]["case_id"] == second
    finally:
        side.close()


def test_a_restarted_worker_is_a_fresh_process_that_reuses_the_side_s_calibration():
    """Between rounds of blocks each side's worker is replaced (bench.regress.ab.engine.fresh_workers): a new
    process, planned again with the first one's calibration instead of measuring it again."""
    from bench.regress.ab.side import Side

    request = {"cmd": "plan", "values": {"backends": "naive", "heads": "2", "kv_heads": "2", "seqs": "32",
                                         "dtypes": "fp32", "masks": "none", "phases": "prefill", "device": "cpu",
                                         "profile": "quick", "case_budget_s": "0.02"}, "slices": 2}
    side = Side("this tree", ROOT)
    try:
        first = side.ask(request)
        pid = side.proc.pid
        side.restart()
        given = {**first["calibration"], "gemm_flops_per_s": 1.5e9}  # not what this machine would measure
        again = side.ask({**request, "calibration": given})
        assert side.worker == 1 and side.proc.pid != pid
        assert again["calibration"]["gemm_flops_per_s"] == 1.5e9 and again["cases"] == first["cases"]
        assert side.ask({"cmd": "run", "case": again["cases"][0], "retime": True})["record"]["status"] == "ok"
    finally:
        side.close()
