"""A run's progress: cases done out of how many, the ETA, and each finished case's line on the console
(bench.engine.console draws it). Under `bench run --devices` the shared queue's counts are the whole run's."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from bench.engine.console import Console
from bench.engine.queue import CaseQueue
from bench.engine.schedule import Schedule
from bench.problem.case import Case
from bench.results.status import EXIT_1, PROGRESS_LABELS

if TYPE_CHECKING:  # bench.results.record imports the case kinds: not at the CLI's start
    from bench.results.record import Record


class Progress:
    def __init__(self, console: Console, schedule: Schedule, queue: CaseQueue | None) -> None:
        self.console, self.schedule, self.queue = console, schedule, queue
        self.finished = 0
        self.failing = 0  # cases whose status fails the run (bench.results.status.EXIT_1)
        self.total = 0
        self.left: dict[str, Case] = {}  # the cases still to run or skip, for the ETA
        self.t0 = time.perf_counter()

    def start(self, mine: list[Case]) -> None:
        """The clock and the count start when the cases do (after calibration)."""
        self.left = {c.id: c for c in mine}
        self.total = len(mine)
        self.t0 = time.perf_counter()

    def running(self, case: Case) -> None:
        self.console.running(case.id)

    def finished_case(self, case: Case, record: Record) -> None:
        self.left.pop(case.id, None)
        self.finished += 1
        self.failing += record.status in EXIT_1
        # a worker of --devices counts every worker's cases, so its line reads as the whole run's progress
        done, total = (self.queue.finished(), len(self.queue)) if self.queue else (self.finished, self.total)
        if self.queue is not None:  # workers start together: the queue's rate is the run's
            eta = (time.perf_counter() - self.t0) / max(done, 1) * max(0, total - done)
        else:
            eta = self.schedule.eta_s(list(self.left.values()))
        status = record.status or ""
        if status == "ok" and record.median_s:
            ci = ((record.ci_high_s or 0) - (record.ci_low_s or 0)) / 2 / record.median_s * 100
            detail = (f"{record.median_s * 1e3:9.3f} ms ±{ci:4.1f}%  {(record.tflops or 0) * 1e3:8.1f} GFLOP/s"
                      f"{'  noisy' if record.noisy else ''}")
        else:
            detail = record.reason[:90]
        self.console.finished(f"{case.id}  {PROGRESS_LABELS[status]}  {detail}", status, done, total, eta,
                              quiet=case.id in self.schedule.quiet)
