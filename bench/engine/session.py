"""One run: a checked plan's cases measured one by one into a results store. Both front ends drive it — `bench run`
directly, the pytest plugin (bench.suite.plugin) from its hooks — and so do `bench run --devices` workers (cases
claimed from a shared queue), `bench ab`'s workers and `bench profile` (one case, no file).

The session holds the order of things; each job is another object's:
  where cases run      bench.engine.execute (in this process, or a worker per case: bench.engine.isolate)
  what runs and when   bench.engine.schedule (predictions, the time budget, the questions' agenda)
  progress and ETA     bench.engine.progress (drawn by bench.engine.console)
  the machine's facts  bench.engine.machine (ceilings, KV caches, the kinds' facts)
  the file             bench.results.ResultsStore

open()    calibrate (or take the given ceilings), measure the presets' KV caches, open the store (new or --resume),
          predict every case's time
measure() one case: its entry (bench.results.entry: its record and rounds), recorded whole or not at all
run()     open, every pending case (or each one the queue hands out) while it fits the time budget (the others
          `skipped`), close; Ctrl-C anywhere ends it cleanly
close()   the end-of-run calibration when complete (the regression check's in-run control), the results file
With isolate=True (`bench run`) a case past its time limit ends `timeout`, one that takes its worker down ends
`crashed`, and a fresh worker takes the next.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.engine import interrupt, machine
from bench.engine.console import Console, LogConsole
from bench.engine.execute import Executor, InProcess, RunnerSetup
from bench.engine.isolate import Isolated
from bench.engine.options import Plan
from bench.engine.progress import Progress
from bench.engine.queue import CaseQueue
from bench.engine.schedule import Schedule
from bench.problem.case import Case
from bench.results import ResultsStore
from bench.results.entry import Entry, case_entry, group_of
from bench.results.meta import Calibration

if TYPE_CHECKING:
    from bench.results.record import Record


class Session:
    def __init__(self, plan: Plan, run_id: str | None = None, *, say: Callable[[str], None] | None = None,
                 trace_dir: Path | None = None, case_budget_s: float | None = None,
                 machine_info: Callable[[], dict] | None = None, commit_info: Callable[[], dict] | None = None,
                 queue: CaseQueue | None = None, ran_on: str | None = None, isolate: bool = False,
                 console: Console | None = None) -> None:
        self.plan = plan
        self.run_id = run_id or plan.run_id
        self.console = console or LogConsole(say)
        self.schedule = Schedule(plan, started=time.perf_counter())
        self.executor: Executor = Isolated(plan.threads) if isolate else InProcess(plan.threads)
        self.trace_dir = trace_dir
        # timing seconds per case
        self.case_budget_s = case_budget_s if case_budget_s is not None else plan.sweep.case_budget_s
        self._infos = (machine_info or (lambda: machine.machine_info_here(self.facts()["environment"])),
                       commit_info or machine.commit_info_here)
        self._facts: dict[str, Any] | None = None
        self.queue = queue  # set: a worker of `bench run --devices`, pulling its cases from the launcher's queue
        self.ran_on = ran_on
        self.progress = Progress(self.console, self.schedule, queue)
        self.by_id = {c.id: c for c in plan.cases}
        done = set(plan.done)
        self.pending = [c for c in plan.cases if c.id not in done]
        self.selected: set[str] = {c.id for c in self.pending}
        self.store: ResultsStore | None = None
        self.setup: RunnerSetup | None = None  # what the cases' Runner is built from (open() sets it)
        self.interrupted = False

    @property
    def say(self) -> Callable[[str], None]:
        return self.console.say

    @property
    def runner(self) -> Any:
        """The in-process Runner (`bench profile` reads its last call), None in a worker process."""
        return getattr(self.executor, "runner", None)

    def facts(self) -> dict[str, Any]:
        """The fingerprint and environment of where the cases run (the executor's), asked once."""
        if self._facts is None:
            self._facts = self.executor.facts(self.plan.device, self.plan.profile)
        return self._facts

    def _threads(self) -> int:
        """torch's CPU threads where the cases run, as the results file's fingerprint says (a resumed one's too)."""
        recorded = self.store.doc.fingerprint if self.store is not None else None
        if recorded and isinstance(recorded.get("threads"), int):
            return recorded["threads"]
        return self.facts()["fingerprint"]["threads"]

    def _mine(self) -> list[Case]:
        return [c for c in self.pending if c.id in self.selected]

    # -- the run's stages ------------------------------------------------------------------------------------
    def open(self, selected: set[str] | None = None, calibration: Calibration | dict | None = None) -> None:
        """Calibrate and open the results store (only when some case is to run, or to resume). Ceilings given
        (bench profile, bench ab) are a single case's: no calibration, no KV caches."""
        if selected is not None:
            self.selected = selected
        if not self.selected and not self.plan.resume:
            return
        if self.plan.resume:
            self.store = ResultsStore.resume(self.plan.out)
            calibration = self.store.doc.meta.calibration
            for note in self.store.doc.notes:
                self.say(f"note: {note}")
            self.say(f"resuming {self.plan.out}: {len(self.plan.done)} cases done, {len(self.selected)} to go")
        else:
            kv = None
            if calibration is None:
                calibration = machine.calibrate(self.executor, self.plan, self.say)
                kv = machine.kv_measured(self.executor, self.plan, self.say)
            self.store = self._new_store(calibration, kv)
        gpu_name = self.facts()["fingerprint"]["gpu_name"] if self.plan.device == "cuda" else None
        self.setup = RunnerSetup(calibration, gpu_name, self.case_budget_s,
                                 str(self.trace_dir) if self.trace_dir else None, self.plan.threads,
                                 self.plan.sweep.cold_plan().to_dict())
        self.executor.start(self.setup)
        self.schedule.predict(calibration, self.case_budget_s)
        mine = self._mine()
        if self.queue is None and mine:
            questions = self.schedule.announce(mine, calibration, self.say)
            if questions is not None:
                self.store.doc.meta.questions = questions
        self.progress.start(mine)
        gc.freeze()  # what is alive now lives to the end: keep the collector from rescanning it between rounds

    def _new_store(self, calibration: Calibration, kv: list | None) -> ResultsStore:
        import pytest_benchmark

        meta = self.plan.meta(run_id=self.run_id, calibration=calibration, fingerprint=self.facts()["fingerprint"],
                              kv_measured=kv, **machine.kind_facts(self.plan))
        machine_info, commit_info = self._infos
        with interrupt.deferred():  # the file and its journal exist whole, or not at all
            interrupt.stage("write")
            return ResultsStore.new(self.plan.out, meta, machine_info(), commit_info(), pytest_benchmark.__version__,
                                    dt.datetime.now().isoformat(timespec="seconds"))

    def measure(self, case: Case) -> Entry:
        """One case, checked and timed: its results entry (its record and rounds), in the store when this returns."""
        t0 = time.perf_counter()
        self.progress.running(case)
        outcome = self.executor.run(case, self.schedule.timeout_s(case))
        wall_s = time.perf_counter() - t0
        record = dataclasses.replace(outcome.record, predicted_s=self.schedule.predicted.get(case.id), wall_s=wall_s,
                                     ran_on=self.ran_on or outcome.record.ran_on)
        self.schedule.ran(case, wall_s)
        return self._keep(case, record, outcome.samples)

    def measure_or_skip(self, case: Case) -> Entry:
        """The case measured, or skipped when it no longer fits the time budget."""
        if not self.schedule.fits(case):
            return self.skip(case)
        return self.measure(case)

    def skip(self, case: Case, reason: str | None = None) -> Entry:
        """A case that does not fit the time budget (or that the plan leaves out, for `reason`): recorded
        `skipped`, its predicted time the reason."""
        from bench.backends import get_backend
        from bench.results.record import new_record

        reason = reason or self.schedule.over_budget_reason(case)
        before = new_record(case, get_backend(case.backend).memory, self._threads())
        record = dataclasses.replace(before, status="skipped", predicted_s=self.schedule.predicted[case.id],
                                     wall_s=0.0, reason=reason)
        return self._keep(case, record, [])

    def _keep(self, case: Case, record: Record, samples: list[float]) -> Entry:
        """The case's entry into the store, whole or not at all, then its progress line."""
        entry = case_entry(record, samples, group=group_of(record))  # its extra_info: the record's to_dict()
        with interrupt.deferred():  # a Ctrl-C while recording waits until the case is in the journal
            interrupt.stage("write")
            if self.store is not None:
                self.store.add(entry)
        self.progress.finished_case(case, record)
        return entry

    def cases(self) -> Iterator[Case]:
        """The cases this process runs: its pending ones, or those a --devices queue hands it one at a time."""
        if self.queue is None:
            left_out, order = self.schedule.order(self._mine())
            for case, reason in left_out:  # recorded at once
                self.skip(case, reason)
            yield from order
            return
        while (case_id := self.queue.claim()) is not None:
            if case_id in self.by_id:
                yield self.by_id[case_id]

    def decide(self) -> None:
        """Once, under a time budget, in worker processes, after every case: the share of the budget kept for it
        (the depth and breadth cases may not use it) re-measures the claims' open conditions in interleaved blocks
        (bench.engine.decide). After the depth, not before it: a depth case joins the conditions it belongs to (a
        shape family's geometric mean), so only then are they the report's."""
        if self.schedule.decided:
            return
        self.schedule.decided = True
        if (self.store is None or self.queue is not None or not isinstance(self.executor, Isolated)
                or self.schedule.decide_s_left() <= 0):
            return
        from bench.engine.decide import decide

        interrupt.stage("decide")
        self.executor.close()  # the blocks run in fresh workers; the next case starts one too
        decide(self.store.doc, self.plan.out, self.by_id, self.setup, self.plan.threads, self.schedule.decide_s_left,
               self.say)  # sets the run's meta.suspects and meta.decided

    def close(self, interrupted: bool) -> None:
        """Write the results file; after a complete run (or a worker's share of one) calibrate once more first."""
        self.interrupted = self.interrupted or interrupted
        if self.store is None:
            return
        complete = not self.interrupted and set(self.by_id) <= set(self.store.doc.case_ids())
        if (complete or (self.queue is not None and not self.interrupted)) and self.progress.finished:
            # The machine's speed again, after the cases: with the start's, the in-run control that lets a
            # regression check tell "this machine was slower today" from "the code got slower".
            self.store.doc.meta.calibration_end = self.executor.calibrate(self.plan.device, ())
            if self.plan.device == "cuda":
                from bench.measure.environment import nvml_state

                self.store.doc.machine_info.setdefault("attnbench", {})["nvml_end"] = nvml_state()
        with interrupt.ignored():  # a second Ctrl-C cannot tear the file: it is written whole
            self.executor.close()
            interrupt.stage("cleanup")
            self.store.finish(complete=complete)

    def run(self) -> int:
        """The whole run; the exit code: 130 interrupted (every finished case kept), 1 a case failed, else 0."""
        try:
            self.open()
            for case in self.cases():
                self.measure_or_skip(case)
            self.decide()
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            try:
                with interrupt.ignored():
                    self.close(self.interrupted)
            except KeyboardInterrupt:  # the test hook's cleanup stage: the file was written all the same
                self.interrupted = True
            self.console.close()
        for line in self.schedule.closing_lines():
            self.say(line)
        if self.interrupted:
            return 130
        return 1 if self.progress.failing else 0
