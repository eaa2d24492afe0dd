"""Workers forked from a server that imported their modules once (bench.engine.forked): they time a case as a new
interpreter's worker does, their end (an exit, a signal) reaches the parent as a code, and the server goes with
its socket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from bench.engine import forked
from bench.engine.execute import RunnerSetup
from bench.engine.isolate import Isolated, Worker, WorkerDied
from bench.problem.case import Case
from bench.problem.shapes import AttentionShape
from bench.results.meta import Calibration

CASE = Case("naive", AttentionShape(1, 2, 2, 32, 32, 16), "prefill", "fwd", "cpu")


def test_preload_names_the_compiler_for_a_compiling_backend_and_a_backends_own_imports():
    assert forked.preload(["naive", "sdpa"]) == forked.BASE
    with_flex = forked.preload(["flex", "hf-sdpa", "no-such-backend"])
    assert set(forked.COMPILER) <= set(with_flex) and "transformers.modeling_utils" in with_flex
    assert len(with_flex) == len(set(with_flex))  # each once, however many backends name it
    # on a CPU the server also runs the compiler's ISA probes, once, for every worker it forks; on CUDA it has none
    assert set(forked.CPU_COMPILER) <= set(with_flex)
    assert not set(forked.CPU_COMPILER) & set(forked.preload(["flex"], "cuda"))
    assert not set(forked.CPU_COMPILER) & set(forked.preload(["naive"], "cpu"))


def test_the_server_imports_a_module_and_calls_a_named_function_and_a_failure_is_left_to_the_worker(monkeypatch):
    import types

    calls = []
    module = types.ModuleType("warm_up_for_test")
    module.probe = lambda: calls.append("probed")
    module.broken = lambda: 1 / 0
    monkeypatch.setitem(sys.modules, "warm_up_for_test", module)
    forked.load("warm_up_for_test:probe")
    forked.load("warm_up_for_test")  # imported only
    forked.load("warm_up_for_test:broken")  # the worker will call it and say why
    forked.load("warm_up_for_test:missing")
    forked.load("no_such_module_anywhere:probe")
    assert calls == ["probed"]


def test_a_forked_worker_times_a_slice_and_a_case_it_cannot_run_gives_none():
    workers = Isolated(1, forked.preload(["naive"]))
    workers.start(RunnerSetup(Calibration(), None, 0.05, None, 1))
    try:
        first, second = workers.slice(CASE), workers.slice(CASE)
        assert first and second and first > 0 and second > 0
        pid = workers.worker.proc.pid
        assert pid != os.getpid() and workers.worker.proc.poll() is None
        bad = Case("flash-attn", AttentionShape(1, 2, 2, 32, 32, 16), "prefill", "fwd", "cpu")
        assert workers.slice(bad) is None and "CUDA" in workers.slice_error
        workers.close()  # the next slice forks a fresh worker
        assert workers.slice(CASE) and workers.worker.proc.pid != pid
    finally:
        workers.close()


def test_a_forked_workers_end_reaches_the_parent_with_its_code():
    worker = Worker(1, forked.preload(["naive"]))
    try:
        os.kill(worker.proc.pid, signal.SIGSEGV)
        with pytest.raises(WorkerDied) as died:
            worker.ask({"cmd": "facts", "device": "cpu", "profile": "quick"}, timeout_s=60)
        assert died.value.code == -signal.SIGSEGV and "SIGSEGV" in died.value.describe()
    finally:
        worker.end()
    worker = Worker(1, forked.preload(["naive"]))
    worker.proc.stdin.close()  # its stdin ends: the worker's loop returns and the process exits 0
    assert worker.proc.wait() == 0 and worker.proc.poll() == 0


def test_a_hung_forked_worker_is_ended_at_its_time_limit():
    worker = Worker(1, forked.preload(["naive"]))
    try:
        os.kill(worker.proc.pid, signal.SIGSTOP)  # hangs: answers nothing
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            worker.ask({"cmd": "facts", "device": "cpu", "profile": "quick"}, timeout_s=1)
        assert time.monotonic() - t0 < 30
    finally:
        worker.end()
    assert worker.proc.poll() == -signal.SIGKILL


def test_the_server_is_replaced_for_other_modules_and_ends_with_its_socket():
    first = forked.server(("bench.kinds",))
    assert forked.server(("bench.kinds",)) is first  # the same modules: the same server
    second = forked.server(("bench.kinds", "bench.no_such_module"))  # a module that is not there is passed over
    assert second is not first and first.proc.poll() is not None
    worker = Worker(1, ("bench.kinds", "bench.no_such_module"))
    try:
        assert "fingerprint" in worker.ask({"cmd": "facts", "device": "cpu", "profile": "quick"}, timeout_s=120)
    finally:
        worker.end()
    second.end()
    assert second.proc.poll() == 0


def test_a_worker_whose_server_cannot_fork_starts_a_new_interpreter_instead(monkeypatch, capsys):
    modules = ("bench.kinds", "bench.engine.isolate")
    monkeypatch.setattr(forked, "_failed", {})
    forked.failed(modules, "the worker server ended (exit code 3)")  # as when an import initialised CUDA
    worker = Worker(1, modules)
    try:
        assert isinstance(worker.proc, subprocess.Popen)
        assert "fingerprint" in worker.ask({"cmd": "facts", "device": "cpu", "profile": "quick"}, timeout_s=120)
    finally:
        worker.end()
    assert "exit code 3" in capsys.readouterr().err
