"""What a run measures and records before its first case: this machine's ceilings (said in a few lines), the
presets' KV caches, what each kind records of the sweep, and pytest-benchmark's machine and commit info."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.engine import interrupt
from bench.engine.execute import Executor
from bench.engine.options import Plan
from bench.engine.sweeps import parts
from bench.kinds import REGISTRY
from bench.results.meta import Calibration


def calibrate(executor: Executor, plan: Plan, say: Callable[[str], None]) -> Calibration:
    """The GEMM and copy ceilings in the sweep's dtypes, measured where the cases run."""
    say(f"calibrating {plan.device} (GEMM and copy ceilings)...")
    interrupt.stage("calibrate")
    calibration = executor.calibrate(plan.device, plan.sweep.dtypes)
    say(f"  GEMM {(calibration.gemm_flops_per_s or 0) / 1e9:.1f} GFLOP/s, "
        f"copy {(calibration.copy_bytes_per_s or 0) / 1e9:.1f} GB/s")
    for note in calibration.notes:
        say(f"  note: {note}")
    for dtype in calibration.emulated:
        share = (calibration.gemm(dtype) or 0) / (calibration.gemm_flops_per_s or 1)
        say(f"  {dtype} is emulated on this CPU (its GEMM runs at {100 * share:.1f}% of fp32's): its "
            "cases are slow for want of hardware, not code")
    return calibration


def kv_measured(executor: Executor, plan: Plan, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The presets' KV caches as MHA/GQA/MQA, allocated and measured: the KV-shrink claim's evidence."""
    say("measuring the presets' KV caches (MHA / GQA / MQA)...")
    return executor.kv_measured(plan.device)


def kind_facts(plan: Plan) -> dict[str, Any]:
    """What the kinds record of the sweep before its first case (RunMeta fields: each kind's `facts`)."""
    return {name: value for kind in REGISTRY for name, value in kind.facts(parts(plan.sweep)).items()}


def machine_info_here(environment: dict[str, Any]) -> dict[str, Any]:
    """pytest-benchmark's machine info, with ours (bench.measure.environment, from where the cases run) under
    "attnbench"."""
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

    return pytest_benchmark_generate_machine_info() | {"attnbench": environment}


def commit_info_here() -> dict[str, Any]:
    """pytest-benchmark's git info of the working directory."""
    from pytest_benchmark.utils import get_commit_info

    return get_commit_info()
