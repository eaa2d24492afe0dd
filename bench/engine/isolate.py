"""Cases in a worker process (bench.engine.worker), each with a time limit: a case past its limit ends as `timeout`
and its worker is ended; a worker that dies (a signal, an abort, an exit) ends its case as `crashed` with the
signal or exit code and the last lines of its stderr; a fresh worker takes the next case. The parent keeps the
results store, so nothing finished is lost whatever the worker does. A worker is a new interpreter, or, for an
executor given a preload, forked from a server that has imported those modules once (bench.engine.forked).
"""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from typing import Any

from bench.engine import forked
from bench.engine.execute import RunnerSetup
from bench.engine.outcome import Outcome
from bench.problem.case import Case
from bench.results.meta import Calibration
from bench.results.record import Record, new_record

STDERR_LINES = 8  # of a crashed worker's stderr, kept in the case's reason


class WorkerDied(Exception):
    """The worker ended before answering: its exit code (negative: the signal) and its last stderr lines."""

    def __init__(self, code: int | None, tail: list[str]) -> None:
        super().__init__(code)
        self.code, self.tail = code, tail

    def describe(self) -> str:
        if self.code is not None and self.code < 0:
            how = f"killed by {signal.Signals(-self.code).name}"
        else:
            how = f"exited with code {self.code}"
        last = " | ".join(line.strip() for line in self.tail if line.strip())
        return f"the worker {how}" + (f"; its last stderr: {last}" if last else "")


class Worker:
    """One worker process and its pipes; `ask` waits for the answer at most `timeout_s`."""

    def __init__(self, threads: int | None = None, preload: tuple[str, ...] | None = None) -> None:
        env = {**os.environ, "KINETO_LOG_LEVEL": os.environ.get("KINETO_LOG_LEVEL", "5")}
        args = ["-m", "bench.engine.worker", *(["--threads", str(threads)] if threads else [])]
        self.proc: subprocess.Popen | forked.ForkedProcess
        if preload is not None:  # forked from the server that imported these (bench.engine.forked)
            try:
                self.proc = forked.ForkedProcess(args[2:], {"KINETO_LOG_LEVEL": env["KINETO_LOG_LEVEL"]}, preload)
            except RuntimeError as err:  # it could not start or fork: new interpreters from here on, as without one
                forked.failed(preload, str(err))
                print(f"attnbench: {err}; workers start as new interpreters", file=sys.stderr)
                preload = None
        if preload is None:  # a new interpreter
            self.proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env)
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._relay = threading.Thread(target=self._pass_stderr, daemon=True)
        self._relay.start()
        self._buffer = b""

    def _pass_stderr(self) -> None:
        for raw in self.proc.stderr:  # the user still sees what the case prints; the last lines explain a crash
            line = raw.decode(errors="replace")
            self.tail.append(line)
            sys.stderr.write(line)

    def ask(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """The answer, or TimeoutError past `timeout_s`, or WorkerDied."""
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._died() from None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._died()
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _died(self) -> WorkerDied:
        code = self.proc.wait()
        self._relay.join(timeout=2)
        return WorkerDied(code, list(self.tail))

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._relay.join(timeout=2)


class Isolated:
    """bench.engine.execute's Executor in a worker process, with a per-case time limit."""

    def __init__(self, threads: int | None = None, preload: tuple[str, ...] | None = None) -> None:
        self.threads = threads  # --threads: each worker sets them before it measures anything
        self.preload = preload  # None: each worker a new interpreter; else forked from a server that imported these
        self.setup: RunnerSetup | None = None  # what each fresh worker's Runner is built from
        self.worker: Worker | None = None
        self.has_runner = False
        self.runner_threads: int | None = None  # what torch runs the cases with there: a timeout's record says it
        self.slice_error = ""  # why the last slice gave no time ("" when it did)

    def _ready(self, with_runner: bool = False) -> Worker:
        if self.worker is None:
            self.worker, self.has_runner = Worker(self.threads, self.preload), False
        if with_runner and not self.has_runner:
            assert self.setup is not None, "start() first"
            self.runner_threads = self.worker.ask({"cmd": "runner", **self.setup.to_dict()})["threads"]
            self.has_runner = True
        return self.worker

    def facts(self, device: str, profile: str) -> dict[str, Any]:
        return self._ready().ask({"cmd": "facts", "device": device, "profile": profile})

    # a dead or hung worker outside a case (calibration, the KV caches) is a failure of the run
    def calibrate(self, device: str, dtypes: tuple[str, ...]) -> Calibration:
        answer = self._ready().ask({"cmd": "calibrate", "device": device, "dtypes": list(dtypes)})
        return Calibration.from_dict(answer["calibration"])

    def kv_measured(self, device: str) -> list[dict[str, Any]]:
        return self._ready().ask({"cmd": "kv", "device": device})["kv_measured"]

    def start(self, setup: RunnerSetup) -> None:
        self.setup = setup

    def run(self, case: Case, timeout_s: float | None) -> Outcome:
        """A timeout or a crash ends the case with that status, on its record as it was before it ran."""
        try:
            answer = self._ready(with_runner=True).ask({"cmd": "run", "case": case.to_dict()}, timeout_s)
        except TimeoutError:
            self.close()
            before = _before(case, self.runner_threads)
            return Outcome(replace(before, status="timeout", reason=f"still running after {timeout_s:.0f} s "
                                   "(--case-timeout); its worker was ended"))
        except WorkerDied as died:
            self.worker = None
            return Outcome(replace(_before(case, self.runner_threads), status="crashed", reason=died.describe()[:500]))
        return Outcome(Record.from_dict(answer["record"]), [float(x) for x in answer["samples"]])

    def slice(self, case: Case, timeout_s: float | None = None, check: bool = True) -> float | None:
        """One slice of an interleaved block in this worker (Runner.slice; check: whether its first slice in this
        worker checks it against float64): its median seconds, or None where the case failed, timed out or took its
        worker down (the worker is then ended: the next call starts a fresh one); slice_error then says which."""
        self.slice_error = ""
        try:
            request = {"cmd": "slice", "case": case.to_dict(), "check": check}
            answer = self._ready(with_runner=True).ask(request, timeout_s)
        except TimeoutError:
            self.close()
            self.slice_error = f"{case.id}: still running after {timeout_s or 0:.0f} s; its worker was ended"
            return None
        except WorkerDied as died:
            self.close()
            self.slice_error = f"{case.id}: {died.describe()[:300]}"
            return None
        median = answer.get("median_s")
        if isinstance(median, (int, float)) and median > 0:
            return float(median)
        self.slice_error = f"{case.id}: {answer.get('error') or f'no time (median {median!r})'}"
        return None

    def renew(self) -> None:
        """End this worker and start a fresh one with its runner built, so that what a fresh worker costs is paid
        here, not inside the first case it runs. One that dies while it starts is ended: the next case starts
        another, and says why where that one fails too."""
        self.close()
        try:
            self._ready(with_runner=True)
        except (WorkerDied, TimeoutError, KeyError):
            self.close()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.end()
            self.worker = None


def _before(case: Case, threads: int | None) -> Record:
    from bench.backends import get_backend

    return new_record(case, get_backend(case.backend).memory, threads)
