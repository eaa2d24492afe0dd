"""`python -m bench`: the project's input errors are one line and exit 2; a bug is a bug (traceback, exit 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main
from bench.commands import merge

REPO = Path(__file__).resolve().parents[1]


def test_input_error_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["merge", str(tmp_path / "missing.json"), "--out", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "no such file" in err


def test_a_bug_is_not_reported_as_bad_input(monkeypatch, tmp_path):
    def broken(args):
        raise ValueError("a bug in attnbench, not in the user's input")

    monkeypatch.setattr(merge, "run", broken)
    with pytest.raises(ValueError, match="a bug in attnbench"):
        main(["merge", "x.json", "--out", str(tmp_path / "m.json")])


def test_a_bug_in_a_fresh_process_exits_1_with_its_traceback(tmp_path):
    code = ("import sys; import bench.commands.merge as m; "
            "m.run = lambda args: {}['missing key']; "
            "from bench.cli import main; sys.exit(main(['merge', 'a.json', '--out', 'b.json']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "KeyError: 'missing key'" in proc.stderr


@pytest.mark.parametrize("argv, message", [
    (["run", "--seq", "1,x", "--list"], "--seq: expected comma-separated integers, got '1,x'"),
    (["run", "--budget", "soon", "--list"], "--budget: expected a number of seconds, got 'soon'"),
    (["run", "--threads", "two", "--list"], "--threads 'two': expected an integer"),
    (["run", "--backend", "turbo", "--list"], "unknown backend 'turbo'"),
    (["kv", "--model", "llama-9"], "unknown model preset 'llama-9'"),
    (["compare", "a.json", "b.json", "--threshold", "lots"], "threshold 'lots' is not a number"),
])
def test_option_errors_name_the_option(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text("{}")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("argv, flag", [(["--backend", "foo"], "--backend"), (["--lengths", "foo"], "--lengths"),
                                        (["--phase", "decode", "--page-size", "0"], "--page-size")])
def test_a_refused_axis_value_names_its_flag(argv, flag, capsys):
    assert main(["run", "--list", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"error: {flag}: ")
