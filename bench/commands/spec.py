"""The command line's declarations as data, so that `python -m bench --help`, every subcommand's `--help`, argument
errors and the inert pytest plugin need no torch.

Each subcommand module declares its options in `add_arguments(parser)`, which is the source of truth; but the run's
axes are declared by the kinds (bench.kinds) and composed into the engine's Sweep (bench.plan.sweep), which
import the backends' registry.
So `record()` replays every `add_arguments` (and bench.engine.options.add_options, the pytest plugin's half) into a
recorder and the result is kept in arguments.json beside this module; `build_parser()` rebuilds the same argparse
parser from that file, importing nothing heavy. After changing an option, regenerate it with

    python -m bench.commands.spec --write

tests/test_cli_start.py fails, naming this command, whenever the file and the modules disagree.

Why a file and not the modules themselves (measured 2026-12-04, 2-core AMD EPYC, torch 2.13): `--help` from the
file takes 0.05-0.07 s and `run --help` 0.07-0.09 s; replaying the modules takes 2.2-3.4 s, since `backends`,
`check` and `profile` import torch (1.8-2.4 s alone), and even with torch deferred in those three the other
modules' imports cost 0.20-0.23 s, three times the file's whole start.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

SPEC_FILE = Path(__file__).with_name("arguments.json")
PROG = "python -m bench"
DESCRIPTION = "attention benchmarks"
# name -> module with `help`, `add_arguments(parser)` and `run(args) -> int`; imported only when that command runs
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
# the `type=` callables an option may use: JSON keeps their names
TYPES: dict[str, Callable[[str], Any]] = {"Path": Path, "int": int, "float": float, "str": str}


# ------------------------------------------------------------------------------ JSON <-> argparse keyword arguments
def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return {"$path": str(value)}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    raise TypeError(f"{value!r}: an option's value must be JSON, a Path or a tuple to be kept in {SPEC_FILE.name}")


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "$path" in value:
        return Path(value["$path"])
    if isinstance(value, dict) and "$tuple" in value:
        return tuple(_decode(v) for v in value["$tuple"])
    return [_decode(v) for v in value] if isinstance(value, list) else value


def _encode_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in kwargs.items():
        if key == "type":
            names = [name for name, t in TYPES.items() if t is value]
            if not names:
                raise TypeError(f"type={value!r}: add it to bench.commands.spec.TYPES to keep it in {SPEC_FILE.name}")
            out[key] = names[0]
        elif key == "action" and not isinstance(value, str):
            raise TypeError(f"action={value!r}: only argparse's named actions can be kept in {SPEC_FILE.name}")
        else:
            out[key] = _encode(value)
    return out


def _decode_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: TYPES[v] if k == "type" else _decode(v) for k, v in kwargs.items()}


# ------------------------------------------------------------------------------------------- recording the modules
class _Recorder:
    """Stands in for an ArgumentParser (or a group, or a subparsers action) and keeps every call made to it."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        self.calls.append({"argument": list(flags), "kwargs": _encode_kwargs(kwargs)})

    def add_argument_group(self, title: str | None = None, description: str | None = None) -> _Recorder:
        group = _Recorder()
        self.calls.append({"group": {"title": title, "description": description}, "calls": group.calls})
        return group

    def add_subparsers(self, **kwargs: Any) -> _Recorder:
        sub = _Recorder()
        self.calls.append({"subparsers": _encode_kwargs(kwargs), "calls": sub.calls})
        return sub

    def add_parser(self, name: str, **kwargs: Any) -> _Recorder:
        parser = _Recorder()
        self.calls.append({"parser": name, "kwargs": _encode_kwargs(kwargs), "calls": parser.calls})
        return parser


def record() -> dict[str, Any]:
    """Every command's declarations, read from the modules themselves (this imports them all, torch included)."""
    from bench.engine import options

    commands = {}
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        recorder = _Recorder()
        module.add_arguments(recorder)
        commands[name] = {"help": module.help, "calls": recorder.calls}
    run_options = _Recorder()
    options.add_options(run_options.add_argument)
    return {"generated_by": "python -m bench.commands.spec --write (from each command's add_arguments)",
            "commands": commands, "run_options": run_options.calls}


# ------------------------------------------------------------------------------------------------ replaying them
@cache
def load() -> dict[str, Any]:
    return json.loads(SPEC_FILE.read_text())


def _replay(target: Any, calls: list[dict[str, Any]]) -> None:
    for call in calls:
        if "argument" in call:
            target.add_argument(*call["argument"], **_decode_kwargs(call["kwargs"]))
        elif "group" in call:
            _replay(target.add_argument_group(**call["group"]), call["calls"])
        elif "subparsers" in call:
            _replay(target.add_subparsers(**_decode_kwargs(call["subparsers"])), call["calls"])
        else:
            _replay(target.add_parser(call["parser"], **_decode_kwargs(call["kwargs"])), call["calls"])


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each command's `_run` default is its module's name, imported only to run it."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in load()["commands"].items():
        cmd = sub.add_parser(name, help=command["help"], description=command["help"])
        _replay(cmd, command["calls"])
        cmd.set_defaults(_run=COMMANDS[name])
    return parser


def add_run_options(add: Callable[..., Any], flag_prefix: str = "", dest_prefix: str = "") -> None:
    """bench.engine.options.add_options without importing it: the same options, declared through `add`."""
    for call in load()["run_options"]:
        kwargs = _decode_kwargs(call["kwargs"])
        kwargs["dest"] = dest_prefix + kwargs["dest"]
        add(*(f"--{flag_prefix}{flag[2:]}" for flag in call["argument"]), **kwargs)


def run_option_names() -> list[str]:
    """bench.engine.options.option_names without importing it."""
    return [call["kwargs"]["dest"] for call in load()["run_options"]]


def write_or_check(path: Path, text: str, argv: list[str], module: str) -> int:
    """`python -m MODULE --write | --check` of a generated file: write it, or say (exit 1) when it is stale."""
    if argv == ["--write"]:
        path.write_text(text)
        print(f"wrote {path}")
        return 0
    if argv == ["--check"]:
        same = path.exists() and path.read_text() == text
        print(f"{path} is {'up to date' if same else f'stale: run python -m {module} --write'}")
        return 0 if same else 1
    print(f"usage: python -m {module} --write | --check", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    return write_or_check(SPEC_FILE, json.dumps(record(), indent=1, ensure_ascii=False) + "\n", argv,
                          "bench.commands.spec")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
