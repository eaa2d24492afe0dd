"""What the numbers depend on: software versions, CPU, threads, allocator, GPU clocks and power."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from typing import Any

import torch


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(__file__))
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def nvml_state() -> dict[str, Any]:
    """GPU name, driver, memory, clocks (current and max), power limit, temperature, throttle reasons.

    No NVML library or no GPU: {'available': False, 'reason': ...}, never an exception.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as err:  # ImportError, or NVMLError when no driver is present
        return {"available": False, "reason": f"{type(err).__name__}: {err}"}
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            clk = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
            gpus.append({
                "name": _str(pynvml.nvmlDeviceGetName(h)),
                "memory_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total,
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, clk[0]),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, clk[1]),
                "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, clk[0]),
                "mem_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, clk[1]),
                "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "clock_event_reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            })
        return {"available": True, "driver": _str(pynvml.nvmlSystemGetDriverVersion()), "gpus": gpus}
    except Exception as err:
        return {"available": False, "reason": f"{type(err).__name__}: {err}"}
    finally:
        pynvml.nvmlShutdown()


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def gpu_name(device: str) -> str | None:
    return torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else None


def fingerprint(device: str) -> dict[str, Any]:
    """What must match for two runs' times to be comparable."""
    return {"device": device, "cpu_model": cpu_model(), "gpu_name": gpu_name(device), "torch": torch.__version__,
            "cuda": torch.version.cuda, "threads": torch.get_num_threads()}


def environment(device: str, profile: str) -> dict[str, Any]:
    cuda = device == "cuda" and torch.cuda.is_available()
    return {
        "device": device,
        "profile": profile,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "triton": _version("triton"),
        "flash_attn": _version("flash-attn") or _version("flash_attn"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "gpu_name": gpu_name(device),
        "gpu_capability": list(torch.cuda.get_device_capability()) if cuda else None,
        "device_memory_bytes": torch.cuda.get_device_properties(0).total_memory if cuda else memory_bytes(),
        "allocator": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k == "LD_PRELOAD"},
        "nvml": nvml_state(),
        "git_commit": git_commit(),
        "python": platform.python_version(),
    }
