"""Ctrl-C belongs to attnbench: the run's stages, a test hook that interrupts one of them, and a guard that keeps a
second Ctrl-C from tearing the cleanup.

Stages a run passes through: import (`python -m bench` about to import the command's module),
calibrate, check (a case's correctness check), time (its timing), write (recording it), report (building the
report), cleanup (writing the results file at the end). `ATTNBENCH_INTERRUPT_AT=STAGE[:N],...`
sends this process a real SIGINT the N-th time (default 1) the run reaches STAGE, exactly as a Ctrl-C there would:
the tests interrupt each stage deterministically with it instead of sending a signal and hoping for the moment.
Several stages may be listed (check:2,cleanup: a second Ctrl-C while the first one's cleanup runs).

A Ctrl-C that lands where Python cannot raise it (a weakref callback inside the import machinery, a __del__: the
"Exception ignored in ..." of sys.unraisablehook) would be swallowed and the run would go on as if nothing was
pressed. keep_lost() makes such an interrupt pending instead, and deliver_lost() (called at every stage, and after
the command's imports) raises it as the Ctrl-C it was.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

STAGES = ("import", "calibrate", "check", "time", "write", "decide", "report", "cleanup")
HOOK_ENV = "ATTNBENCH_INTERRUPT_AT"
_reached: Counter[str] = Counter()
# Set in a case's worker process (bench.engine.worker), which ignores SIGINT: a terminal's Ctrl-C reaches the whole
# process group, and it is `bench run` that acts on it. So the hook signals the parent there, and the worker waits
# to be ended, as it would be.
in_worker = False
_lost: list[object] = []  # Ctrl-Cs Python could not raise where they landed


def keep_lost() -> None:
    """From now on a KeyboardInterrupt raised where Python can only report it is kept for deliver_lost()."""
    report = sys.unraisablehook

    def hook(unraisable: object) -> None:
        if isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
            _lost.append(unraisable)
        else:
            report(unraisable)

    sys.unraisablehook = hook


def deliver_lost() -> None:
    """A Ctrl-C that was swallowed since the last call is raised now, as a real one (raised, held back or ignored)."""
    if _lost:
        _lost.clear()
        signal.raise_signal(signal.SIGINT)


def stage(name: str) -> None:
    """The run reaches `name`: a swallowed Ctrl-C, or one injected there by the test hook, is raised now."""
    assert name in STAGES, name
    deliver_lost()
    hook = os.environ.get(HOOK_ENV)
    if not hook:
        return
    wanted = dict((part.partition(":")[0], int(part.partition(":")[2] or 1)) for part in hook.split(","))
    if name not in wanted:
        return
    _reached[name] += 1
    if _reached[name] == wanted[name]:
        if in_worker:
            os.kill(os.getppid(), signal.SIGINT)
            time.sleep(3600)  # the parent ends this worker as it stops
        signal.raise_signal(signal.SIGINT)  # handled as a real Ctrl-C: raised, held back or ignored


@contextmanager
def deferred() -> Iterator[list[int]]:
    """Ctrl-C held back for the block (a case being recorded, the results file being written): a SIGINT that comes
    during it is counted in the yielded list and raised as KeyboardInterrupt once the block is done."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield got
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        signal.signal(signal.SIGINT, previous)
    if got:
        raise KeyboardInterrupt


@contextmanager
def ignored() -> Iterator[None]:
    """Ctrl-C ignored for the block: the cleanup after an interrupt, which must finish whatever else is pressed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
