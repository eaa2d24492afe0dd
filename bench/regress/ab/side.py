"""One side of an A/B comparison as the parent sees it: a worker process (bench/regress/ab/worker.py) running one tree's
code, spoken to with one JSON object per line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.regress.ab.git import AbError

WORKER = Path(__file__).with_name("worker.py")  # the current tree's worker, whatever revision it drives


def running_attnbench() -> Path:
    """The directory that holds the attnbench package this process runs (a checkout, or site-packages)."""
    import bench

    return Path(bench.__file__).resolve().parents[1]


class Side:
    """A worker importing `tree`'s code, with the working directory `tree`. `label` names the side in messages.

    bench_from: where the worker's attnbench comes from when `tree` is a user's repository (the running attnbench);
    None: `tree` is attnbench's own and its bench package is the one measured. python: the interpreter (default: this
    one; `bench ab --python-a/-b` compares two). restart() replaces the worker with a fresh process: `worker` numbers
    them (0, 1, ...), so each block can say which process it ran in (bench.regress.ab.engine)."""

    def __init__(self, label: str, tree: Path, env: dict[str, str] | None = None, bench_from: Path | None = None,
                 python: str | None = None) -> None:
        self.label = label
        self.tree = tree
        first = [str(tree), *([str(bench_from)] if bench_from else [])]
        self._env = {**os.environ, **(env or {}), "ATTNBENCH_AB_TREE": str(tree),
                     "ATTNBENCH_AB_BENCH": str(bench_from or tree),
                     "PYTHONPATH": os.pathsep.join([*first, *filter(None, [os.environ.get("PYTHONPATH")])]),
                     "KINETO_LOG_LEVEL": os.environ.get("KINETO_LOG_LEVEL", "5")}
        self._python = python or sys.executable
        self.worker = -1
        self._start()

    def _start(self) -> None:
        # a file, not a pipe: a chatty worker cannot block on it; closed in close()
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc = subprocess.Popen([self._python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, env=self._env, cwd=str(self.tree), bufsize=1)
        self.worker += 1

    def restart(self) -> None:
        """A fresh worker process in place of this one (it must be planned again)."""
        self.close()
        self._start()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request and read its answer; a worker that dies or gives up raises AbError with its reason."""
        try:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise AbError(f"{self.label}: the worker stopped ({self._why()})")
        answer = json.loads(line)
        if "fatal" in answer:
            raise AbError(f"{self.label}: {answer['fatal']}")
        if not answer.get("ok"):
            raise AbError(f"{self.label}: {answer.get('error')}")
        return answer

    def _why(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        self._stderr.seek(0)
        lines = [x for x in self._stderr.read().splitlines() if x.strip()]
        return f"exit code {code}" + (f": {lines[-1].strip()}" if lines else "")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask({"cmd": "quit"})
                self.proc.wait(timeout=30)
            except (AbError, OSError, ValueError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
