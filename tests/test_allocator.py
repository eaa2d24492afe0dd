"""The tuned allocator of the processes that measure: torch's large blocks on transparent huge pages, and the
results' environment saying what the allocator was."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main
from bench.commands import run as run_command
from bench.commands.run import TUNED_MALLOC, huge_pages_note
from bench.measure import environment
from bench.measure.environment import allocator_settings

PROBE = ("import torch\nx = torch.ones(64 << 20, dtype=torch.uint8)\n"
         "print(sum(int(l.split()[1]) for l in open('/proc/self/smaps') if l.startswith('AnonHugePages')))")


def _huge_kib(env: dict[str, str]) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in TUNED_MALLOC}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         check=True, timeout=120)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(allocator_settings().get(environment.THP_KEY) != "madvise",
                    reason="the kernel's THP mode is not madvise: only there does the setting alone decide")
def test_tuned_allocator_puts_a_large_block_on_huge_pages():
    assert _huge_kib({}) == 0  # madvise: nothing on huge pages unless asked
    assert _huge_kib(TUNED_MALLOC) >= 32 << 10  # most of the 64 MiB block


def test_allocator_settings_name_the_variables_and_the_kernel_mode(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("MALLOC_") or key in ("LD_PRELOAD", "THP_MEM_ALLOC_ENABLE"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "7")
    monkeypatch.setenv("UNRELATED", "x")
    mode = tmp_path / "enabled"
    mode.write_text("always [madvise] never\n")
    monkeypatch.setattr(environment, "THP_MODE", mode)
    assert allocator_settings() == {"THP_MEM_ALLOC_ENABLE": "1", "MALLOC_TRIM_THRESHOLD_": "7",
                                    "transparent_hugepage": "madvise"}
    monkeypatch.setattr(environment, "THP_MODE", tmp_path / "absent")  # not Linux, or no THP: no mode to say
    assert "transparent_hugepage" not in allocator_settings()


def test_huge_pages_note_only_where_torch_asks_for_them_and_the_kernel_refuses():
    asked = {"THP_MEM_ALLOC_ENABLE": "1"}
    assert "transparent huge pages are off" in huge_pages_note({**asked, environment.THP_KEY: "never"})
    assert huge_pages_note({**asked, environment.THP_KEY: "madvise"}) is None
    assert huge_pages_note({**asked, environment.THP_KEY: "always"}) is None
    assert huge_pages_note({environment.THP_KEY: "never"}) is None  # --malloc default: nothing was asked
    assert huge_pages_note(asked) is None  # no THP on this OS: no mode to read


def test_a_cpu_run_says_so_at_its_start_where_the_kernel_refuses_huge_pages(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(run_command, "allocator_settings",
                        lambda: {"THP_MEM_ALLOC_ENABLE": "1", environment.THP_KEY: "never"})
    out = tmp_path / "r.json"
    assert main(["run", "--in-process", "--backend", "naive", "--seq", "32", "--heads", "2", "--kv-heads", "2",
                 "--phase", "prefill", "--mask", "causal", "--dtype", "fp32", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("note: transparent huge pages are off") and out.exists()


def test_only_bench_itself_restarts_for_the_tuned_allocator(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(Path(run_command.__file__).parents[1] / "__main__.py"), "run"])
    assert run_command._restartable()  # python -m bench
    monkeypatch.setattr(sys, "argv", [str(Path(pytest.__file__).parent / "__main__.py")])
    assert not run_command._restartable()  # python -m pytest: restarting as bench would replace the caller
