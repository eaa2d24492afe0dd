"""What a run shows while it runs: on a terminal one live progress display (rich), in a log one line per case.

The live display holds done/total, the ETA, the case running and the count of each status; the lines of finished
cases scroll above it, except `unsupported` and `skipped` ones, which it only counts (the plan said why before the
first case). Without a terminal (CI, a pipe, a file) every case gets its line, as a log should.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import IO, Protocol

QUIET_STATUSES = ("unsupported", "skipped")  # counted in the live display, not listed


def fmt_eta(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Console(Protocol):
    def say(self, line: str) -> None: ...

    def running(self, case_id: str) -> None: ...

    def finished(self, line: str, status: str, done: int, total: int, eta_s: float, quiet: bool = False) -> None: ...

    def close(self) -> None: ...


class LogConsole:
    """One line per case (quiet ones included: a log is read afterwards, and whole)."""

    def __init__(self, say: object = None) -> None:
        self._say = say or (lambda line: print(line, flush=True))

    def say(self, line: str) -> None:
        self._say(line)  # type: ignore[operator]

    def running(self, case_id: str) -> None:
        pass

    def finished(self, line: str, status: str, done: int, total: int, eta_s: float, quiet: bool = False) -> None:
        if not quiet:
            self._say(f"[{done}/{total} eta {fmt_eta(eta_s)}] {line}")  # type: ignore[operator]

    def close(self) -> None:
        pass


class LiveConsole:
    """rich's live display at the bottom of the terminal; finished cases' lines scroll above it."""

    def __init__(self, stream: IO[str]) -> None:
        from rich.console import Console as RichConsole
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

        self.console = RichConsole(file=stream, highlight=False)
        self.progress = Progress(SpinnerColumn(), MofNCompleteColumn(), BarColumn(),
                                 TextColumn("eta {task.fields[eta]}"), TextColumn("{task.fields[counts]}"),
                                 TextColumn("[dim]{task.fields[case]}"), console=self.console, transient=False,
                                 refresh_per_second=4)
        self.task = None
        self.counts: Counter[str] = Counter()

    def _task(self, total: int | None = None) -> int:
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("run", total=total, eta="?", counts="", case="")
        elif total is not None:
            self.progress.update(self.task, total=total)
        return self.task

    def say(self, line: str) -> None:
        self.console.print(line, markup=False, soft_wrap=True)

    def running(self, case_id: str) -> None:
        self.progress.update(self._task(), case=case_id)

    def finished(self, line: str, status: str, done: int, total: int, eta_s: float, quiet: bool = False) -> None:
        self.counts[status] += 1
        task = self._task(total)
        if not (quiet or status in QUIET_STATUSES):
            self.console.print(line, markup=False, soft_wrap=True)
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items(), key=lambda kv: -kv[1]))
        self.progress.update(task, completed=done, eta=fmt_eta(eta_s), counts=counts, case="")

    def close(self) -> None:
        if self.task is not None:
            self.progress.stop()
            self.task = None


def console_for(stream: IO[str] | None = None) -> Console:
    """The live display on a terminal (when rich is installed), else one line per case."""
    stream = stream or sys.stdout
    if stream.isatty():
        try:
            return LiveConsole(stream)
        except ImportError:
            pass
    return LogConsole()
