"""attnbench as a user gets it: a wheel built from this tree, installed into a fresh virtual environment, runs from an
empty folder — the command line (its arguments.json), the model presets (configs/*.json) and `gpu-check --dry-run`,
whose correctness step is the shipped conformance check, not this repository's tests/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.shared import once

REPO = Path(__file__).resolve().parents[1]


def _run(cmd: list, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYTEST_")}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env | {"KINETO_LOG_LEVEL": "5"}, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def installed_gpu_check(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A wheel built from this tree, installed into a fresh virtual environment, and what it printed from an empty
    folder: once per test run (tests/shared.py), for this file's test and test_measure_modes.py's
    test_gpu_check_dry_run, which reads the same `gpu-check --dry-run` (a minute or more of the suite's time each)."""
    return once(tmp_path_factory, "wheel-gpu-check", _install_and_run)


def _install_and_run(tmp_path: Path) -> dict:
    # build from a copy, so the checkout gets no build/ or egg-info of ours
    src = tmp_path / "src"
    shutil.copytree(REPO / "bench", src / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", dist,
          src], tmp_path)
    (wheel,) = dist.glob("attnbench-*.whl")

    # a fresh environment; its dependencies (torch, pandas, ...) are this interpreter's, seen through a .pth file
    # (no download), while attnbench itself comes only from the wheel
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
                .stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel], tmp_path)

    empty = tmp_path / "empty"
    empty.mkdir()
    where = _run([python, "-c", "import bench; print(bench.__file__)"], empty).stdout.strip()
    run_help = _run([python, "-m", "bench", "run", "--help"], empty).stdout
    kv = _run([python, "-m", "bench", "kv", "--model", "llama-3-8b"], empty).stdout
    proc = _run([python, "-m", "bench", "gpu-check", "--dry-run", "--out", tmp_path / "check"], empty, timeout=900)
    return {"env_dir": str(env_dir), "where": where, "run_help": run_help, "kv": kv, "stdout": proc.stdout,
            "left_in_empty": [p.name for p in empty.iterdir()]}


@pytest.mark.slow
def test_the_installed_wheel_runs_gpu_check_from_an_empty_folder(tmp_path_factory):
    folder, got = installed_gpu_check(tmp_path_factory)
    assert Path(got["where"]).is_relative_to(got["env_dir"]), f"bench imported from {got['where']}, not the wheel"
    assert "usage: python -m bench" in got["run_help"]
    assert "llama-3-8b" in got["kv"]

    summary = (folder / "check" / "summary.txt").read_text()
    assert re.search(r"correctness: exit 0: naive \d+ pass", summary) and "sweep: exit 0" in summary, \
        got["stdout"][-3000:]
    assert "tests/" not in got["stdout"]
    assert got["left_in_empty"] == []  # every file went to --out
