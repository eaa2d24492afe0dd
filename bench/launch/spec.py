"""How `bench run` runs its plan, checked once from the command line: here (the default), one worker per device
(`--devices`), or as a job array (`--launcher slurm|local --shards N`). The launchers read this value, never the
flags."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.engine.options import LAUNCH_OPTIONS, RunRequest, positive_int
from bench.errors import UsageError

INSTALL = "pip install 'attnbench[slurm]'"
DEFAULT_TIME_MIN = 240
SIGNAL_S = 90  # submitit asks Slurm for USR2 this long before the time limit, and stops the job when it comes
MIN_TIME_MIN = 2  # so that a job runs at all before that signal


@dataclass(frozen=True)
class LaunchSpec:
    devices: tuple[str, ...] = ()  # --devices: one worker per CUDA device
    launcher: str | None = None  # slurm | local: a job array of `shards` jobs
    shards: int = 1
    gpus: int = 1  # per job; more than one run as --devices inside the job
    time_min: int = DEFAULT_TIME_MIN
    partition: str | None = None
    account: str | None = None


def require_submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise UsageError(f"--launcher needs the submitit package: {INSTALL}") from None
    return submitit


def parse_devices(text: str) -> tuple[str, ...]:
    names = [d.strip() for d in text.split(",") if d.strip()]
    bad = [d for d in names if not re.fullmatch(r"cuda:\d+", d)]
    if not names or bad:
        raise UsageError(f"--devices {text!r}: expected CUDA devices, e.g. cuda:0,cuda:1")
    if len(set(names)) != len(names):
        raise UsageError(f"--devices {text!r}: a device is listed twice")
    return tuple(names)


def launch_spec(given: Mapping[str, Any], request: RunRequest) -> LaunchSpec:
    """The launch options (`given`, by LAUNCH_OPTIONS name) checked against the run's request, as one-line
    UsageErrors; a launcher needs submitit importable."""
    devices = parse_devices(given["devices"]) if given.get("devices") else ()
    if devices and request.device == "cpu":
        raise UsageError("--devices lists CUDA devices; it cannot run with --device cpu")
    if not given.get("launcher"):
        used = [o.flag for o in LAUNCH_OPTIONS if o.name not in ("devices", "launcher") and given.get(o.name)]
        if used:
            raise UsageError(f"--{used[0]} needs --launcher slurm (or local)")
        return LaunchSpec(devices=devices)
    if request.shard:
        raise UsageError("--shard and --launcher: the launcher makes the shards itself (--shards N)")
    if devices:
        raise UsageError("--devices and --launcher: a job uses its --slurm-gpus-per-task GPUs as its devices")
    if request.resume:
        raise UsageError("--resume with --launcher: run the same command again; it resubmits what is missing")
    shards = positive_int("shards", given.get("shards"))
    if shards is None:
        raise UsageError("--launcher needs --shards N, the number of jobs")
    time_min = positive_int("slurm-time", given.get("slurm_time"), DEFAULT_TIME_MIN)
    if time_min < MIN_TIME_MIN:
        raise UsageError(f"--slurm-time {time_min}: submitit stops a job at its warning signal, {SIGNAL_S} s before "
                         f"the time limit; give at least {MIN_TIME_MIN} minutes")
    require_submitit()
    return LaunchSpec((), given["launcher"], shards,
                      positive_int("slurm-gpus-per-task", given.get("slurm_gpus_per_task"), 1), time_min,
                      given.get("slurm_partition"), given.get("slurm_account"))
