"""pytest glue for the engine: options, parametrization and recording. `bench run` drives pytest through it, and
so can anyone: `python -m pytest --pyargs bench.suite --attn-profile quick --benchmark-json=OUT.json`.

Only glue lives here: the options and their checks are bench.engine.options; measuring is bench.engine.runner;
records are bench.record; the file is bench.results through bench.results.store. The plugin stays inert unless an
--attn-* option is given, so it can be installed as a pytest11 entry point without touching other test suites.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import os
import time
from typing import Any

import pytest
import pytest_benchmark

from bench.engine.options import Plan, add_options, option_names, plan
from bench.engine.queue import DEVICE_ENV, QUEUE_ENV, CaseQueue
from bench.errors import InputError
from bench.status import PROGRESS_LABELS

REPLAY_TIMER = "bench.suite.replay.clock"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnbench", "attention benchmarks (python -m bench run's options)")
    add_options(group.addoption, flag_prefix="attn-", dest_prefix="attn_")
    group.addoption("--attn-run-id", dest="attn_run_id", default=None,
                    help="id of the run (default: time-profile-device)")


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark reads its timer option
def pytest_configure(config: pytest.Config) -> None:
    values = {name: config.getoption(f"attn_{name}") for name in option_names()}
    if not any(v not in (None, False) for v in values.values()):
        return
    try:
        checked = plan(values, default_out=False)
    except InputError as err:
        raise pytest.UsageError(str(err)) from None
    run_id = config.getoption("attn_run_id") or checked.run_id
    # Rounds are measured by our timers, then replayed into pytest-benchmark's fixture (bench.suite.replay).
    config.option.benchmark_timer = REPLAY_TIMER
    config.stash[SESSION_KEY] = AttnSession(config, checked, run_id)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames and "attn_session" in metafunc.fixturenames:
        session = metafunc.config.stash.get(SESSION_KEY, None)
        pending = session.pending if session else []
        # the id itself is the parameter: it is what pytest-benchmark stores in `params`, and it is JSON
        metafunc.parametrize("case", [c.id for c in pending], ids=[c.id for c in pending])


@pytest.fixture
def attn_session(request: pytest.FixtureRequest) -> AttnSession:
    if SESSION_KEY not in request.config.stash:
        pytest.skip("no sweep: pass --attn-profile (and other --attn-* options) to run attention benchmarks")
    return request.config.stash[SESSION_KEY]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session:
        from bench.measure.environment import environment

        machine_info["attnbench"] = environment(session.plan.device, session.plan.profile)


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict) -> None:
    """pytest-benchmark's own files (--benchmark-json, --benchmark-autosave) become attnbench results files."""
    session = config.stash.get(SESSION_KEY, None)
    if session and session.store is not None:
        doc = session.store.doc
        output_json["attnbench"] = doc.meta.to_dict() | {"untimed": doc.untimed}


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    # Our own progress line replaces pytest's one-letter progress for benchmark cases.
    if SESSION_KEY in config.stash and report.when == "call":
        return report.outcome, "", report.outcome.upper()
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    attn = session.config.stash.get(SESSION_KEY, None)
    if attn:
        selected = {item.callspec.params["case"] for item in session.items
                    if hasattr(item, "callspec") and "case" in item.callspec.params}
        attn.start(selected)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """A worker of `bench run --devices` runs the cases it pulls from the shared queue, not its whole list."""
    attn = session.config.stash.get(SESSION_KEY, None)
    if not attn or attn.queue is None or session.config.option.collectonly:
        return None
    items = {item.callspec.params["case"]: item for item in session.items
             if hasattr(item, "callspec") and "case" in item.callspec.params}
    while (case_id := attn.queue.claim()) is not None:
        if case_id in items:
            session.config.hook.pytest_runtest_protocol(item=items[case_id], nextitem=None)
        if session.shouldfail or session.shouldstop:
            raise session.Interrupted(str(session.shouldfail or session.shouldstop))
    return True


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # before pytest-benchmark's wrapper writes its JSON
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    attn = session.config.stash.get(SESSION_KEY, None)
    if attn:
        attn.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    yield


class AttnSession:
    def __init__(self, config: pytest.Config, checked: Plan, run_id: str) -> None:
        self.config = config
        self.plan = checked
        self.run_id = run_id
        self.by_id = {c.id: c for c in checked.cases}
        done = set(checked.done)
        self.pending = [c for c in checked.cases if c.id not in done]
        self.selected: set[str] = set()
        self.store: Any = None
        self.runner: Any = None
        self.finished = 0
        self.t0 = time.perf_counter()
        queue = os.environ.get(QUEUE_ENV)  # a worker of `bench run --devices` (bench.launch.devices)
        self.queue = CaseQueue(queue) if queue else None
        self.ran_on = os.environ.get(DEVICE_ENV) if queue else None

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter and capture:
            with capture.global_and_fixture_disabled():  # progress must reach the terminal mid-test
                reporter.write_line(line)

    def start(self, selected: set[str]) -> None:
        """After collection: calibrate and open the results document, only when some case is to run."""
        import torch

        from bench.engine.runner import Runner
        from bench.measure.calibrate import calibrate
        from bench.measure.environment import fingerprint, gpu_name
        from bench.results import ResultsStore, RunMeta

        self.selected = selected
        if not selected and not self.plan.resume:
            return
        torch.manual_seed(0)
        if self.plan.threads:
            torch.set_num_threads(self.plan.threads)
        if self.plan.resume:
            self.store = ResultsStore.resume(self.plan.out)
            calibration = self.store.doc.meta.calibration
            for note in self.store.doc.notes:
                self._say(f"note: {note}")
            self._say(f"resuming {self.plan.out}: {len(self.plan.done)} cases done, {len(selected)} to go")
        else:
            self._say(f"calibrating {self.plan.device} (GEMM and copy ceilings)...")
            calibration = calibrate(self.plan.device, self.plan.sweep.dtypes)
            self._say(f"  GEMM {calibration['gemm_flops_per_s'] / 1e9:.1f} GFLOP/s, "
                      f"copy {calibration['copy_bytes_per_s'] / 1e9:.1f} GB/s")
            machine_info = self.config.hook.pytest_benchmark_generate_machine_info(config=self.config)
            self.config.hook.pytest_benchmark_update_machine_info(config=self.config, machine_info=machine_info)
            commit_info = self.config.hook.pytest_benchmark_generate_commit_info(config=self.config)
            meta = RunMeta(run_id=self.run_id, profile=self.plan.profile, sweep_id=self.plan.sweep_id,
                           axes=dataclasses.asdict(self.plan.sweep), calibration=calibration,
                           fingerprint=fingerprint(self.plan.device), cases=len(self.plan.cases),
                           models=self._models(), kv_measured=self._kv_measured())
            self.store = ResultsStore.new(self.plan.out, meta, machine_info, commit_info,
                                          pytest_benchmark.__version__,
                                          dt.datetime.now().isoformat(timespec="seconds"))
        self.runner = Runner(calibration, gpu_name(self.plan.device), budget_s=self.plan.sweep.budget_s,
                             trace_dir=self.config.getoption("attn_trace"))
        gc.freeze()  # what is alive now lives to the end: keep the collector from rescanning it between rounds
        self.t0 = time.perf_counter()

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
        from bench.models.kvcache import measured_presets

        self._say("measuring the presets' KV caches (MHA / GQA / MQA)...")
        return measured_presets(self.plan.device)

    def finish(self, interrupted: bool) -> None:
        if self.store is None:
            return
        complete = not interrupted and set(self.by_id) <= set(self.store.doc.case_ids())
        if (complete or (self.queue is not None and not interrupted)) and self.finished:
            # The machine's speed again, after the cases: with the start's, the in-run control that lets a
            # regression check tell "this machine was slower today" from "the code got slower".
            from bench.measure.calibrate import calibrate

            self.store.doc.meta.calibration_end = calibrate(self.plan.device)
            if self.plan.device == "cuda":
                from bench.measure.environment import nvml_state

                self.store.doc.machine_info.setdefault("attnbench", {})["nvml_end"] = nvml_state()
        self.store.finish(complete=complete)

    def measure(self, case_id: str, benchmark: Any) -> None:
        from bench.record import untimed_entry
        from bench.suite.replay import noop, replaying

        case = self.by_id[case_id]
        outcome = self.runner.run(case)
        record = outcome.record
        if self.ran_on:
            record["ran_on"] = self.ran_on
        s = case.shape
        benchmark.group = f"{case.phase} {case.pass_} {s.dtype} {s.mask_label} q{s.seq_q} kv{s.seq_kv} d{s.head_dim}"
        benchmark.extra_info.update(record)
        if outcome.samples:
            with replaying(outcome.samples):
                benchmark.pedantic(noop, rounds=len(outcome.samples), iterations=1, warmup_rounds=0)
            entry = benchmark.stats.as_dict(include_data=True)
            if entry["stats"]["data"] != outcome.samples:
                raise RuntimeError("pytest-benchmark did not store the measured rounds; timer replay is broken")
        else:
            entry = untimed_entry(record, benchmark.name, benchmark.fullname, benchmark.group)
        self.store.add(entry)
        self._progress(case, record)
        if record["status"] in ("unsupported", "oom"):
            pytest.skip(f"{record['status']}: {record['reason']}")
        if record["status"] in ("error", "incorrect"):
            pytest.fail(f"{case.id}: {record['status']}: {record['reason']}", pytrace=False)

    def _progress(self, case: Any, record: dict[str, Any]) -> None:
        self.finished += 1
        # a worker of --devices counts every worker's cases, so its line reads as the whole run's progress
        done, total = (self.queue.finished(), len(self.queue)) if self.queue else (self.finished, len(self.selected))
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / max(done, 1) * max(0, total - done)  # workers start together: the queue's rate is the run's
        status = record["status"]
        if status == "ok":
            ci = (record["ci_high_s"] - record["ci_low_s"]) / 2 / record["median_s"] * 100
            detail = (f"{record['median_s'] * 1e3:9.3f} ms ±{ci:4.1f}%  {record['tflops'] * 1e3:8.1f} GFLOP/s"
                      f"{'  noisy' if record['noisy'] else ''}")
        else:
            detail = record["reason"][:90]
        self._say(f"[{done}/{total} eta {int(eta) // 60}m{int(eta) % 60:02d}s] {case.id}  "
                  f"{PROGRESS_LABELS[status]}  {detail}")


SESSION_KEY = pytest.StashKey[AttnSession]()
