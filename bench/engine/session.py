"""One run: a checked plan's cases measured one by one into a results store. Both front ends drive it — `bench run`
directly, the pytest plugin (bench.suite.plugin) from its hooks — and so do `bench run --devices` workers (cases
claimed from a shared queue), `bench ab`'s workers and `bench profile` (one case, no file).

open()    calibrate (or take the given ceilings), measure the presets' KV caches, open the store (new or --resume),
          predict every case's time (bench.engine.cost)
measure() one case: the Runner's record, its entry (bench.results.entry), recorded whole or not at all
run()     open, every pending case (or each one the queue hands out) while it fits the time budget (the others
          `skipped`, bench.engine.budget), close; Ctrl-C anywhere ends it cleanly
close()   the end-of-run calibration when complete (the regression check's in-run control), the results file
With isolate=True (`bench run`) cases run in a worker process (bench.engine.isolate): a case past its time limit
ends `timeout`, one that takes its worker down ends `crashed`, and a fresh worker takes the next.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.engine import interrupt
from bench.engine.budget import Planner, priority_order
from bench.engine.console import Console, LogConsole
from bench.engine.console import fmt_eta as fmt_s
from bench.engine.cost import predict_all
from bench.engine.isolate import IsolatedRunner
from bench.engine.options import Plan
from bench.engine.queue import DEVICE_ENV, QUEUE_ENV, CaseQueue
from bench.engine.sweeps import Case
from bench.results import ResultsStore, RunMeta
from bench.results.entry import case_entry, group_of
from bench.status import EXIT_1, PROGRESS_LABELS

MIN_TIMEOUT_S = 60.0  # a case's default limit is never under a minute (a compile, a loaded machine)
TIMEOUT_FACTOR = 10.0  # ... and a generous multiple of its prediction: only a hang gets near it


def machine_info_here(device: str, profile: str) -> dict[str, Any]:
    """pytest-benchmark's machine info, with ours (bench.measure.environment) under "attnbench"."""
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

    from bench.measure.environment import environment

    return pytest_benchmark_generate_machine_info() | {"attnbench": environment(device, profile)}


def commit_info_here() -> dict[str, Any]:
    """pytest-benchmark's git info of the working directory."""
    from pytest_benchmark.utils import get_commit_info

    return get_commit_info()


class Session:
    def __init__(self, plan: Plan, run_id: str | None = None, *, say: Callable[[str], None] | None = None,
                 trace_dir: Path | None = None, budget_s: float | None = None,
                 machine_info: Callable[[], dict] | None = None, commit_info: Callable[[], dict] | None = None,
                 queue: CaseQueue | None = None, ran_on: str | None = None, isolate: bool = False,
                 console: Console | None = None) -> None:
        self.started = time.perf_counter()  # the time budget counts from here, calibration included
        self.plan = plan
        self.run_id = run_id or plan.run_id
        self.console = console or LogConsole(say)
        self.say = self.console.say
        self.trace_dir = trace_dir
        self.budget_s = budget_s if budget_s is not None else plan.sweep.budget_s
        self._machine_info = machine_info or (lambda: machine_info_here(plan.device, plan.profile))
        self._commit_info = commit_info or commit_info_here
        if queue is None and os.environ.get(QUEUE_ENV):  # a worker of `bench run --devices` (bench.launch.devices)
            queue, ran_on = CaseQueue(os.environ[QUEUE_ENV]), os.environ.get(DEVICE_ENV)
        self.queue = queue
        self.ran_on = ran_on
        self.by_id = {c.id: c for c in plan.cases}
        done = set(plan.done)
        self.pending = [c for c in plan.cases if c.id not in done]
        self.selected: set[str] = {c.id for c in self.pending}
        self.store: ResultsStore | None = None
        self.runner: Any = None
        self.finished = 0
        self.failing = 0
        self.interrupted = False
        self.t0 = time.perf_counter()
        self.isolated = IsolatedRunner() if isolate else None
        self.predicted: dict[str, float] = {}
        budget = plan.sweep.time_budget_s
        self.planner = Planner(budget if budget is not None and budget != float("inf") else None)
        self.left: set[str] = set()  # the cases still to run or skip, for the ETA
        self.agenda: Any = None  # bench.engine.agenda.Agenda: the order under a time budget, said before the first case
        self.quiet: set[str] = set()  # cases the plan announced as a group: counted, not listed one by one
        self.over_budget = 0  # cases recorded skipped because they no longer fit the time budget

    # -- the run's stages ------------------------------------------------------------------------------------
    def open(self, selected: set[str] | None = None, calibration: dict | None = None) -> None:
        """Calibrate and open the results store (only when some case is to run, or to resume)."""
        import torch

        from bench.engine.runner import Runner
        from bench.measure.environment import fingerprint, gpu_name

        if selected is not None:
            self.selected = selected
        if not self.selected and not self.plan.resume:
            return
        torch.manual_seed(0)
        if self.plan.threads:
            torch.set_num_threads(self.plan.threads)
        if self.plan.resume:
            self.store = ResultsStore.resume(self.plan.out)
            calibration = self.store.doc.meta.calibration
            for note in self.store.doc.notes:
                self.say(f"note: {note}")
            self.say(f"resuming {self.plan.out}: {len(self.plan.done)} cases done, {len(self.selected)} to go")
        else:
            kv = None
            if calibration is None:  # a sweep's run; ceilings given are a single case's (bench profile, bench ab)
                calibration, kv = self._calibrate(), self._kv_measured()
            meta = RunMeta(run_id=self.run_id, profile=self.plan.profile, sweep_id=self.plan.sweep_id,
                           axes=dataclasses.asdict(self.plan.sweep), calibration=calibration,
                           fingerprint=fingerprint(self.plan.device), cases=len(self.plan.cases),
                           models=self._models(), kv_measured=kv)
            import pytest_benchmark

            with interrupt.deferred():  # the file and its journal exist whole, or not at all
                interrupt.stage("write")
                self.store = ResultsStore.new(self.plan.out, meta, self._machine_info(), self._commit_info(),
                                              pytest_benchmark.__version__,
                                              dt.datetime.now().isoformat(timespec="seconds"))
        if self.isolated is not None:
            self.isolated.set_runner(calibration, gpu_name(self.plan.device), self.budget_s,
                                     str(self.trace_dir) if self.trace_dir else None, self.plan.threads)
        else:
            self.runner = Runner(calibration, gpu_name(self.plan.device), budget_s=self.budget_s,
                                 trace_dir=self.trace_dir)
        self._predict(calibration)
        self._plan_questions(calibration)
        gc.freeze()  # what is alive now lives to the end: keep the collector from rescanning it between rounds
        self.t0 = time.perf_counter()

    def _ceilings(self, dtypes: tuple[str, ...]) -> dict:
        if self.isolated is not None:  # measured where the cases run (on CUDA: the same process, one context)
            return self.isolated.ask({"cmd": "calibrate", "device": self.plan.device, "dtypes": list(dtypes)})[
                "calibration"]
        from bench.measure.calibrate import calibrate

        return calibrate(self.plan.device, dtypes)

    def _predict(self, calibration: dict) -> None:
        """Every case's predicted seconds (bench.engine.cost), for the ETA, the time budget and the record."""
        self.predicted = predict_all(self.plan.cases, calibration, self.budget_s)
        self.left = {c.id for c in self.pending if c.id in self.selected}

    def _plan_questions(self, calibration: dict) -> None:
        """Under a time budget, the questions' agenda (bench.engine.agenda); in any run, one line for the backends
        this device cannot run at all instead of one per case."""
        from bench.engine.agenda import cut_dtypes, device_reason, make_agenda, plan_lines
        from bench.engine.questions import Context

        mine = [c for c in self.pending if c.id in self.selected]
        if self.queue is not None or not mine:
            return
        emulated = cut_dtypes(self.plan, calibration)
        ctx = Context(self.plan.device, self.predicted, emulated, calibration)
        unrunnable = {c.id for c in mine if device_reason(c)}
        self.quiet = set(unrunnable)
        if self.planner.budget_s is None:
            if unrunnable:
                backends = sorted({c.backend for c in mine if c.id in unrunnable})
                reasons = sorted({device_reason(c) or "" for c in mine if c.id in unrunnable})
                self.say(f"{len(backends)} backends cannot run here ({'; '.join(reasons)}): their {len(unrunnable)} "
                         "cases are recorded unsupported")
            return
        elapsed = time.perf_counter() - self.started
        self.agenda = make_agenda(mine, ctx, self.planner.budget_s, elapsed)
        for line in plan_lines(self.agenda, self.planner.budget_s, elapsed, emulated):
            self.say(line)
        if self.store is not None:
            self.store.doc.meta.questions = [a.as_dict() for a in self.agenda.answers]

    def _calibrate(self) -> dict:

        self.say(f"calibrating {self.plan.device} (GEMM and copy ceilings)...")
        interrupt.stage("calibrate")
        calibration = self._ceilings(self.plan.sweep.dtypes)
        self.say(f"  GEMM {calibration['gemm_flops_per_s'] / 1e9:.1f} GFLOP/s, "
                 f"copy {calibration['copy_bytes_per_s'] / 1e9:.1f} GB/s")
        for note in calibration.get("notes") or []:
            self.say(f"  note: {note}")
        for dtype in calibration.get("emulated") or []:
            share = calibration[f"gemm_flops_per_s_{dtype}"] / calibration["gemm_flops_per_s"]
            self.say(f"  {dtype} is emulated on this CPU (its GEMM runs at {100 * share:.1f}% of fp32's): its "
                     "cases are slow for want of hardware, not code")
        return calibration

    def _models(self) -> dict | None:
        """--model-config: each model's layers per kind and KV bytes per token, for the report's model section."""
        if not self.plan.sweep.models:
            return None
        from bench.models.config import model_facts
        from bench.models.config_json import load_config

        configs = [load_config(name) for name in self.plan.sweep.models]
        return {cfg.name: model_facts(cfg, self.plan.sweep.dtypes) for cfg in configs}

    def _kv_measured(self) -> list[dict]:
        """The presets' KV caches as MHA/GQA/MQA, allocated and measured: the KV-shrink claim's evidence."""
        self.say("measuring the presets' KV caches (MHA / GQA / MQA)...")
        if self.isolated is not None:
            return self.isolated.ask({"cmd": "kv", "device": self.plan.device})["kv_measured"]
        from bench.models.kvcache import measured_presets

        return measured_presets(self.plan.device)

    def measure(self, case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
        """One case, checked and timed: its record and its results entry, which is in the store when this returns."""
        t0 = time.perf_counter()
        predicted = self.predicted.get(case.id)
        self.console.running(case.id)
        if self.isolated is not None:
            outcome = self.isolated.run(case, self._record(case), self._timeout(predicted))
        else:
            outcome = self.runner.run(case)
        record = outcome.record
        record.update(predicted_s=predicted, wall_s=time.perf_counter() - t0)
        if self.ran_on:
            record["ran_on"] = self.ran_on
        if predicted is not None:
            self.planner.ran(predicted, record["wall_s"], case.shape.dtype)
        return self._keep(case, record, outcome.samples)

    def measure_or_skip(self, case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
        """The case measured, or skipped when it no longer fits the time budget."""
        if self.predicted and not self.planner.fits(self.predicted[case.id], time.perf_counter() - self.started,
                                                    case.shape.dtype):
            return self.skip(case)
        return self.measure(case)

    def skip(self, case: Case, reason: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """A case that does not fit the time budget (or that the plan leaves out, for `reason`): recorded
        `skipped`, its predicted time the reason."""
        predicted = self.predicted[case.id]
        if reason is None:  # one line for them all at the end, not one per case
            self.over_budget += 1
            self.quiet.add(case.id)
        reason = reason or (f"predicted {predicted:.1f} s (x{self.planner.scale(case.shape.dtype):.2f} as this run "
                            f"goes): over the {self.planner.budget_s:.0f} s time budget")
        record = dict(self._record(case), status="skipped", predicted_s=predicted, wall_s=0.0, reason=reason)
        return self._keep(case, record, [])

    def _record(self, case: Case) -> dict[str, Any]:
        from bench.backends import get_backend
        from bench.record import new_record

        return new_record(case, get_backend(case.backend).memory)

    def _timeout(self, predicted: float | None) -> float | None:
        """--case-timeout, or by default a generous multiple of the prediction, never under a minute."""
        given = self.plan.sweep.case_timeout_s
        if given is not None:
            return None if given == float("inf") else given
        return max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * (predicted or 0.0))

    def _keep(self, case: Case, record: dict[str, Any], samples: list[float]) -> tuple[dict, dict]:
        """The case's entry into the store, whole or not at all, then its progress line."""
        self.left.discard(case.id)
        entry = case_entry(record, samples, group=group_of(record))
        with interrupt.deferred():  # a Ctrl-C while recording waits until the case is in the journal
            interrupt.stage("write")
            if self.store is not None:
                self.store.add(entry)
        self._progress(case, record)
        return record, entry

    def cases(self) -> Iterator[Case]:
        """The cases this process runs: its pending ones, or those a --devices queue hands it one at a time."""
        if self.queue is None:
            mine = [c for c in self.pending if c.id in self.selected]
            if self.agenda is not None:  # the cases left out first (recorded at once), then the questions' order
                self.quiet |= set(self.agenda.left_out)
                for case in mine:
                    if case.id in self.agenda.left_out:
                        self.skip(case, self.agenda.left_out[case.id])
                mine = [c for c in self.agenda.order if c.id not in self.agenda.left_out]
            elif self.planner.budget_s is not None:  # the small shapes of every family first
                mine = priority_order(mine, self.predicted)
            else:  # the cases this device cannot run first: they are recorded at once
                mine = sorted(mine, key=lambda c: c.id not in self.quiet)
            yield from mine
            return
        while (case_id := self.queue.claim()) is not None:
            if case_id in self.by_id:
                yield self.by_id[case_id]

    def close(self, interrupted: bool) -> None:
        """Write the results file; after a complete run (or a worker's share of one) calibrate once more first."""
        self.interrupted = self.interrupted or interrupted
        if self.store is None:
            return
        complete = not self.interrupted and set(self.by_id) <= set(self.store.doc.case_ids())
        if (complete or (self.queue is not None and not self.interrupted)) and self.finished:
            # The machine's speed again, after the cases: with the start's, the in-run control that lets a
            # regression check tell "this machine was slower today" from "the code got slower".
            self.store.doc.meta.calibration_end = self._ceilings(())
            if self.plan.device == "cuda":
                from bench.measure.environment import nvml_state

                self.store.doc.machine_info.setdefault("attnbench", {})["nvml_end"] = nvml_state()
        with interrupt.ignored():  # a second Ctrl-C cannot tear the file: it is written whole
            if self.isolated is not None:
                self.isolated.close()
            interrupt.stage("cleanup")
            self.store.finish(complete=complete)

    def run(self) -> int:
        """The whole run; the exit code: 130 interrupted (every finished case kept), 1 a case failed, else 0."""
        try:
            self.open()
            for case in self.cases():
                self.measure_or_skip(case)
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            try:
                with interrupt.ignored():
                    self.close(self.interrupted)
            except KeyboardInterrupt:  # the test hook's cleanup stage: the file was written all the same
                self.interrupted = True
            self.console.close()
        if self.over_budget:
            self.say(f"{self.over_budget} cases did not fit the {fmt_s(self.planner.budget_s or 0)} time budget: "
                     "recorded skipped (--time-budget none runs them all)")
        if self.interrupted:
            return 130
        return 1 if self.failing else 0

    # -- progress -------------------------------------------------------------------------------------------
    def _progress(self, case: Case, record: dict[str, Any]) -> None:
        self.finished += 1
        self.failing += record["status"] in EXIT_1
        # a worker of --devices counts every worker's cases, so its line reads as the whole run's progress
        done, total = (self.queue.finished(), len(self.queue)) if self.queue else (self.finished, len(self.selected))
        if self.queue is not None:  # workers start together: the queue's rate is the run's
            eta = (time.perf_counter() - self.t0) / max(done, 1) * max(0, total - done)
        else:  # the cost model's seconds left, scaled by how it has fared in this run
            eta = self.planner.eta_s([(self.predicted[c], self.by_id[c].shape.dtype) for c in self.left],
                                     time.perf_counter() - self.started)
        status = record["status"]
        if status == "ok":
            ci = (record["ci_high_s"] - record["ci_low_s"]) / 2 / record["median_s"] * 100
            detail = (f"{record['median_s'] * 1e3:9.3f} ms ±{ci:4.1f}%  {record['tflops'] * 1e3:8.1f} GFLOP/s"
                      f"{'  noisy' if record['noisy'] else ''}")
        else:
            detail = record["reason"][:90]
        self.console.finished(f"{case.id}  {PROGRESS_LABELS[status]}  {detail}", status, done, total, eta,
                              quiet=case.id in self.quiet)
