"""What each job of a `--launcher slurm|local` array runs, kept apart from the launcher: submitit unpickles it in
the job's own process, which then imports only this module and bench.results (not torch: the `bench run` it starts
does that), so a job spends no seconds on imports it does not use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.results import ResultsError, journal_path, read_run


class ShardJob:
    """One job of the array: `bench run ARGV --out OUT` in its own process (torch and CUDA state stay out of
    submitit's), with --resume when OUT was started before: a requeued or resubmitted shard continues its file.
    Checkpointable, so that submitit requeues it when preempted whatever its time limit (it asks `checkpoint`)."""

    def __call__(self, argv: list[str], out: str) -> int:
        path = Path(out)
        if complete(path):
            return 0  # finished before its job was stopped: nothing is left to run
        resume = ["--resume"] if started(path) else []
        return subprocess.run([sys.executable, "-m", "bench", "run", *argv, "--out", out, *resume],
                              check=False).returncode

    def checkpoint(self, argv: list[str], out: str) -> Any:
        """Called by submitit on USR2: the same call again (its journal is the checkpoint)."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, argv, out)


def started(path: Path) -> bool:
    return path.exists() or journal_path(path).exists()


def complete(path: Path) -> bool:
    """The shard's file exists and says it is complete (an unreadable one is not)."""
    try:
        return started(path) and read_run(path).meta.complete is True
    except ResultsError:
        return False
