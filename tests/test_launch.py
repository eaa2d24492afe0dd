"""Launching one sweep over many workers: the shared case queue (real processes), `bench run --devices` with CPU
workers standing in for GPUs, and `--launcher local` (submitit's local executor: real jobs on this machine)."""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.engine import options
from bench.engine.queue import CaseQueue
from bench.launch import devices as devices_mod
from bench.launch import shard_job, slurm
from bench.launch.spec import launch_spec
from bench.results import journal_path, read_run, write_atomic
from tests.results_factory import make_record, make_run

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--profile", "quick", "--backend", "naive,sdpa-math", "--kv-heads", "8,1", "--seq", "32",
        "--phase", "prefill", "--budget", "0.02", "--device", "cpu"]


def _drain(folder: str, out: str) -> None:
    queue = CaseQueue(folder)
    got = []
    while (case := queue.claim()) is not None:
        got.append(case)
        queue.finished()
        time.sleep(0.002)  # a case takes a while: the others get their turn
    Path(out).write_text("\n".join(got))


def test_the_queue_hands_each_case_to_exactly_one_process(tmp_path):
    ids = [f"case-{i}" for i in range(300)]
    queue = CaseQueue.create(tmp_path / "q", ids)
    ctx = multiprocessing.get_context("fork")  # real processes; fork keeps them cheap
    procs = [ctx.Process(target=_drain, args=(str(queue.folder), str(tmp_path / f"w{i}"))) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    taken = [(tmp_path / f"w{i}").read_text().split() for i in range(3)]
    flat = [c for t in taken for c in t]
    assert sorted(flat) == sorted(ids) and len(set(flat)) == len(flat)  # all handed out, none twice
    assert sum(1 for t in taken if t) >= 2  # pulled by several workers, not one after the other
    assert queue.counts() == (300, 300) and queue.claim() is None


@pytest.mark.parametrize("argv, message", [
    (["--devices", "cuda:0,cuda:0"], "listed twice"),
    (["--devices", "gpu1"], "expected CUDA devices"),
    (["--devices", "cuda:0", "--device", "cpu"], "cannot run with --device cpu"),
    (["--shards", "2"], "--shards needs --launcher"),
    (["--launcher", "local"], "needs --shards N"),
    (["--launcher", "local", "--shards", "0"], "--shards 0 must be at least 1"),
    (["--launcher", "local", "--shards", "2", "--shard", "1/2"], "--shard and --launcher"),
])
def test_bad_launch_options_are_one_line(tmp_path, capsys, argv, message):
    assert main(["run", "--profile", "quick", "--out", str(tmp_path / "r.json"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


@pytest.mark.skipif(__import__("torch").cuda.device_count() >= 8, reason="needs a machine without cuda:7")
def test_devices_missing_here_are_refused(tmp_path, capsys):
    assert main(["run", "--profile", "quick", "--devices", "cuda:0,cuda:7", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --devices: ") and "cuda:7" in err and err.count("\n") == 1


def test_without_submitit_the_launcher_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import fails as if it were not installed
    assert main(["run", "--profile", "quick", "--launcher", "slurm", "--shards", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'attnbench[slurm]'" in err


def _plan(argv: list[str]) -> tuple[options.RunRequest, options.Plan]:
    from bench.cli import build_parser

    request = options.RunRequest.from_args(build_parser().parse_args(["run", *argv]))
    return request, options.plan(request)


def test_a_handed_plan_is_the_launchers_cases_and_a_shards_is_what_shard_k_of_n_plans(tmp_path):
    _, whole = _plan([*TINY, "--out", str(tmp_path / "r.json")])
    handed = options.planned(options.write_planned(tmp_path / "p.json", whole), tmp_path / "w.json", False)
    assert (handed.cases, handed.sweep, handed.sweep_id, handed.run_id) == (whole.cases, whole.sweep,
                                                                            whole.sweep_id, whole.run_id)
    assert handed.out == tmp_path / "w.json" and handed.done == []
    _, shard = _plan([*TINY, "--shard", "2/2", "--out", str(tmp_path / "s.json")])
    assert whole.shard("2/2").cases == shard.cases and whole.shard("2/2").sweep_id == shard.sweep_id
    assert whole.shard("2/2").run_id == whole.run_id + "-shard2of2"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["cases"].pop(), "its cases are not those of sweep"),
    (lambda d: d.pop("sweep"), "not a plan a launcher wrote (KeyError"),
    (lambda d: d["sweep"].update(bogus=1), "a sweep does not have bogus"),
])
def test_a_handed_plan_that_was_edited_or_cut_is_refused_by_name(tmp_path, capsys, edit, message):
    _, whole = _plan([*TINY, "--out", str(tmp_path / "r.json")])
    d = whole.to_dict()
    edit(d)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d))
    assert main(["run", "--planned", str(path), "--out", str(tmp_path / "w.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(path) in err, err
    assert not (tmp_path / "w.json").exists()


def test_a_handed_plan_takes_no_axes_and_needs_an_out(tmp_path, capsys):
    _, whole = _plan([*TINY, "--out", str(tmp_path / "r.json")])
    path = options.write_planned(tmp_path / "p.json", whole)
    assert main(["run", "--planned", str(path), "--seq", "64", "--out", str(tmp_path / "w.json")]) == 2
    assert "it takes no --seqs" in capsys.readouterr().err
    assert main(["run", "--planned", str(path)]) == 2
    assert "--planned needs --out" in capsys.readouterr().err


@pytest.mark.slow  # two worker processes run a tiny sweep
def test_devices_queue_with_two_cpu_workers_fills_one_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, plan = _plan([*TINY, "--out", str(tmp_path / "r.json")])
    code = devices_mod.run_on_devices(plan, ("cpu:0", "cpu:1"))  # CPU workers stand in for GPUs
    assert code == 0
    doc = read_run(plan.out)
    assert sorted(doc.case_ids()) == sorted(c.id for c in plan.cases)  # every case once, in one file
    assert doc.meta.complete is True and doc.meta.devices == ["cpu:0", "cpu:1"]
    assert {e.record.ran_on for e in doc.entries()} <= {"cpu:0", "cpu:1"}
    assert doc.meta.calibration.gemm_flops_per_s > 0 and doc.meta.fingerprint["device"] == "cpu"
    assert not devices_mod.parts_folder(plan.out).exists() and not journal_path(plan.out).exists()


@pytest.mark.slow  # submitit's local executor: real jobs, a tiny sweep each
def test_local_launcher_runs_shards_merges_and_resubmits_only_what_is_missing(tmp_path, monkeypatch, capsys):
    pytest.importorskip("submitit")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the jobs import this tree's bench, not an installed one
    monkeypatch.setattr(slurm, "POLL_S", 0.5)
    out = tmp_path / "r.json"
    request, plan = _plan([*TINY, "--out", str(out)])
    spec = launch_spec({"launcher": "local", "shards": "2"}, request)
    folder = slurm.shards_folder(out)
    # shard 2 ran before and finished; shard 1's file is from another sweep, so its job fails
    assert main(["run", *TINY, "--shard", "2/2", "--out", str(folder / "shard-2of2.json")]) == 0
    before = read_run(folder / "shard-2of2.json").entries()
    write_atomic(folder / "shard-1of2.json", make_run([make_record()], complete=False))
    capsys.readouterr()
    code, merged = slurm.launch(plan, spec, out)
    captured = capsys.readouterr()
    assert (code, merged) == (1, False) and not out.exists()
    assert "submitted 1 of 2 shards (1 already complete)" in captured.out and "shards: " in captured.out
    assert "error: shard 1/2 (job " in captured.err and "run the same command again" in captured.err
    # the same command again, once the bad file is gone: shard 1 alone is resubmitted, then all is merged
    (folder / "shard-1of2.json").unlink()
    journal_path(folder / "shard-1of2.json").unlink(missing_ok=True)
    code, merged = slurm.launch(plan, spec, out)
    printed = capsys.readouterr().out
    assert (code, merged) == (0, True), printed
    assert "submitted 1 of 2 shards (1 already complete)" in printed
    doc = read_run(out)
    assert sorted(doc.case_ids()) == sorted(c.id for c in plan.cases)
    assert doc.meta.complete is True and len(doc.meta.shards) == 2
    assert read_run(folder / "shard-2of2.json").entries() == before  # the finished shard was not run again


def _worker_file(path: Path, case_ids: list[str], fingerprint: dict, finish: bool) -> None:
    from bench.results import ResultsStore, RunDocument, RunMeta
    from bench.results.meta import Calibration

    meta = RunMeta(run_id="w", sweep_id="s", calibration=Calibration(1e11, 1e10),
                   fingerprint=fingerprint)
    store = ResultsStore.new(path, meta, {"node": "n"}, {}, "5.3.1", "now")
    for cid in case_ids:
        store.add(RunDocument.from_dict(make_run([make_record(case_id=cid)])).entries()[0])
    if finish:
        store.finish(complete=False)


def test_fold_takes_every_workers_cases_once_even_from_a_killed_worker(tmp_path):
    from bench.results import RunDocument, RunMeta

    _, plan = _plan([*TINY, "--out", str(tmp_path / "r.json")])
    ids = [c.id for c in plan.cases]
    write_atomic(plan.out, RunDocument(meta=RunMeta(run_id="r", sweep_id=plan.sweep_id)))  # the launcher's header
    parts = devices_mod.parts_folder(plan.out)
    fp = {"device": "cpu", "gpu_name": None}
    _worker_file(parts / "worker0.json", ids[:2], fp, finish=True)
    _worker_file(parts / "worker1.json", ids[2:], fp, finish=False)  # killed: its cases are in its journal only
    doc = devices_mod.fold(plan, parts)
    assert sorted(doc.case_ids()) == sorted(ids) and doc.meta.complete is True
    assert doc.meta.fingerprint == fp and doc.meta.calibration.gemm_flops_per_s == 1e11
    assert read_run(plan.out).case_ids() == doc.case_ids() and not parts.exists()


def test_fold_refuses_workers_of_unlike_devices_and_keeps_them(tmp_path):
    from bench.results import ResultsError, RunDocument, RunMeta

    _, plan = _plan([*TINY, "--out", str(tmp_path / "r.json")])
    ids = [c.id for c in plan.cases]
    write_atomic(plan.out, RunDocument(meta=RunMeta(run_id="r", sweep_id=plan.sweep_id)))
    parts = devices_mod.parts_folder(plan.out)
    _worker_file(parts / "worker0.json", ids[:1], {"device": "cuda", "gpu_name": "NVIDIA H200"}, finish=True)
    _worker_file(parts / "worker1.json", ids[1:2], {"device": "cuda", "gpu_name": "NVIDIA A100"}, finish=True)
    with pytest.raises(ResultsError, match="the devices are not alike"):
        devices_mod.fold(plan, parts)
    assert (parts / "worker1.json").exists() and read_run(plan.out).case_ids() == []


def test_a_worker_sees_only_its_device_through_the_given_list(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert devices_mod._worker_env("cuda:3")["CUDA_VISIBLE_DEVICES"] == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")  # e.g. Slurm gave this job three GPUs
    env = devices_mod._worker_env("cuda:1")
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and env["ATTNBENCH_DEVICE_NAME"] == "cuda:1"
    assert devices_mod._worker_env("cpu:0")["CUDA_VISIBLE_DEVICES"] == "4,5,6"  # a CPU worker's env is untouched


# --- Slurm's states, the failure reasons and the shard split, without a cluster (test_slurm_real.py has one) ---

def test_sacct_per_task_a_tasks_own_line_beats_an_array_wide_one():
    from bench.launch.slurm_states import parse_sacct

    text = "22_[0-2%3]|CANCELLED by 0|0:0\n22_1|COMPLETED|0:0\n22_0|RUNNING|0:0\n23_0|FAILED|1:0\n"
    got = parse_sacct(text, "22")
    assert {t: s.state for t, s in got.items()} == {0: "RUNNING", 1: "COMPLETED", 2: "CANCELLED"}
    assert got[2].detail == "by 0" and got[0].live and not got[2].live
    assert parse_sacct("22|TIMEOUT|0:15\n", "22")[0].state == "TIMEOUT"  # one shard: a plain job


def test_squeue_lines_per_task():
    from bench.launch.slurm_states import parse_squeue

    got = parse_squeue("22|0|RUNNING|None\n22|2|PENDING|Resources\n9|1|RUNNING|None\n", "22")
    assert got[0].state == "RUNNING" and got[2].detail == "Resources" and 1 not in got
    assert parse_squeue("22|N/A|PENDING|None\n", "22")[0].state == "PENDING"


def test_array_states_without_accounting_never_wait_without_end(monkeypatch):
    from bench.launch import slurm_states

    queue = {"text": "22|0|RUNNING|None\n22|1|PENDING|Priority\n"}

    def ask(argv):
        if argv[0] == "squeue":
            return queue["text"], None
        return "", "sacct: error: Slurm accounting storage is disabled"

    monkeypatch.setattr(slurm_states, "_ask", ask)
    states = slurm_states.ArrayStates("22", 3, gone_s=10)
    first = states.poll(0.0)
    assert first[0].live and first[1].live and first[2].state == "UNKNOWN"
    queue["text"] = "22|0|COMPLETED|None\n"  # task 1 cancelled while pending: Slurm keeps no record of it
    states.poll(1.0)
    later = states.poll(2.0)
    assert later[0].state == "COMPLETED" and (later[1].state, later[1].detail) == ("CANCELLED", "while pending")
    assert later[2].state == "UNKNOWN" and later[2].live is False
    gone = states.poll(11.0)[2]
    assert gone.state == "GONE" and "accounting storage is disabled" in gone.detail


@pytest.mark.parametrize("state, outcome, expected", [
    (("TIMEOUT", "", "0:15"), None, "hit its time limit (--slurm-time 5 min)"),
    (("FAILED", "", "1:0"), ("error", "UncompletedJobError: Job not requeued because: timed-out too many times.\n"
                                       "  - /x/logs/25_0_0_log.out"), "hit its time limit (--slurm-time 5 min)"),
    (("PREEMPTED", "", ""), None, "preempted and not requeued"),
    (("CANCELLED", "by 0", ""), None, "cancelled by 0"),
    (("CANCELLED", "while pending", ""), None, "cancelled while pending"),
    (("NODE_FAIL", "", ""), None, "node failure"),
    (("OUT_OF_MEMORY", "", "0:125"), None, "out of memory"),
    (("COMPLETED", "", "0:0"), ("success", 2), "bench run exited with code 2: error: x exists"),
    (("FAILED", "", "1:0"), None, "ended failed (exit code 1:0) without completing its file"),
    (("GONE", "sacct: Slurm accounting storage is disabled", ""), None, "left the queue without a state"),
])
def test_failure_lines_carry_the_real_reason_not_the_log_path(state, outcome, expected):
    from bench.launch.slurm_states import TaskState

    why = slurm.reason(TaskState(*state), outcome, 5, "error: x exists")
    assert why.startswith(expected) and "log.out" not in why, why


def test_a_slurm_time_under_the_warning_signal_is_refused(tmp_path, capsys):
    argv = ["run", "--profile", "quick", "--launcher", "local", "--shards", "2", "--slurm-time", "1"]
    assert main([*argv, "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "90 s before the time limit" in err and "at least 2 minutes" in err


def test_a_shard_job_decides_resume_when_it_starts(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(shard_job.subprocess, "run", lambda argv, check: calls.append(argv) or
                        type("Done", (), {"returncode": 0})())
    out = tmp_path / "shard-1of2.json"
    job = shard_job.ShardJob()
    job(["--shard=1/2"], str(out))  # first start: a fresh file
    write_atomic(out, make_run([make_record()], complete=False))
    job(["--shard=1/2"], str(out))  # requeued (same pickled arguments): continues its own file
    assert "--resume" not in calls[0] and calls[1][-1] == "--resume"
    write_atomic(out, make_run([make_record()], complete=True))
    assert job(["--shard=1/2"], str(out)) == 0 and len(calls) == 2  # complete: nothing is run
    assert job.checkpoint(["--shard=1/2"], str(out)).args == (["--shard=1/2"], str(out))


def test_shards_split_every_backend_and_the_predicted_cost_evenly():
    from bench.engine import sweeps

    cases = sweeps.cases(sweeps.profile("quick", "cpu").with_axes(backends=("naive", "sdpa")), "cpu")
    shards = [sweeps.shard(cases, f"{k}/2") for k in (1, 2)]
    for b in ("naive", "sdpa"):
        counts = [sum(c.backend == b for c in s) for s in shards]
        assert max(counts) - min(counts) <= 1, counts  # a stride gave one shard every naive case
    costs = [sum(map(sweeps.predicted_cost, s)) for s in shards]
    assert max(costs) / min(costs) < 1.2, costs
    assert [c.id for c in shards[0]] == [c.id for c in cases if c in shards[0]]  # the sweep's order kept
