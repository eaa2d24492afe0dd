"""The environment section: one column per run, every fact the run recorded about where it ran (versions, device,
allocator, NVML, the measured GEMM and copy ceilings, the dtypes this CPU only emulates), so that a reader can judge
whether two runs are comparable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.report import kernels
from bench.report.blocks import Block, Heading, Table, text
from bench.report.units import fmt_bandwidth, fmt_bytes, fmt_flops

if TYPE_CHECKING:
    from bench.report.sections import Report


def env_text(key: str, value: Any) -> str:
    """Environment values as one readable cell; nested ones (allocator settings, NVML) flattened."""
    if key == "device_memory_bytes" and isinstance(value, (int, float)):
        return fmt_bytes(value)
    if key == "allocator" and isinstance(value, dict):
        return (", ".join(f"{k}={v}" for k, v in value.items())
                or "default (no MALLOC_*, LD_PRELOAD or THP_MEM_ALLOC_ENABLE set)")
    if key == "nvml" and isinstance(value, dict):
        if not value.get("available"):
            return f"unavailable ({value.get('reason', 'no reason given')})"
        gpus = value.get("gpus") if isinstance(value.get("gpus"), list) else []
        return f"driver {value.get('driver')}; " + "; ".join(
            f"{g.get('name')}: SM {g.get('sm_clock_mhz')}/{g.get('sm_clock_max_mhz')} MHz, "
            f"{g.get('power_w')}/{g.get('power_limit_w')} W, {g.get('temperature_c')} °C, "
            f"clock event reasons {g.get('clock_event_reasons')}" for g in gpus if isinstance(g, dict))
    if isinstance(value, dict):
        return ", ".join(f"{k}={text(v)}" for k, v in value.items()) or "—"
    if isinstance(value, list):
        return ", ".join(text(v) for v in value) or "—"
    return text(value)


ENV_FIELDS = ("torch", "cuda", "cpu_model", "gpu_name", "threads", "device_memory_bytes", "allocator", "git_commit")


def section(report: Report) -> list[Block]:
    """All runs in one table, whatever they hold."""
    runs, frame = report.runs, report.frame
    rows: list[list[str]] = []

    def add(label: str, values: list[str]) -> None:
        rows.append([label, *values])

    add("run", [r.run_id for r in runs])
    add("machine", [r.machine for r in runs])
    add("device", [r.device for r in runs])
    add("profile", [text(r.profile) for r in runs])
    add("complete", [text(r.complete) for r in runs])
    add("written", [text(r.datetime) for r in runs])
    for key in ENV_FIELDS:
        add(key, [env_text(key, r.env.get(key)) for r in runs])
    add("GEMM ceiling (measured)", [fmt_flops(r.calibration.gemm_flops_per_s)
                                    if r.calibration.gemm_flops_per_s is not None else "—" for r in runs])
    add("copy ceiling (measured)", [fmt_bandwidth(r.calibration.copy_bytes_per_s)
                                    if r.calibration.copy_bytes_per_s is not None else "—" for r in runs])
    rows += kernels.ceiling_rows([r.calibration for r in runs], [r.env.get("gpu_name") for r in runs])
    # a dtype this CPU has no hardware for: its cases are slow for that reason, which a reader must know
    add("emulated dtypes (GEMM far below fp32's)", [", ".join(r.calibration.emulated) or "none" for r in runs])
    add("calibration notes", ["; ".join(r.calibration.notes) or "—" for r in runs])
    counts = frame.groupby("run_id")["status"].agg(lambda s: f"{(s == 'ok').sum()} ok of {len(s)}")
    add("cases", [counts.get(r.run_id, "0") for r in runs])
    shown = set(ENV_FIELDS) | {"device", "profile"}
    for key in sorted({k for r in runs for k in r.env if k not in shown}):  # whatever else the engine recorded
        add(key, [env_text(key, r.env.get(key)) for r in runs])
    add("results file", [r.source for r in runs])
    return [Heading("Environment"), Table(["", *[f"run {i + 1}" for i in range(len(runs))]], rows)]
