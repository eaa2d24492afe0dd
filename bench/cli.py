"""`python -m bench <command>`: one module per subcommand under bench/commands/.

The parser is rebuilt from bench/commands/arguments.json (bench.commands.spec), and a command's module is imported
only when it runs, so `--help`, argument errors and `bench kv` start without torch, pandas or matplotlib.

Exit codes: 0 done, 1 a finding (a regression, a failing case) or a bug (with its traceback), 2 bad input
(bench.errors.InputError and files that cannot be opened: one line naming the problem), 130 interrupted.
A Ctrl-C at any moment, while the command's modules are still being imported included, ends with exit 130 and one
line on stderr, never a traceback.
"""

from __future__ import annotations

import importlib
import sys

from bench.commands.spec import COMMANDS, build_parser
from bench.engine import interrupt
from bench.errors import InputError

__all__ = ["COMMANDS", "build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        run = args._run
        if isinstance(run, str):  # the command's module name (bench.commands.spec): imported now, torch and all
            interrupt.stage("import")
            run = importlib.import_module(run).run
            interrupt.deliver_lost()
    except KeyboardInterrupt:
        print("interrupted while starting; nothing was run", file=sys.stderr)
        return 130
    try:
        return int(run(args) or 0)
    except (InputError, OSError) as err:  # OSError: a path the user gave cannot be read or written
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
