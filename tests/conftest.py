"""What every test file shares: the `device` fixture, and tests that cannot run here folded into one skip per group.

A group is one test function's cases that cannot run on this machine for one reason: those whose `skipif` holds
(the CUDA-only tests on a machine where torch.cuda.is_available() is False), and, in a test marked
`skip_off_device` (it skips a backend that raises Unsupported), those whose `backend` cannot run on their `device`
(its `devices` trait: sdpa-efficient on the CPU). Each group shows as one skip, its reason
saying how many cases it stands for; the others are deselected, so a CPU run prints no wall of `s` and a GPU run
still runs every case. Folding happens after -k and -m, so the counts are of the cases selected.

The machine's ceilings and the presets' KV caches are measured once per test run (ATTNBENCH_REUSE_CEILINGS, read by
bench.measure.calibrate.reused): the first `bench run` of the run measures them, in-process or in a subprocess,
every later one reads them back, so the suite's many runs do not each spend seconds (tens, loaded) measuring.
A test that wants them measured afresh deletes the variable (monkeypatch.delenv).

Under pytest-xdist (`nox -s tests` runs one worker per core) each worker's torch, and every process it starts
(OMP_NUM_THREADS), gets an even share of the cores (one each with -n auto): workers that each start a thread per
core oversubscribe the machine, and torch's threads then spin waiting for each other (the float64 matrix ran 10x
slower so on a loaded 2-core machine). The serial part (the tests that time things) keeps torch's default.

torch.compile builds its kernels in this process, not in a pool of compile workers (TORCHINDUCTOR_COMPILE_THREADS=1,
here and in every process a test starts): the same kernels, but no pool that imports torch again in every process
that compiles FlexAttention, on a machine whose cores the tests already fill.

In the test processes, inductor precompiles the headers FlexAttention's CPU kernel includes (flex_kernel_headers.h)
rather than its cpp_prefix.h alone: compiling a shape took 6.8 s of CPU and now takes 4.6 (g++ parsed those headers
anew for each one), on the suite's 65 or so shapes (the float64 matrix among them). The same source and flags, so
the same kernel; a build-time saving only, and in tests only: `bench run` reports torch's own compile times. Nothing
changes where torch lacks the hook. The hook is set as the process's first compile imports inductor's codecache, so
no kernel builds the stock header's precompiled form as well (8.5 s of g++ once per run, here).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # before torch's inductor reads it

import pytest
import torch

from bench.backends import BACKENDS
from bench.measure.calibrate import REUSE_ENV
from tests.shared import shared_root

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_configure(config: pytest.Config) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)  # set in an xdist worker only
    if workers > 1:
        threads = max(1, len(os.sched_getaffinity(0)) // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)  # the `bench run`s and workers it starts


def _precompile_flex_headers(codecache) -> None:
    cls = getattr(codecache, "CppPythonBindingsCodeCache", None)
    stock = getattr(cls, "_get_uncompiled_header", None)
    if stock is None:
        return
    ours = str(Path(__file__).with_name("flex_kernel_headers.h"))

    def uncompiled_header(klass, device: str) -> str | None:
        header = stock(device)
        return ours if header == "torch/csrc/inductor/cpp_prefix.h" else header

    cls._get_uncompiled_header = classmethod(uncompiled_header)


class _PatchCodecacheOnImport(importlib.abc.MetaPathFinder):
    """Patches torch._inductor.codecache as a process's first compile imports it, before that compile runs: a
    patch applied after it would leave that first kernel building the stock header's PCH too (8.5 s of g++ here)."""

    NAME = "torch._inductor.codecache"

    def find_spec(self, name, path, target=None):
        if name != self.NAME:
            return None
        sys.meta_path.remove(self)  # once; and find_spec below must not come back here
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            exec_module = spec.loader.exec_module

            def exec_and_patch(module) -> None:
                exec_module(module)
                _precompile_flex_headers(module)

            spec.loader.exec_module = exec_and_patch  # this spec's own loader object
        return spec


if _PatchCodecacheOnImport.NAME in sys.modules:  # imported before this conftest (by a plugin, say)
    _precompile_flex_headers(sys.modules[_PatchCodecacheOnImport.NAME])
else:
    sys.meta_path.insert(0, _PatchCodecacheOnImport())


@pytest.fixture(scope="session", autouse=True)
def reuse_ceilings(tmp_path_factory):
    """Every `bench run` of this test run, here or in a subprocess, measures the ceilings once between them."""
    os.environ[REUSE_ENV] = str(shared_root(tmp_path_factory) / "ceilings.json")
    yield
    os.environ.pop(REUSE_ENV, None)


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def _cannot_run_here(item: pytest.Item) -> str | None:
    """Why `item` cannot run on this machine, or None; only reasons known before it runs."""
    for mark in item.iter_markers("skipif"):
        # string conditions would need pytest's evaluation; none of ours are strings, and they are left alone
        if mark.args and all(isinstance(c, bool) for c in mark.args) and any(mark.args):
            return mark.kwargs.get("reason", "skipif")
    if item.get_closest_marker("skip_off_device") is None:  # a test may assert the Unsupported: it runs
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    backend, device = params.get("backend"), params.get("device")
    if isinstance(backend, str) and isinstance(device, str) and backend in BACKENDS:
        devices = BACKENDS[backend].devices
        if device not in devices:
            return f"{backend} runs on {', '.join(devices)} only (its devices trait), not {device}"
    return None


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[tuple, list[pytest.Item]] = {}
    for item in items:
        reason = _cannot_run_here(item)
        if reason is not None:
            groups.setdefault((item.path, getattr(item, "originalname", item.name), reason), []).append(item)
    folded: set[int] = set()
    for (_, name, reason), members in groups.items():
        if len(members) > 1:
            reason += f" ({len(members)} cases of {name}, skipped as one)"
        # in front of the group's own skipif, which would otherwise give its reason first
        members[0].add_marker(pytest.mark.skipif(True, reason=reason), append=False)
        folded.update(id(m) for m in members[1:])
    if folded:
        config.hook.pytest_deselected(items=[i for i in items if id(i) in folded])
        items[:] = [i for i in items if id(i) not in folded]
