"""A command line that starts at once: `--help`, every subcommand's `--help` and `bench kv` import no torch, pandas
or matplotlib (checked in sys.modules, not by the clock), because the parser is rebuilt from
bench/commands/arguments.json, which must say exactly what the command modules declare."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.commands import spec

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas", "matplotlib", "scipy")
LIGHT_COMMANDS = [["--help"], *([name, "--help"] for name in spec.COMMANDS), ["baseline", "save", "--help"],
                  ["kv", "--model", "llama-3-8b", "--context", "128k", "--memory", "80GiB"],
                  ["kv", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--json"],
                  ["kv", "--context", "lots", "--model", "gpt2"]]  # a bad value: exit 2, still light

# Runs each command as `python -m bench` does, in one fresh process, and names the first that imported a heavy module.
PROBE = """
import json, runpy, sys
heavy, seen = {heavy!r}, []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["bench", *argv]
    try:
        runpy.run_module("bench", run_name="__main__", alter_sys=True)
    except SystemExit as end:
        code = end.code
    seen.append([argv, code, [m for m in heavy if m in sys.modules]])
print(json.dumps(seen), file=sys.stderr)
"""


def test_help_and_kv_import_no_torch_pandas_or_matplotlib():
    proc = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), json.dumps(LIGHT_COMMANDS)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    seen = json.loads(proc.stderr.strip().splitlines()[-1])
    assert [argv for argv, _, _ in seen] == LIGHT_COMMANDS
    for argv, code, heavy in seen:
        assert heavy == [], f"python -m bench {' '.join(argv)} imported {heavy}"
        assert code == (2 if "lots" in argv else 0), argv


def test_a_cpu_run_imports_no_torch_in_its_own_process(tmp_path):
    """`bench run` plans, records and reports here; torch loads only in the worker its cases run in, and the
    results file still says what the worker's torch is and the threads it ran with."""
    out = tmp_path / "r.json"
    argv = ["run", "--profile", "quick", "--backend", "naive", "--heads", "2", "--kv-heads", "2", "--seq", "32",
            "--device", "cpu", "--threads", "1", "--out", str(out)]
    proc = subprocess.run([sys.executable, "-c", PROBE.format(heavy=("torch",)), json.dumps([argv])], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == [[argv, 0, []]], proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    import torch

    assert doc["machine_info"]["attnbench"]["torch"] == torch.__version__
    assert doc["machine_info"]["attnbench"]["threads"] == 1
    assert {b["extra_info"]["threads"] for b in doc["benchmarks"]} == {1}


def test_import_bench_and_the_inert_pytest_plugin_are_light_and_the_api_loads_on_use():
    # the registry loads without torch too (a plan reads only its traits); a backend's kernel loads on its first call
    code = ("import sys, bench, bench.cli, bench.suite.plugin; heavy = [m for m in {h!r} if m in sys.modules]; "
            "print(heavy); attention = bench.attention; print('torch' in sys.modules, callable(bench.backend)); "
            "import torch; q = torch.ones(1, 2, 3, 4); print(torch.equal(attention(q, q, q, backend='naive'), q), "
            "'bench.backends.naive' in sys.modules, 'bench.backends.flex' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code.format(h=HEAVY)], cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=True).stdout.splitlines()
    assert out == ["[]", "False True", "True True False"]


def test_unknown_public_name_is_an_attribute_error():
    import bench

    with pytest.raises(AttributeError, match="no attribute 'attentoin'"):
        bench.attentoin  # noqa: B018
    assert {"attention", "backend", "AttentionShape"} <= set(dir(bench))


def test_arguments_json_is_what_the_modules_declare():
    recorded = json.loads(json.dumps(spec.record()))
    assert recorded == spec.load(), "bench/commands/arguments.json is stale: python -m bench.commands.spec --write"


def _parser_from_modules() -> argparse.ArgumentParser:
    """The parser as the modules build it, without the JSON in between."""
    parser = argparse.ArgumentParser(prog=spec.PROG, description=spec.DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name in spec.COMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=module.help, description=module.help)
        module.add_arguments(cmd)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's sub-commands by name ({} when it has none)."""
    found = [a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0]) if found else {}


def _facts(parser: argparse.ArgumentParser) -> list[tuple]:
    """Every option's flags, destination, default, type, action, choices, nargs and whether it is required."""
    return [(a.option_strings, a.dest, a.default, a.type, type(a).__name__, a.choices, a.nargs, a.required)
            for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]


@pytest.mark.parametrize("name", list(spec.COMMANDS))
def test_the_rebuilt_parser_equals_the_modules_own(name):
    ours, theirs = _subparsers(spec.build_parser())[name], _subparsers(_parser_from_modules())[name]
    pairs = [(ours, theirs), *zip(_subparsers(ours).values(), _subparsers(theirs).values(), strict=True)]
    for a, b in pairs:  # the command, and its own sub-commands (baseline save|show|path)
        assert a.format_help() == b.format_help()
        assert _facts(a) == _facts(b)


def test_the_plugin_declares_the_run_options_of_bench_engine_options():
    from bench.engine import options

    assert spec.run_option_names() == options.option_names()
    calls: list[tuple] = []
    options.add_options(lambda *flags, **kw: calls.append((flags, kw)), flag_prefix="attn-", dest_prefix="attn_")
    light: list[tuple] = []
    spec.add_run_options(lambda *flags, **kw: light.append((flags, kw)), flag_prefix="attn-", dest_prefix="attn_")
    assert light == calls


def test_a_value_the_json_cannot_hold_is_refused_by_name():
    recorder = spec._Recorder()
    with pytest.raises(TypeError, match="type=.*add it to bench.commands.spec.TYPES"):
        recorder.add_argument("--x", type=lambda text: text)
    with pytest.raises(TypeError, match="an option's value must be JSON"):
        recorder.add_argument("--y", default=object())


def test_spec_check_says_when_the_file_is_stale(monkeypatch, tmp_path, capsys):
    stale = tmp_path / "arguments.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(spec, "SPEC_FILE", stale)
    assert spec.main(["--check"]) == 1
    assert "stale: run python -m bench.commands.spec --write" in capsys.readouterr().out
    assert spec.main(["--write"]) == 0 and spec.main(["--check"]) == 0
    assert spec.main([]) == 2
