"""pytest glue for the engine: parametrizes the benchmark from a sweep spec and records every case.

Only glue lives here: the spec file is written by `python -m bench run`; measuring is bench.suite.runner;
the file format is bench.results.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from bench.measure.calibrate import calibrate
from bench.measure.environment import environment, fingerprint, gpu_name, nvml_state
from bench.suite.replay import noop, replaying
from bench.suite.runner import Runner
from bench.suite.spec import Case, case_from_dict
from bench.suite.store import ResultsStore

STATUS_WORD = {"ok": "ok", "unsupported": "unsupported", "oom": "OOM", "error": "ERROR", "incorrect": "INCORRECT"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--attn-spec", default=None, help="sweep spec written by `python -m bench run`")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--attn-spec")
    if path:
        config.stash[SESSION_KEY] = AttnSession(config, json.loads(Path(path).read_text()))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "attn_case" in metafunc.fixturenames:
        session = metafunc.config.stash.get(SESSION_KEY, None)
        pending = session.pending if session else []
        metafunc.parametrize("attn_case", pending, ids=[c.id for c in pending])


@pytest.fixture
def attn_session(request: pytest.FixtureRequest) -> AttnSession:
    return request.config.stash[SESSION_KEY]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session:
        machine_info["attnbench"] = environment(session.device, session.spec["profile"])


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    # Our own progress line replaces pytest's one-letter progress for benchmark cases.
    if SESSION_KEY in config.stash and report.when == "call":
        return report.outcome, "", report.outcome.upper()
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    attn = session.config.stash.get(SESSION_KEY, None)
    if attn:
        attn.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    attn = session.config.stash.get(SESSION_KEY, None)
    if attn and attn.store is not None:
        complete = not attn.pending_left() and exitstatus != pytest.ExitCode.INTERRUPTED
        if complete and attn.pending:
            # The machine's speed again, after the cases: with the start's, the in-run control that lets a
            # regression check tell "this machine was slower today" from "the code got slower".
            attn.store.doc["attnbench"]["calibration_end"] = calibrate(attn.device)
            if attn.device == "cuda":
                attn.store.doc["machine_info"].setdefault("attnbench", {})["nvml_end"] = nvml_state()
        attn.store.finish(complete=complete)


class AttnSession:
    def __init__(self, config: pytest.Config, spec: dict[str, Any]) -> None:
        self.config = config
        self.spec = spec
        self.device: str = spec["device"]
        self.cases = [case_from_dict(d) for d in spec["cases"]]
        self.skip = set(spec.get("done", []))
        self.pending = [c for c in self.cases if c.id not in self.skip]
        self.store: ResultsStore | None = None
        self.runner: Runner | None = None
        self.finished = 0
        self.t0 = time.perf_counter()

    def pending_left(self) -> bool:
        return self.store is None or bool({c.id for c in self.cases} - self.store.done)

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter and capture:
            with capture.global_and_fixture_disabled():  # progress must reach the terminal mid-test
                reporter.write_line(line)

    def start(self) -> None:
        torch.manual_seed(0)
        if self.spec.get("threads"):
            torch.set_num_threads(self.spec["threads"])
        out = Path(self.spec["out"])
        if self.spec.get("resume"):
            self.store = ResultsStore(out, {}, {}, {}, "", "", resume=True)
            calibration = self.store.doc["attnbench"]["calibration"]
            self._say(f"resuming {out}: {len(self.skip)} cases done, {len(self.pending)} to go")
        else:
            self._say(f"calibrating {self.device} (GEMM and copy ceilings)...")
            calibration = calibrate(self.device)
            self._say(f"  GEMM {calibration['gemm_flops_per_s'] / 1e9:.1f} GFLOP/s, "
                      f"copy {calibration['copy_bytes_per_s'] / 1e9:.1f} GB/s")
            machine_info = self.config.hook.pytest_benchmark_generate_machine_info(config=self.config)
            self.config.hook.pytest_benchmark_update_machine_info(config=self.config, machine_info=machine_info)
            commit_info = self.config.hook.pytest_benchmark_generate_commit_info(config=self.config)
            meta = {k: self.spec[k] for k in ("run_id", "profile", "sweep_id", "axes")}
            meta |= {"calibration": calibration, "fingerprint": fingerprint(self.device), "cases": len(self.cases)}
            import pytest_benchmark

            self.store = ResultsStore(out, meta, machine_info, commit_info, pytest_benchmark.__version__,
                                      dt.datetime.now().isoformat(timespec="seconds"))
        self.runner = Runner(calibration, gpu_name(self.device), budget_s=self.spec["budget_s"])
        gc.freeze()  # what is alive now lives to the end: keep the collector from rescanning it between rounds
        self.t0 = time.perf_counter()

    def measure(self, case: Case, benchmark) -> None:
        assert self.runner is not None and self.store is not None
        outcome = self.runner.run(case)
        record = outcome.record
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
            entry = {"group": benchmark.group, "name": benchmark.name, "fullname": benchmark.fullname,
                     "params": benchmark.params, "param": benchmark.param, "extra_info": dict(record),
                     "options": {}, "stats": None}
        entry["params"] = {"case": case.id}  # the Case object itself is not JSON
        self.store.add(entry)
        self._progress(case, record)
        if record["status"] in ("unsupported", "oom"):
            pytest.skip(f"{record['status']}: {record['reason']}")
        if record["status"] in ("error", "incorrect"):
            pytest.fail(f"{case.id}: {record['status']}: {record['reason']}", pytrace=False)

    def _progress(self, case: Case, record: dict[str, Any]) -> None:
        self.finished += 1
        total = len(self.pending)
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / self.finished * (total - self.finished)
        status = record["status"]
        if status == "ok":
            ci = (record["ci_high_s"] - record["ci_low_s"]) / 2 / record["median_s"] * 100
            detail = (f"{record['median_s'] * 1e3:9.3f} ms ±{ci:4.1f}%  {record['tflops'] * 1e3:8.1f} GFLOP/s"
                      f"{'  noisy' if record['noisy'] else ''}")
        else:
            detail = record["reason"][:90]
        self._say(f"[{self.finished}/{total} eta {int(eta) // 60}m{int(eta) % 60:02d}s] {case.id}  "
                  f"{STATUS_WORD[status]}  {detail}")


SESSION_KEY = pytest.StashKey[AttnSession]()
