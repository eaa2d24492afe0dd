"""`python -m bench ...` in a subprocess, from this checkout (PYTHONPATH at the repository, nothing on PATH), its
command line built from the modules' own options rather than the generated bench/commands/arguments.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = ("import sys; from bench.commands import spec; r = spec.record(); spec.load = lambda: r; "
       "from bench.cli import main; sys.exit(main(sys.argv[1:]))")


def bench(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], cwd=cwd, env={"PYTHONPATH": str(REPO), "PATH": ""},
                          capture_output=True, text=True, timeout=timeout)
