"""The run's options, declared once for both front ends: `bench run --FLAG` and `pytest --attn-FLAG`.

The sweep axes are the Sweep's (bench.plan.sweep: every kind's axes); the few options that are not axes (profile,
device, threads, output, resume, shard) are listed here. `plan()` turns the values into the checked list of cases,
so both front ends accept, refuse and expand exactly the same input.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.engine import sweeps
from bench.errors import UsageError
from bench.profiles import PROFILE_HELP, default_profile, profile
from bench.results import ResultsError, journal_path, read_run
from bench.results.meta import RunMeta


def positive_int(flag: str, text: Any, default: int | None = None) -> int | None:
    """An option's whole number of at least 1 (`default` when not given), or a UsageError naming `--flag`."""
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--{flag} {text!r}: expected an integer") from None
    if value < 1:
        raise UsageError(f"--{flag} {value} must be at least 1")
    return value


@dataclass(frozen=True)
class Option:
    name: str  # attribute name (argparse dest; pytest's dest is attn_<name>)
    flag: str
    help: str
    kwargs: dict = field(default_factory=dict)  # more argparse keywords: choices, action, default


# Not axes: what to sweep from (profile), where (device, threads), and what to do with the results.
RUN_OPTIONS = (
    Option("profile", "profile", PROFILE_HELP),
    Option("device", "device", "cpu or cuda (default: cuda when present, else cpu)", {"choices": ["cpu", "cuda"]}),
    Option("threads", "threads", "torch CPU threads (default on CPU: every core this process may use but one, so "
           "other work cannot stall each parallel call; recorded)"),
    Option("out", "out", "results file (bench run's default: results/<run-id>.json)", {"type": Path}),
    Option("resume", "resume", "continue the sweep in --out, skipping finished cases", {"action": "store_true"}),
    Option("shard", "shard", "K/N: run the K-th (1-based) of N shards balanced by predicted cost"),
    Option("trace", "trace", "folder: save each case's profiler trace there (Chrome / Perfetto JSON)", {"type": Path}),
)


# Only `bench run` launches processes: these have no --attn- twin (a pytest session cannot start its own workers).
LAUNCH_OPTIONS = (
    Option("devices", "devices", "cuda:0,cuda:1,...: one worker per device, pulling cases from a shared queue"),
    Option("launcher", "launcher", "slurm: submit --shards jobs through submitit; local: the same on this machine",
           {"choices": ["slurm", "local"]}),
    Option("shards", "shards", "N: split the sweep into N jobs (with --launcher)"),
    Option("slurm_partition", "slurm-partition", "Slurm partition of the jobs"),
    Option("slurm_gpus_per_task", "slurm-gpus-per-task", "GPUs per job (default 1); more run as --devices"),
    Option("slurm_time", "slurm-time", "time limit of one job, minutes (default 240)"),
    Option("slurm_account", "slurm-account", "Slurm account to charge"),
)


def add_options(add: Callable[..., Any], flag_prefix: str = "", dest_prefix: str = "") -> None:
    """Declare every option through `add` (argparse's add_argument or pytest's addoption).

    Values stay text until `plan()` parses them: argparse would replace our messages (which name the value
    and the rule) with its own "invalid value".
    """
    for opt in RUN_OPTIONS:
        add(f"--{flag_prefix}{opt.flag}", dest=f"{dest_prefix}{opt.name}", help=opt.help, **opt.kwargs)
    for f in sweeps.axis_fields():
        add(f"--{flag_prefix}{f.metadata['flag']}", dest=f"{dest_prefix}{f.name}", help=f.metadata["help"],
            default=None)


def option_names() -> list[str]:
    return [o.name for o in RUN_OPTIONS] + [f.name for f in sweeps.axis_fields()]


@dataclass(frozen=True)
class RunRequest:
    """What a front end was asked (`bench run`'s flags, pytest's --attn- options), built once from its command
    line: the options that are not axes, and each axis given (as given: text until plan() parses it)."""

    profile: str | None = None
    device: str | None = None
    threads: str | int | None = None
    out: Path | None = None
    resume: bool = False
    shard: str | None = None
    trace: Path | None = None
    axes: Mapping[str, Any] = field(default_factory=dict)  # axis name (Sweep field) -> value; absent: not given

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> RunRequest:
        """From a front end's values by option name (option_names(); None or False: not given)."""
        unknown = sorted(set(values) - set(option_names()))
        if unknown:
            raise UsageError(f"no such run option: {', '.join(unknown)}")
        axes = {f.name: values[f.name] for f in sweeps.axis_fields() if values.get(f.name) is not None}
        out, trace = values.get("out"), values.get("trace")
        return cls(values.get("profile"), values.get("device"), values.get("threads"),
                   Path(out) if out is not None else None, bool(values.get("resume")), values.get("shard"),
                   Path(trace) if trace is not None else None, axes)

    @classmethod
    def from_args(cls, args: Any) -> RunRequest:
        """From parsed arguments (argparse's namespace) holding every run option by name."""
        return cls.of({name: getattr(args, name) for name in option_names()})

    def given(self) -> list[str]:
        """The names of the options given, in option_names()'s order."""
        values = self.values()
        return [name for name in option_names() if values.get(name) not in (None, False)]

    def values(self) -> dict[str, Any]:
        return {"profile": self.profile, "device": self.device, "threads": self.threads, "out": self.out,
                "resume": self.resume, "shard": self.shard, "trace": self.trace, **self.axes}

    def command_line(self, drop: tuple[str, ...] = ()) -> list[str]:
        """The request as `bench run` flags (but `drop`'s), for a person to read and paste (the line that resumes
        an interrupted run); nothing of ours parses them again: a launcher hands its workers the plan itself."""
        flags = {o.name: o.flag for o in RUN_OPTIONS} | {f.name: f.metadata["flag"] for f in sweeps.axis_fields()}
        values = self.values()
        out: list[str] = []
        for name in self.given():
            if name in drop:
                continue
            value = values[name]
            text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
            out.append(f"--{flags[name]}" if value is True else f"--{flags[name]}={text}")
        return out


@dataclass(frozen=True)
class Plan:
    """A checked run: the sweep, its cases (after sharding), and where the results go."""

    device: str
    profile: str
    sweep: sweeps.Sweep
    cases: list[sweeps.Case]
    run_id: str
    sweep_id: str
    out: Path | None
    resume: bool
    threads: int | None
    done: list[str]  # case ids already in the --resume file

    def meta(self, **facts: Any) -> RunMeta:
        """The run's metadata: what this plan is, plus what was measured where it ran (calibration, fingerprint,
        ...) or how it ran (devices). The one place a run's RunMeta is built."""
        plan = {"run_id": self.run_id, "profile": self.profile, "sweep_id": self.sweep_id,
                "axes": self.sweep.to_dict(), "cases": len(self.cases)}
        return RunMeta(**(plan | facts))

    def to_dict(self) -> dict[str, Any]:
        """What a launcher hands its workers (`bench run --planned FILE`): the planned cases as data, so that a
        `--devices` worker or a Slurm shard runs exactly them and plans nothing again. The results file and
        --resume are each worker's own."""
        return {"device": self.device, "profile": self.profile, "sweep": self.sweep.to_dict(),
                "cases": [c.to_dict() for c in self.cases], "run_id": self.run_id, "sweep_id": self.sweep_id,
                "threads": self.threads}

    def shard(self, spec: str) -> Plan:
        """The K-th of N shards of this plan (`spec` K/N, balanced by predicted cost), as `--shard K/N` plans it."""
        cases = sweeps.shard(self.cases, spec)
        return dataclasses.replace(self, cases=cases, run_id=f"{self.run_id}-shard{spec.replace('/', 'of')}",
                                   sweep_id=sweeps.sweep_id(cases), done=[])


def write_planned(path: Path, plan: Plan) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_dict()))
    return path


def planned(path: Path, out: Path | None, resume: bool) -> Plan:
    """The plan a launcher wrote (Plan.to_dict) with this worker's results file; one-line errors name the file."""
    try:
        d = json.loads(Path(path).read_text())
        cases = [sweeps.Case.from_dict(c) for c in d["cases"]]
        sweep = sweeps.Sweep.from_dict(d["sweep"])
        device, profile, run_id, sid, threads = (d[k] for k in ("device", "profile", "run_id", "sweep_id", "threads"))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"--planned {path}: not a plan a launcher wrote ({type(err).__name__}: {err})") from None
    if sweeps.sweep_id(cases) != sid:
        raise UsageError(f"--planned {path}: its cases are not those of sweep {sid} (the file was edited)")
    if out is None:
        raise UsageError("--planned needs --out, this worker's results file")
    return Plan(device, profile, sweep, cases, run_id, sid, Path(out), resume, threads, _done(out, resume, sid))


def plan_of(cases: list[sweeps.Case], sweep: sweeps.Sweep, device: str, profile: str,
            threads: int | None = None) -> Plan:
    """A plan of cases already built (one case for `bench profile`), with no results file."""
    run_id = f"{dt.datetime.now():%Y%m%d-%H%M%S}-{profile}-{device}"
    return Plan(device, profile, sweep, cases, run_id, sweeps.sweep_id(cases), None, False, threads, [])


def cuda_available() -> bool:
    """Whether torch sees a CUDA device: asked only where a run's device is CUDA or not given, so a CPU run plans
    without importing torch."""
    import torch

    return torch.cuda.is_available()


def default_device() -> str:
    return "cuda" if cuda_available() else "cpu"


def plan(request: RunRequest, default_out: bool = True, listing: bool = False, here: bool = True) -> Plan:
    """Check every option and expand the sweep; raises an InputError naming the first problem.

    listing: only the case ids are wanted (`bench run --list`), so the results file is neither read nor checked.
    here: the cases run on this machine; False (Slurm jobs): the device defaults to cuda and is not looked for."""
    device = request.device or (default_device() if here else "cuda")
    if device == "cuda" and here and not listing and not cuda_available():
        raise UsageError("--device cuda: torch sees no CUDA device here")
    name = request.profile or default_profile(request.axes)
    base = profile(name, device)
    axes = {f.name: f for f in sweeps.axis_fields()}
    sweep = base.with_axes(**{k: _parse(axes[k], v) for k, v in request.axes.items()})
    threads = request.threads
    threads = positive_int("threads", threads) if isinstance(threads, str) else threads
    if threads is None and device == "cpu" and here:
        threads = default_cpu_threads()
    whole = plan_of(sweeps.cases(sweep, device), sweep, device, name, threads)
    planned_here = whole.shard(request.shard) if request.shard else whole
    out = request.out
    if out is None and default_out:
        out = Path("results") / f"{planned_here.run_id}.json"
    if request.resume and not listing and request.out is None:
        raise UsageError("--resume needs --out, the results file to continue")
    done = [] if listing or out is None else _done(out, request.resume, planned_here.sweep_id)
    return dataclasses.replace(planned_here, out=out, resume=request.resume, done=done)


def default_cpu_threads() -> int:
    """torch's CPU threads when --threads is not given: every core this process may use but one (at least one).

    With a thread on every core, any other runnable work — the run's own parent and console, an editor, a test
    suite — takes a core from one of torch's threads, and each parallel region then waits for that thread: every
    call of a short kernel stalls alike, so its time is wrong while its interval stays tight (compiled flex decode,
    GQA 8/2, KV 16,384, fp32, on a 2-core machine with a test suite beside it: 7.8–15.8 ms a call with 2 threads,
    1.2–1.7 ms with 1; about 0.7 ms with 2 on a quiet machine). One core left free absorbs that work."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


def _done(out: Path, resume: bool, sid: str) -> list[str]:
    """The case ids the results file `out` holds already (with --resume; it must be of sweep `sid`); without
    --resume, out (and its journal) must not exist. Either way out must be writable."""
    done: list[str] = []
    if resume:
        try:
            previous = read_run(out)
        except ResultsError as err:
            raise UsageError(f"--resume: {err}") from None
        if previous.meta.sweep_id != sid:
            raise UsageError(f"--resume: {out} is from another sweep (sweep_id {previous.meta.sweep_id} != {sid}); "
                             "run the same profile, axes and shard")
        done = previous.case_ids()
    else:
        for path in (Path(out), journal_path(out)):
            if path.exists():
                raise UsageError(f"{path} exists; pass --resume to continue it, or another --out")
    _check_writable(Path(out))
    return done


def _parse(axis: Any, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return axis.metadata["parse"](value)
    except UsageError as err:
        raise UsageError(f"--{axis.metadata['flag']}: {err}") from None


def _check_writable(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".probe-"):
            pass
    except OSError as err:
        raise UsageError(f"cannot write results to {path}: {err.strerror or err}") from None
