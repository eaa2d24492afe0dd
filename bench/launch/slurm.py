"""`bench run --launcher slurm --shards N [--slurm-partition P] [--slurm-gpus-per-task G] [--slurm-time MIN]
[--slurm-account A]`: the sweep as a job array of N shards submitted through submitit, progress while it waits,
then the shards merged into the one results file and the report built. `--launcher local` runs the very same
code with submitit's local executor: real processes on this machine.

Each job is an ordinary `bench run --shard K/N --out <folder>/shard-KofN.json` (with --devices over its G GPUs
when G > 1); its journal keeps every finished case through a failure or a preemption. The folder is
`.<out>.shards/` beside the results file (submitit's logs in its logs/). A shard that failed or stopped is
named with its job and log; the others are kept, and running the same command again submits only the shards
that are not complete, each continuing its own file (--resume). Without --out the results file is named after
the sweep (profile, device, shard count and the case list's id), so the same command finds its shards again.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.engine import options
from bench.errors import UsageError
from bench.results import ResultsError, journal_path, read_run, write_atomic

INSTALL = "pip install 'attnbench[slurm]'"
POLL_S = 5.0
DEFAULT_TIME_MIN = 240


def require_submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise UsageError(f"--launcher needs the submitit package: {INSTALL}") from None
    return submitit


def check(values: dict[str, Any], launch: dict[str, Any]) -> dict[str, Any]:
    """The launch options checked (one-line UsageErrors); submitit must be importable."""
    if not launch.get("launcher"):
        used = [o.flag for o in options.LAUNCH_OPTIONS if o.name not in ("devices", "launcher") and launch.get(o.name)]
        if used:
            raise UsageError(f"--{used[0]} needs --launcher slurm (or local)")
        return {}
    if values.get("shard"):
        raise UsageError("--shard and --launcher: the launcher makes the shards itself (--shards N)")
    if launch.get("devices"):
        raise UsageError("--devices and --launcher: a job uses its --slurm-gpus-per-task GPUs as its devices")
    shards = options.positive_int("shards", launch.get("shards"))
    if shards is None:
        raise UsageError("--launcher needs --shards N, the number of jobs")
    require_submitit()
    return {"launcher": launch["launcher"], "shards": shards,
            "gpus": options.positive_int("slurm-gpus-per-task", launch.get("slurm_gpus_per_task"), 1),
            "time_min": options.positive_int("slurm-time", launch.get("slurm_time"), DEFAULT_TIME_MIN),
            "partition": launch.get("slurm_partition"), "account": launch.get("slurm_account")}


def default_out(plan: options.Plan, shards: int) -> Path:
    return Path("results") / f"{plan.profile}-{plan.device}-{shards}shards-{plan.sweep_id[:8]}.json"


def shards_folder(out: Path) -> Path:
    return out.with_name(f".{out.name}.shards")


def run_shard(argv: list[str]) -> int:
    """One job of the array: `bench run ARGV` in its own process (torch and CUDA state stay out of submitit's)."""
    return subprocess.run([sys.executable, "-m", "bench", "run", *argv], check=False).returncode


def _started(path: Path) -> bool:
    return path.exists() or journal_path(path).exists()


def _complete(path: Path) -> bool:
    try:
        return _started(path) and read_run(path).meta.complete is True
    except ResultsError:
        return False


def _cases_done(path: Path) -> int:
    """Finished cases of a running shard, cheaply: its journal's lines after the first."""
    try:
        if journal_path(path).exists():
            return sum(line.startswith(b'{"case"') for line in journal_path(path).read_bytes().split(b"\n"))
        return len(read_run(path).entries()) if path.exists() else 0
    except (OSError, ResultsError):
        return 0


def launch(values: dict[str, Any], plan: options.Plan, job: dict[str, Any], out: Path) -> tuple[int, bool]:
    """Submit the shards that are not complete, wait, merge. (exit code, merged?)"""
    submitit = require_submitit()
    n = job["shards"]
    folder = shards_folder(out)
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / f"shard-{k}of{n}.json" for k in range(1, n + 1)]
    todo = [k for k in range(1, n + 1) if not _complete(files[k - 1])]
    kept = n - len(todo)
    base = options.as_flags({k: v for k, v in values.items() if k not in ("out", "resume", "shard")}
                            | {"device": plan.device}, "")
    if job["gpus"] > 1 and plan.device == "cuda":
        base.append("--devices=" + ",".join(f"cuda:{i}" for i in range(job["gpus"])))
    argvs = [[*base, f"--shard={k}/{n}", "--out", str(files[k - 1]), *(["--resume"] if _started(files[k - 1]) else [])]
             for k in todo]
    jobs: list[Any] = []
    if todo:
        executor = submitit.AutoExecutor(folder=folder / "logs", cluster="local" if job["launcher"] == "local"
                                         else "slurm")
        params = {"timeout_min": job["time_min"], "name": f"attnbench-{plan.profile}",
                  "gpus_per_node": job["gpus"] if plan.device == "cuda" else 0, "tasks_per_node": 1}
        params |= {f"slurm_{k}": job[k] for k in ("partition", "account") if job[k]}
        executor.update_parameters(**params)
        jobs = executor.map_array(run_shard, argvs)
        print(f"submitted {len(jobs)} of {n} shards ({kept} already complete) as job {jobs[0].job_id.split('_')[0]} "
              f"({job['launcher']}); logs in {folder / 'logs'}", flush=True)
    else:
        print(f"all {n} shards are complete in {folder}", flush=True)
    _wait(jobs, [files[k - 1] for k in todo], len(plan.cases))
    failed = []
    for k, j in zip(todo, jobs, strict=True):
        if not _complete(files[k - 1]):
            failed.append(k)
            why = j.exception()
            last = str(why).strip().splitlines()[-1][:160] if why else f"exit code {_result(j)}"
            print(f"error: shard {k}/{n} (job {j.job_id}, {j.state}) did not finish: {last}; its "
                  f"{_cases_done(files[k - 1])} finished cases are kept in {files[k - 1]}; log: {j.paths.stdout}",
                  file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} of {n} shards incomplete; run the same command again to resubmit only them",
              file=sys.stderr)
        return 1, False
    from bench.results.merge import merge_shards

    docs = [read_run(f) for f in files]
    write_atomic(out, merge_shards(docs, [str(f) for f in files]))
    print(f"{out}: {sum(len(d.entries()) for d in docs)} cases merged from {n} shards", flush=True)
    return (1 if any(_result(j) == 1 for j in jobs) else 0), True


def _result(j: Any) -> int | None:
    try:
        return int(j.result())
    except Exception:  # a failed or cancelled job has no result: its exception says why
        return None


def _wait(jobs: list[Any], files: list[Path], total: int) -> None:
    """One line whenever the states or the count of finished cases change, until every job is done."""
    last = None
    while jobs:
        states = [j.state for j in jobs]
        done = sum(_cases_done(f) for f in files)
        line = ", ".join(f"{states.count(s)} {s.lower()}" for s in sorted(set(states))) + f"; {done} cases finished"
        if line != last:
            print(f"shards: {line}", flush=True)
            last = line
        if all(j.done() for j in jobs):
            return
        time.sleep(POLL_S)
