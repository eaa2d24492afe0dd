"""`python -m bench <command>`: one module per subcommand under bench/commands/.

Exit codes: 0 done, 1 a finding (a regression, a failing case) or a bug (with its traceback), 2 bad input
(bench.errors.InputError and files that cannot be opened: one line naming the problem), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from bench.errors import InputError

# name -> module with `help`, `add_arguments(parser)` and `run(args) -> int`
COMMANDS: dict[str, str] = {
    "run": "bench.commands.run",
    "merge": "bench.commands.merge",
    "report": "bench.commands.report",
    "compare": "bench.commands.compare",
    "ab": "bench.commands.ab",
    "history": "bench.commands.history",
    "baseline": "bench.commands.baseline",
    "kv": "bench.commands.kv",
    "backends": "bench.commands.backends",
    "check": "bench.commands.check",
    "profile": "bench.commands.profile",
    "gpu-check": "bench.commands.gpu_check",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="attention benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=module.help, description=module.help)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except (InputError, OSError) as err:  # OSError: a path the user gave cannot be read or written
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
