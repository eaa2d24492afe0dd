"""Where a run's cases run, behind one interface (Executor) so the session never asks which: in this process
(InProcess, the engine's Runner) or in a worker process with a time limit per case (bench.engine.isolate.Isolated).

Both measure the machine where the cases run (the ceilings, the presets' KV caches, the fingerprint and environment
the results file records: on CUDA the same process, one context) and both hand back the Runner's Outcome. torch is
imported only where cases run, so a run whose cases run in a worker starts without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from bench.engine.outcome import Outcome
from bench.problem.case import Case
from bench.results.meta import Calibration

if TYPE_CHECKING:  # the runner imports torch: loaded when a case runs in this process, not when the CLI starts
    from bench.engine.runner import Runner


@dataclass(frozen=True)
class RunnerSetup:
    """What a Runner is built from: the run's ceilings, the GPU (for its spec sheet), the per-case timing budget,
    where --trace writes, and torch's CPU threads."""

    calibration: Calibration
    gpu_name: str | None
    case_budget_s: float
    trace_dir: str | None
    threads: int | None
    cold: dict[str, float] | None = None  # bench.measure.rotation.ColdPlan's fields (None: its defaults)

    def to_dict(self) -> dict[str, Any]:
        return {"calibration": self.calibration.to_dict(), "gpu_name": self.gpu_name,
                "case_budget_s": self.case_budget_s, "trace_dir": self.trace_dir, "threads": self.threads,
                "cold": self.cold}


def prepare_torch(threads: int | None) -> None:
    """The process that runs cases, before its first measurement: torch seeded, and its CPU threads the run's
    (--threads) when given, so the ceilings are measured with the threads the cases get."""
    import torch

    torch.manual_seed(0)
    if threads:
        torch.set_num_threads(threads)


def facts_here(device: str, profile: str) -> dict[str, Any]:
    """This process's fingerprint and environment (bench.measure.environment), as the results file records them."""
    from bench.measure.environment import environment, fingerprint

    return {"fingerprint": fingerprint(device), "environment": environment(device, profile)}


class Executor(Protocol):
    def facts(self, device: str, profile: str) -> dict[str, Any]:
        """Where the cases run: {"fingerprint": ..., "environment": ...} (facts_here, there)."""
        ...

    def calibrate(self, device: str, dtypes: tuple[str, ...]) -> Calibration:
        """This machine's GEMM and copy ceilings (bench.measure.calibrate), measured where the cases run."""
        ...

    def kv_measured(self, device: str) -> list[dict[str, Any]]:
        """The presets' KV caches allocated and measured (bench.models.kvcache)."""
        ...

    def start(self, setup: RunnerSetup) -> None:
        """Ready to run cases: the Runner built (in a worker: each fresh worker builds one)."""
        ...

    def run(self, case: Case, timeout_s: float | None) -> Outcome:
        """One case's outcome; timeout_s is honoured where a case can be stopped (a worker)."""
        ...

    def close(self) -> None: ...


class InProcess:
    """Cases in this process: fastest, nothing to start, but a hang or a crash is the run's."""

    def __init__(self, threads: int | None = None) -> None:
        self.runner: Runner | None = None  # `bench profile` reads the last call and its timing from it
        self.threads = threads
        self.prepared = False

    def _prepare(self) -> None:
        if not self.prepared:
            prepare_torch(self.threads)
            self.prepared = True

    def facts(self, device: str, profile: str) -> dict[str, Any]:
        self._prepare()
        return facts_here(device, profile)

    def calibrate(self, device: str, dtypes: tuple[str, ...]) -> Calibration:
        from bench.measure.calibrate import calibrate

        self._prepare()
        return calibrate(device, dtypes)

    def kv_measured(self, device: str) -> list[dict[str, Any]]:
        from bench.models.kvcache import measured_presets

        self._prepare()
        return measured_presets(device)

    def start(self, setup: RunnerSetup) -> None:
        from pathlib import Path

        from bench.engine.runner import Runner
        from bench.measure.cold import ColdPlan

        self._prepare()

        self.runner = Runner(setup.calibration, setup.gpu_name, case_budget_s=setup.case_budget_s,
                             trace_dir=Path(setup.trace_dir) if setup.trace_dir else None,
                             cold=ColdPlan(**setup.cold) if setup.cold else None)

    def run(self, case: Case, timeout_s: float | None) -> Outcome:
        assert self.runner is not None, "start() first"
        return self.runner.run(case)  # nothing in-process can stop a case: timeout_s is the worker's

    def close(self) -> None:
        pass

