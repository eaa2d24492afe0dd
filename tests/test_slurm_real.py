"""`bench run --launcher slurm` against a real single-node Slurm (tests/slurm_cluster.py), started once for the
session: a plain sweep; shards cancelled while running and while pending, then the rerun; a preempted shard that
submitit requeues and that continues its own file; a shard that hits its time limit; a cluster without job
accounting. Skipped with the reason where Slurm cannot be started; under CI=true (.ci/run installs it) that fails.
The launcher runs as a real `python -m bench run` process, so the test acts on its jobs while it waits."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.launch.slurm_states import parse_squeue
from bench.results import journal_path, read_run
from tests.slurm_cluster import SlurmCluster, why_not

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["--profile", "quick", "--backend", "naive,sdpa-math", "--kv-heads", "8,1", "--seq", "32,64",
         "--phase", "prefill", "--pass", "fwd", "--budget", "0.5", "--device", "cpu", "--threads", "1"]
pytestmark = [pytest.mark.slow, pytest.mark.daemons]  # `nox -s tests` runs them beside the parallel part


class _Clusters:
    """The session's cluster, restarted when a test wants the other accounting mode."""

    def __init__(self, root: Path) -> None:
        self.root, self.current = root, None

    def get(self, accounting: bool) -> SlurmCluster:
        if self.current is not None and self.current.accounting == accounting:
            return self.current
        reason = why_not(accounting)
        if reason is None:
            self.stop()
            try:
                cluster = SlurmCluster(self.root / ("acct" if accounting else "noacct"), accounting)
                cluster.start()
                self.current = cluster
                return cluster
            except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                reason = f"Slurm did not start: {err}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true needs a real Slurm: {reason}")
        pytest.skip(reason)

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


@pytest.fixture(scope="session")
def clusters(tmp_path_factory):
    """The session's cluster; its teardown (SlurmCluster.stop) ends the jobs and their steps, then the daemons."""
    c = _Clusters(tmp_path_factory.mktemp("slurm"))
    yield c
    c.stop()


class Launcher:
    """`python -m bench run ... --launcher slurm` in the background, its output in files."""

    def __init__(self, cluster: SlurmCluster, cwd: Path, *argv: str) -> None:
        self.cluster, self.cwd = cluster, cwd
        self.env = {**os.environ, **cluster.env, "PYTHONPATH": str(ROOT), "ATTNBENCH_SLURM_POLL_S": "2"}
        self.out_path, self.err_path = cwd / "launcher.out", cwd / "launcher.err"
        self.start = time.monotonic()
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "--launcher", "slurm", *argv],
                                         cwd=cwd, env=self.env, stdout=out, stderr=err)

    @property
    def out(self) -> str:
        return self.out_path.read_text()

    @property
    def err(self) -> str:
        return self.err_path.read_text()

    def job_id(self) -> str:
        line = _until(lambda: next((ln for ln in self.out.splitlines() if ln.startswith("submitted ")), None), 90,
                      f"the launcher's 'submitted' line ({self})")
        return line.split(" as job ")[1].split()[0]

    def tasks(self, array: str) -> dict:
        text = self.cluster._run("squeue", "-r", "-t", "all", "-h", "-j", array, "-o", "%F|%K|%T|%r",
                                 check=False).stdout
        return parse_squeue(text, array)

    def scancel(self, *argv: str) -> None:
        self.cluster._run("scancel", *argv)

    def wait(self, timeout: float = 240) -> tuple[int, float]:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the launcher still waits after {timeout} s: {self}") from None
        return code, time.monotonic() - self.start

    def __str__(self) -> str:
        return f"out:\n{self.out}\nerr:\n{self.err}"


def _until(get, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if (got := get()) is not None and got is not False:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _cases_in_journal(path: Path) -> int:
    j = journal_path(path)
    return sum(ln.startswith('{"case"') for ln in j.read_text().splitlines()) if j.exists() else 0


def _shard(cwd: Path, k: int, n: int) -> Path:
    return cwd / f".r.json.shards/shard-{k}of{n}.json"


# A user's kernel (MODULE:FUNCTION, found in the job's working directory) that takes a second a call and leaves the
# CPU to the tests running beside this file: for the jobs that must last (preempted midway, or past a time limit).
SLEEPY = """
import time

import torch


def attn(q, k, v, *, causal, window):
    time.sleep(1.0)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                            enable_gqa=k.shape[1] != q.shape[1])
"""


def sleepy_sweep(cwd: Path, kv_heads: str, seqs: str, budget: str) -> list[str]:
    """bench run's arguments for SLEEPY's cases, its module written to the job's working directory."""
    (cwd / "sleepy.py").write_text(SLEEPY)
    return ["--backend", "sleepy:attn", "--kv-heads", kv_heads, "--seq", seqs, "--dtype", "fp32", "--mask", "causal",
            "--phase", "prefill", "--pass", "fwd", "--budget", budget, "--device", "cpu", "--threads", "1"]


def test_a_plain_sweep_runs_and_merges(clusters, tmp_path):
    launcher = Launcher(clusters.get(accounting=True), tmp_path, *SWEEP, "--shards", "2", "--out", "r.json")
    code, took = launcher.wait()
    assert code == 0, launcher
    doc = read_run(tmp_path / "r.json")
    assert len(doc.entries()) == 8 and doc.meta.complete is True and len(doc.meta.shards) == 2
    lines = [ln for ln in launcher.out.splitlines() if ln.startswith("shards: ")]
    assert "8 cases (8 to run)" in launcher.out and lines[-1].endswith("; 8 cases finished"), launcher
    print(f"plain sweep: 2 shards, 8 cases merged in {took:.0f} s")


def test_shards_cancelled_running_and_pending_are_named_and_the_rerun_finishes_them(clusters, tmp_path):
    cluster = clusters.get(accounting=True)  # 2 CPUs: of 3 shards, the third waits
    # 6 cases, 2 a shard, each lasting seconds: shard 1 is still running its second case when it is cancelled
    # (with fast cases a shard could finish between the test seeing its first case and the scancel)
    slower = sleepy_sweep(tmp_path, "8,4,1", "32,64", budget="2")
    launcher = Launcher(cluster, tmp_path, *slower, "--shards", "3", "--out", "r.json")
    array = launcher.job_id()
    _until(lambda: launcher.tasks(array).get(2, None) and launcher.tasks(array)[2].state == "PENDING", 30,
           "the third shard pending")
    launcher.scancel(f"{array}_2")
    _until(lambda: _cases_in_journal(_shard(tmp_path, 1, 3)) >= 1, 120, "shard 1's first case")
    launcher.scancel(f"{array}_0")
    code, took = launcher.wait()
    assert code == 1, launcher
    assert f"shard 1/3 (job {array}_0) did not finish: cancelled by 0" in launcher.err
    # sacct names the user once it has the task's record; before that, the task is known to have left pending
    assert re.search(rf"shard 3/3 \(job {array}_2\) did not finish: cancelled (by 0|while pending)", launcher.err)
    assert "shard 2/3" not in launcher.err and read_run(_shard(tmp_path, 2, 3)).meta.complete is True
    assert "2 of 3 shards incomplete" in launcher.err
    kept = len(read_run(_shard(tmp_path, 1, 3)).entries()) + len(read_run(_shard(tmp_path, 2, 3)).entries())
    print(f"cancelled running and pending: exit 1 after {took:.0f} s, {kept} cases kept")
    again = Launcher(cluster, tmp_path, *slower, "--shards", "3", "--out", "r.json")
    code, took = again.wait()
    assert code == 0, again
    assert f"6 cases ({6 - kept} to run)" in again.out and "submitted 2 of 3 shards (1 already complete)" in again.out
    assert len(read_run(tmp_path / "r.json").entries()) == 6
    print(f"rerun: the 2 incomplete shards resubmitted, merged in {took:.0f} s")


def test_a_preempted_shard_is_requeued_and_continues_its_file(clusters, tmp_path):
    cluster = clusters.get(accounting=True)
    slower = sleepy_sweep(tmp_path, "8,1", "32,64", budget="2")  # 4 cases, long enough to preempt one midway
    launcher = Launcher(cluster, tmp_path, *slower, "--shards", "1", "--slurm-time", "30", "--out", "r.json")
    job = launcher.job_id()  # one shard is a plain job, not an array
    _until(lambda: _cases_in_journal(_shard(tmp_path, 1, 1)) >= 1, 120, "the shard's first case")
    launcher.scancel("--signal=USR2", job)  # what a preempting scheduler sends (submitit's signal)
    code, took = launcher.wait()
    assert code == 0, launcher
    assert len(read_run(tmp_path / "r.json").entries()) == 4
    out = (tmp_path / f".r.json.shards/logs/{job}_0_log.out").read_text()  # both runs of the job (append)
    assert "this job is preempted" in out and "Requeued job" in out, out
    firsts = [int(n) for n in re.findall(r"^4 cases \((\d+) to run\)", out, re.M)]
    assert len(firsts) == 2 and firsts[0] == 4 and firsts[1] < 4, out  # the requeued job resumed its file
    print(f"preempted and requeued: resumed its file, merged in {took:.0f} s")


def test_a_shard_that_hits_its_time_limit_says_so(clusters, tmp_path):
    cluster = clusters.get(accounting=True)
    slow = sleepy_sweep(tmp_path, "8", "32,64,96,128", budget="20")  # 4 cases that outlast the 2-minute limit
    launcher = Launcher(cluster, tmp_path, *slow, "--shards", "1", "--slurm-time", "2", "--out", "r.json")
    job = launcher.job_id()
    code, took = launcher.wait(200)
    assert code == 1, launcher
    assert f"shard 1/1 (job {job}) did not finish: hit its time limit (--slurm-time 2 min)" in launcher.err
    print(f"time limit: named after {took:.0f} s")


def test_without_accounting_states_come_from_squeue_and_the_wait_ends(clusters, tmp_path):
    cluster = clusters.get(accounting=False)
    assert "accounting storage is disabled" in cluster._run("sacct", check=False).stderr
    launcher = Launcher(cluster, tmp_path, *SWEEP, "--shards", "3", "--out", "r.json")
    array = launcher.job_id()
    _until(lambda: launcher.tasks(array).get(2, None) and launcher.tasks(array)[2].state == "PENDING", 30,
           "the third shard pending")
    launcher.scancel(f"{array}_2")
    code, took = launcher.wait()
    assert code == 1, launcher
    # squeue lists it as CANCELLED, or (once Slurm dropped it from the array's pending set) it left pending
    assert re.search(rf"shard 3/3 \(job {array}_2\) did not finish: cancelled(;| while pending)", launcher.err)
    assert "shard 1/3" not in launcher.err and "shard 2/3" not in launcher.err
    print(f"no accounting: 2 shards done, the cancelled one named, exit 1 after {took:.0f} s")
