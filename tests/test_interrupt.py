"""Ctrl-C at every stage of `bench run` (bench.engine.interrupt's hook sends the real SIGINT at that stage): exit
130, one line saying what is kept and how to resume, no traceback, every finished case in a valid file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.engine.interrupt import HOOK_ENV
from bench.measure.calibrate import REUSE_ENV
from bench.results import read_run

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--backend", "naive", "--heads", "2", "--kv-heads", "2", "--seq", "32,64,96", "--dtype", "fp32",
        "--mask", "none", "--phase", "prefill", "--budget", "0.02", "--device", "cpu"]  # 3 cases


def run_interrupted(tmp_path: Path, at: str, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(REPO), KINETO_LOG_LEVEL="5", **{HOOK_ENV: at})
    # SIG_DFL in the child: a process started with SIGINT ignored (under a pytest-xdist worker) keeps ignoring it
    proc = subprocess.run([sys.executable, "-m", "bench", "run", *ARGS, "--out", str(out), *extra], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, out


def last_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert lines, proc.stdout[-2000:]
    return lines[-1]


@pytest.mark.slow
def test_ctrl_c_during_calibration_writes_nothing_and_says_how_to_start_again(tmp_path):
    proc, out = run_interrupted(tmp_path, "calibrate")
    assert proc.returncode == 130
    line = last_line(proc)
    assert line.startswith("interrupted before any case ran; nothing written; start again with: python -m bench run")
    assert "--resume" not in line and f"--out {out}" in line
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("at", "kept"), [("check:2", 1), ("time:3", 2), ("write:2", 1), ("write:4", 3)])
def test_ctrl_c_during_a_case_keeps_every_finished_case_and_resumes(tmp_path, at, kept):
    """write:1 is the results file's creation; write:N+1 the N-th case being recorded, which is kept whole."""
    proc, out = run_interrupted(tmp_path, at)
    assert proc.returncode == 130, proc.stderr[-3000:]
    line = last_line(proc)
    assert line.startswith(f"interrupted: {kept} of 3 cases kept in {out}; resume with: python -m bench run")
    assert line.endswith("--resume")
    doc = read_run(out)
    assert len(doc.entries()) == kept and doc.meta.complete is False
    # the printed command continues the run: only the missing cases run, and the file ends complete
    command = line.split("resume with: ", 1)[1].split()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"PYTHONPATH": str(REPO)}
    resumed = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"3 cases ({3 - kept} to run)" in resumed.stdout
    final = read_run(out)
    assert final.meta.complete is True and len(set(final.case_ids())) == 3


@pytest.mark.slow
def test_ctrl_c_while_building_the_report_keeps_the_complete_run(tmp_path):
    proc, out = run_interrupted(tmp_path, "report", "--report")
    assert proc.returncode == 130
    line = last_line(proc)
    assert line == f"interrupted while building the report: every case is in {out}; build it with: " \
                   f"python -m bench report {out}"
    assert read_run(out).meta.complete is True


@pytest.mark.slow
def test_a_second_ctrl_c_during_cleanup_loses_nothing(tmp_path):
    proc, out = run_interrupted(tmp_path, "check:2,cleanup")
    assert proc.returncode == 130
    assert last_line(proc).startswith(f"interrupted: 1 of 3 cases kept in {out}")
    doc = read_run(out)  # written whole: the second SIGINT came while the file was being written
    assert len(doc.entries()) == 1
    journal = out.with_name(out.name + ".journal")
    assert journal.exists() and journal.read_text().splitlines()[-1].startswith('{"end"')


def test_ctrl_c_before_the_command_module_is_imported_is_one_line(tmp_path):
    proc, out = run_interrupted(tmp_path, "import")
    assert proc.returncode == 130
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["interrupted while starting; nothing was run"]
    assert not out.exists()


# Moments of start-up, named by the import that has just finished (python -X importtime reports each as it ends):
# attnbench's command line loaded; the backends' registry; the session; the whole run module (its last import), then
# one and three seconds after it (the worker importing torch, then calibrating: the parent imports no torch). Import
# progress, not the clock, picks them.
MOMENTS = [("bench.cli", 0.0), ("bench.backends", 0.0), ("bench.engine.session", 0.0),
           ("bench.launch.slurm", 0.0), ("bench.launch.slurm", 1.0), ("bench.launch.slurm", 3.0)]


@pytest.mark.slow
@pytest.mark.parametrize(("after", "wait_s"), MOMENTS)
def test_ctrl_c_at_any_moment_of_start_up_is_exit_130_and_one_line(tmp_path, after, wait_s):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(REPO), KINETO_LOG_LEVEL="5")
    env.pop(REUSE_ENV, None)  # the second after the imports is spent calibrating, as in a user's run (conftest.py)
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "bench", "run", "--profile", "quick", *ARGS,
                             "--out", str(tmp_path / "r.json")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # SIG_DFL in the child: under a pytest-xdist worker it would inherit SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == after:
                break
        assert proc.poll() is None, f"the process ended before importing {after}: {''.join(seen)[-2000:]}"
        time.sleep(wait_s)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    said = [line for line in [*seen, *stderr.splitlines(True)] if not line.startswith("import time:")]
    assert proc.returncode == 130, "".join(said)[-3000:] + stdout[-2000:]
    assert "Traceback" not in "".join(said)
    assert len(said) == 1 and said[0].startswith("interrupted"), said


# A KeyboardInterrupt that passed through C's PyRun_String (as one can inside torch's start-up) sets CPython's
# "unhandled KeyboardInterrupt" flag even when it is caught later; a program run with -m then ends by SIGINT (-2).
THROUGH_PYRUN = """
import ctypes, bench.cli
run = ctypes.pythonapi.PyRun_String
run.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]
def main(argv=None):
    run(b"raise KeyboardInterrupt", 257, {}, {})  # 257: Py_file_input
bench.cli.main = main
from bench.__main__ import entry
entry()
"""


def test_a_ctrl_c_raised_through_c_code_still_exits_130(tmp_path):
    (tmp_path / "through_pyrun.py").write_text(THROUGH_PYRUN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "through_pyrun"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60,  # SIG_DFL: a child of an xdist worker may inherit SIGINT ignored
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == ["interrupted while starting; nothing was run"]


# A Ctrl-C that lands in a weakref callback of the import machinery (CI saw it while `bench run` imported
# bench.backends) or in a __del__ is swallowed by Python ("Exception ignored in ..."): the run must still end.
SWALLOWED = """
import importlib, sys, bench.cli
class Dies:
    def __del__(self):
        raise KeyboardInterrupt
def import_module(name):
    Dies()  # dropped at once: its KeyboardInterrupt goes to sys.unraisablehook, as the import machinery's would
    return importlib.import_module(name)
bench.cli.importlib = type(sys)("importlib")
bench.cli.importlib.import_module = import_module
sys.argv = ["bench", "run", "--backend", "naive", "--seq", "32", "--device", "cpu", "--plan"]
from bench.__main__ import entry
entry()
"""


def test_a_ctrl_c_python_swallows_during_the_imports_still_exits_130(tmp_path):
    (tmp_path / "swallowed.py").write_text(SWALLOWED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {"PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "swallowed"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120,  # SIG_DFL: a child of an xdist worker may inherit SIGINT ignored
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr[-2000:] + proc.stdout[-2000:]
    assert proc.stderr.strip().splitlines() == ["interrupted while starting; nothing was run"]
    assert not proc.stdout
