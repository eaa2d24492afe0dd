"""`bench run --launcher slurm --shards N [--slurm-partition P] [--slurm-gpus-per-task G] [--slurm-time MIN]
[--slurm-account A]`: the sweep as a job array of N shards submitted through submitit, progress while it waits,
then the shards merged into the one results file and the report built. `--launcher local` runs the very same
code with submitit's local executor: real processes on this machine.

The launcher plans once; each job is an ordinary `bench run --planned <folder>/shard-KofN.plan.json --out
<folder>/shard-KofN.json` of its shard's cases, handed as data (with --devices over its G GPUs when G > 1), the very
cases `bench run --shard K/N` plans; its journal keeps every finished case through a failure or a preemption. The
folder is `.<out>.shards/` beside the results file (submitit's logs in its logs/). Whether a shard resumes is
decided when its job starts, not when it is submitted: a job that Slurm requeues after a preemption runs the command
line of its submission again, and must continue its own file. A shard that failed or stopped is named with the
reason (time limit, preemption, cancellation, node failure, exit code), its job and log; the others are kept, and
running the same command again submits only the shards that are not complete. Without --out the results file is
named after the sweep (profile, device, shard count and the case list's id), so the same command finds its shards
again. The jobs' states come from squeue and sacct (slurm_states.py), and never overrule a shard's own file: a shard
whose file is complete is done.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

from bench.engine import options
from bench.launch.shard_job import ShardJob, complete
from bench.launch.slurm_states import ArrayStates, TaskState
from bench.launch.spec import LaunchSpec, require_submitit
from bench.results import ResultsError, journal_path, read_run, write_atomic

POLL_S = float(os.environ.get("ATTNBENCH_SLURM_POLL_S", "5"))  # the tests poll faster
GONE_S = float(os.environ.get("ATTNBENCH_SLURM_GONE_S", "120"))  # a task unknown this long has left for good


def default_out(plan: options.Plan, shards: int) -> Path:
    return Path("results") / f"{plan.profile}-{plan.device}-{shards}shards-{plan.sweep_id[:8]}.json"


def shards_folder(out: Path) -> Path:
    return out.with_name(f".{out.name}.shards")


def shard_files(out: Path, shards: int) -> list[Path]:
    return [shards_folder(out) / f"shard-{k}of{shards}.json" for k in range(1, shards + 1)]


def planned_path(shard_file: Path) -> Path:
    """Where a shard's planned cases are handed to its job."""
    return shard_file.with_suffix(".plan.json")


def kept_cases(out: Path, shards: int) -> int:
    """Cases the shards of an earlier launch of this command finished: they are not run again."""
    return sum(_cases_done(f) for f in shard_files(out, shards))


def _cases_done(path: Path) -> int:
    """Finished cases of a shard, cheaply: a running one's journal lines after the first."""
    try:
        if journal_path(path).exists():
            return sum(line.startswith(b'{"case"') for line in journal_path(path).read_bytes().split(b"\n"))
        return len(read_run(path).entries()) if path.exists() else 0
    except (OSError, ResultsError):
        return 0


def launch(plan: options.Plan, spec: LaunchSpec, out: Path, trace: Path | None = None) -> tuple[int, bool]:
    """Submit the shards that are not complete, wait, merge. (exit code, merged?) Each job is handed its shard's
    planned cases as a file (`bench run --planned`), so no job plans again; `trace`: where they save profiles."""
    submitit = require_submitit()
    n = spec.shards
    folder = shards_folder(out)
    folder.mkdir(parents=True, exist_ok=True)
    files = shard_files(out, n)
    todo = [k for k in range(1, n + 1) if not complete(files[k - 1])]
    more = (["--devices=" + ",".join(f"cuda:{i}" for i in range(spec.gpus))]
            if spec.gpus > 1 and plan.device == "cuda" else [])
    more += ["--trace", str(trace)] if trace else []
    argvs = [["--planned", str(options.write_planned(planned_path(files[k - 1]), plan.shard(f"{k}/{n}"))), *more]
             for k in todo]
    jobs: list[Any] = []
    if todo:
        slurm = spec.launcher != "local"
        # a timeout ends the shard (max_num_timeout=0); a preemption requeues it (ShardJob.checkpoint)
        executor = submitit.AutoExecutor(folder=folder / "logs", cluster="slurm" if slurm else "local",
                                         slurm_max_num_timeout=0, local_max_num_timeout=0)
        params = {"timeout_min": spec.time_min, "name": f"attnbench-{plan.profile}",
                  "gpus_per_node": spec.gpus if plan.device == "cuda" else 0, "tasks_per_node": 1}
        params |= {f"slurm_{k}": v for k, v in (("partition", spec.partition), ("account", spec.account)) if v}
        executor.update_parameters(**params)
        jobs = executor.map_array(ShardJob(), argvs,
                                  [str(files[k - 1]) for k in todo])
        print(f"submitted {len(jobs)} of {n} shards ({n - len(todo)} already complete) as job "
              f"{jobs[0].job_id.split('_')[0]} ({spec.launcher}); logs in {folder / 'logs'}", flush=True)
        watch = _SlurmWatch(jobs) if slurm else _LocalWatch(jobs)
        ended = _wait(watch, [files[k - 1] for k in todo])
    else:
        print(f"all {n} shards are complete in {folder}", flush=True)
        ended = {}
    failed = [k for k in todo if not complete(files[k - 1])]
    for i, k in enumerate(todo):
        if k in failed:
            j = jobs[i]
            why = reason(ended[i], _outcome(j), spec.time_min, _last_error(j))
            print(f"error: shard {k}/{n} (job {j.job_id}) did not finish: {why}; "
                  f"its {_cases_done(files[k - 1])} finished cases are kept in {files[k - 1]}; log: {j.paths.stdout}",
                  file=sys.stderr, flush=True)
    if failed:
        print(f"error: {len(failed)} of {n} shards incomplete; run the same command again to resubmit only them "
              "(each continues its file)", file=sys.stderr, flush=True)
        return 1, False
    from bench.results.merge import merge_shards

    docs = [read_run(f) for f in files]
    write_atomic(out, merge_shards(docs, [str(f) for f in files]))
    print(f"{out}: {sum(len(d.entries()) for d in docs)} cases merged from {n} shards", flush=True)
    return (1 if any(_outcome(j) == ("success", 1) for j in jobs) else 0), True


def _outcome(j: Any) -> tuple[str, Any] | None:
    """submitit's result pickle: ("success", exit code) or ("error", traceback text); None before (or without)."""
    try:
        with open(j.paths.result_pickle, "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None


def _last_error(j: Any) -> str:
    """The shard's own last `error:` line (bench run's one-line errors go to the job's stderr)."""
    try:
        lines = j.paths.stderr.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in reversed(lines) if ln.startswith("error:")), "")


def reason(state: TaskState, outcome: tuple[str, Any] | None, time_min: int, last_error: str = "") -> str:
    """Why a task ended without completing its shard, in a few words (submitit's own message ends with the log
    path, and its "timed-out" needs translating)."""
    text = str(outcome[1]) if outcome and outcome[0] == "error" else ""
    word = state.state
    if word == "TIMEOUT" or "timed-out" in text:
        return f"hit its time limit (--slurm-time {time_min} min)"
    if word == "PREEMPTED" or "preempted" in text:
        return "preempted and not requeued"
    if word.startswith("CANCELLED"):
        who = f" {state.detail}" if state.detail.startswith(("by", "while")) else ""
        return f"cancelled{who}"
    if word in ("NODE_FAIL", "BOOT_FAIL"):
        return "node failure" if word == "NODE_FAIL" else "its node failed to boot"
    if word == "OUT_OF_MEMORY":
        return "out of memory"
    if word == "DEADLINE":
        return "reached its deadline"
    if outcome and outcome[0] == "success":
        return f"bench run exited with code {outcome[1]}" + (f": {last_error}" if last_error else "")
    if text:
        return f"failed: {text.strip().splitlines()[-1][:200]}"
    if word == "GONE":
        return f"left the queue without a state to read ({state.detail or 'neither squeue nor sacct knows it'})"
    code = f" (exit code {state.exit_code})" if state.exit_code and state.exit_code != "0:0" else ""
    return f"ended {word.lower()}{code} without completing its file"


class _SlurmWatch:
    """Tasks' states from squeue and sacct (slurm_states), not submitit's: it reads an array-wide sacct line as
    every task's, and without accounting it reads UNKNOWN for ever."""

    def __init__(self, jobs: list[Any]) -> None:
        self.states = ArrayStates(jobs[0].job_id.split("_")[0], len(jobs), GONE_S)

    def poll(self) -> dict[int, TaskState]:
        return self.states.poll(time.monotonic())


class _LocalWatch:
    def __init__(self, jobs: list[Any]) -> None:
        self.jobs = jobs

    def poll(self) -> dict[int, TaskState]:
        return {i: TaskState("RUNNING" if not j.done() else j.state.upper()) for i, j in enumerate(self.jobs)}


def _wait(watch: Any, files: list[Path]) -> dict[int, TaskState]:
    """One line whenever the states or the count of finished cases change, until every task has ended or its
    shard's file is complete. Returns each task's last state."""
    last = None
    while True:
        states = watch.poll()
        done = [complete(f) for f in files]
        words = [("COMPLETED" if done[i] and not s.live else s.state) for i, s in sorted(states.items())]
        line = ", ".join(f"{words.count(s)} {s.lower()}" for s in sorted(set(words)))
        line += f"; {sum(_cases_done(f) for f in files)} cases finished"
        if line != last:
            print(f"shards: {line}", flush=True)
            last = line
        if all(done[i] or (not s.live and s.state != "UNKNOWN") for i, s in states.items()):
            return states
        time.sleep(POLL_S)
