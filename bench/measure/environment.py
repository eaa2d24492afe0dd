"""What the numbers depend on: software versions, CPU, threads, allocator, GPU clocks and power; and the machine
fingerprint, the six fields that must match for two runs' times to be comparable.

torch is imported inside the functions that read it: comparing fingerprints of results files needs no torch.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

FINGERPRINT_FIELDS = ("device", "cpu_model", "gpu_name", "torch", "cuda", "threads")


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


def last_level_cache_bytes(device: str) -> int | None:
    """The largest data cache the device has (CPU: cpu0's highest cache level, from sysfs; CUDA: its L2), or None:
    a decode step whose bytes fit in it may read faster than DRAM, and the roofline says so."""
    if device == "cuda":
        import torch

        return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)) or None
    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            text = (index / "size").read_text().strip()
            scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            sizes[int((index / "level").read_text())] = int(text.rstrip("KMG")) * scale
        except (OSError, ValueError):
            continue
    return sizes[max(sizes)] if sizes else None


THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
THP_KEY = "transparent_hugepage"  # the kernel's mode, as allocator_settings records it


def allocator_settings() -> dict[str, str]:
    """What decides where a measuring process's large blocks live: glibc's MALLOC_* and LD_PRELOAD, torch's
    THP_MEM_ALLOC_ENABLE, and the kernel's transparent huge page mode (the bracketed word of THP_MODE, where the
    OS has one: with `never`, THP_MEM_ALLOC_ENABLE changes nothing)."""
    found = {k: v for k, v in os.environ.items()
             if k.startswith("MALLOC_") or k in ("LD_PRELOAD", "THP_MEM_ALLOC_ENABLE")}
    try:
        mode = re.search(r"\[(\w+)\]", THP_MODE.read_text())
    except OSError:
        mode = None
    if mode:
        found[THP_KEY] = mode.group(1)
    return found


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(__file__))
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _nvml() -> Any:
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _field(fn, *args) -> Any:
    """One NVML reading; None where this GPU or driver does not support it (MIG, virtual GPUs, old drivers)."""
    try:
        value = fn(*args)
    except Exception:
        return None
    return _str(value) if isinstance(value, (bytes, str)) else value


def _gpu_reading(nv: Any, index: int) -> dict[str, Any]:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    sm, mem = nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM
    power_limit, power = _field(nv.nvmlDeviceGetEnforcedPowerLimit, h), _field(nv.nvmlDeviceGetPowerUsage, h)
    memory = _field(nv.nvmlDeviceGetMemoryInfo, h)
    return {
        "name": _field(nv.nvmlDeviceGetName, h),
        "memory_bytes": getattr(memory, "total", None),
        "sm_clock_mhz": _field(nv.nvmlDeviceGetClockInfo, h, sm),
        "mem_clock_mhz": _field(nv.nvmlDeviceGetClockInfo, h, mem),
        "sm_clock_max_mhz": _field(nv.nvmlDeviceGetMaxClockInfo, h, sm),
        "mem_clock_max_mhz": _field(nv.nvmlDeviceGetMaxClockInfo, h, mem),
        "power_limit_w": power_limit / 1000 if power_limit is not None else None,
        "power_w": power / 1000 if power is not None else None,
        "temperature_c": _field(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
        "clock_event_reasons": _field(nv.nvmlDeviceGetCurrentClocksEventReasons, h),
    }


def nvml_state() -> dict[str, Any]:
    """GPU name, driver, memory, clocks (current and max), power limit, temperature, clock-event reasons.

    No NVML library or no GPU: {'available': False, 'reason': ...}, never an exception; a reading this GPU
    does not support is None.
    """
    try:
        nv = _nvml()
    except Exception as err:  # ImportError, or NVMLError when no driver is present
        return {"available": False, "reason": f"{type(err).__name__}: {err}"}
    try:
        gpus = [_gpu_reading(nv, i) for i in range(nv.nvmlDeviceGetCount())]
        return {"available": True, "driver": _field(nv.nvmlSystemGetDriverVersion), "gpus": gpus}
    except Exception as err:
        return {"available": False, "reason": f"{type(err).__name__}: {err}"}
    finally:
        _field(nv.nvmlShutdown)


def gpu_reading(index: int = 0) -> dict[str, Any] | None:
    """Clocks, power, temperature, energy and clock-event reasons of torch's CUDA device `index` now (before and
    after a case), or None. NVML finds it by UUID or PCI bus id (bench.measure.nvml), never by index."""
    from bench.measure.nvml import Gpu

    gpu = Gpu.open(index)
    if gpu is None:
        return None
    return {k: v for k, v in gpu.reading().items() if k not in ("name", "memory_bytes", "power_limit_w")}


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def gpu_name(device: str) -> str | None:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else None


MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def host_id() -> str:
    """This host as the OS names it: a short hash of its machine id (systemd's /etc/machine-id) and hostname.

    Not the CPU's name: hosts sold under one name differ (one 'AMD EPYC' measured GEMM 183 GFLOP/s, another 117).
    Machines cloned from one image can share both, so a stored baseline also keeps the ceilings measured with it
    (bench.regress.gate checks both)."""
    machine = ""
    for path in MACHINE_ID_FILES:
        try:
            with open(path) as f:
                machine = f.read().strip()
            break
        except OSError:
            continue
    return hashlib.sha256(f"{machine}|{platform.node()}".encode()).hexdigest()[:16]


def fingerprint(device: str) -> dict[str, Any]:
    """What must match for two runs' times to be comparable (FINGERPRINT_FIELDS)."""
    import torch

    return {"device": device, "cpu_model": cpu_model(), "gpu_name": gpu_name(device), "torch": torch.__version__,
            "cuda": torch.version.cuda, "threads": torch.get_num_threads()}


def environment(device: str, profile: str) -> dict[str, Any]:
    import torch

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
        "llc_bytes": last_level_cache_bytes("cuda" if cuda else "cpu"),
        "allocator": allocator_settings(),
        "nvml": nvml_state(),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "host_id": host_id(),
    }


def fingerprint_key(fp: dict) -> str:
    """A readable slug plus a short hash of the six fields, e.g. cpu-intel-xeon-...-torch2.13.0-cpu-t2-1a2b3c4d."""
    core = {k: fp.get(k) for k in FINGERPRINT_FIELDS}
    digest = hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:8]
    hardware = core["gpu_name"] if core["device"] == "cuda" and core["gpu_name"] else core["cpu_model"]
    words = [core["device"], hardware, f"torch{core['torch']}", f"t{core['threads']}"]
    slug = re.sub(r"\((r|tm)\)", "", "-".join(str(w) for w in words if w).lower())
    slug = re.sub(r"[^a-z0-9.]+", "-", slug).strip("-.")[:60].rstrip("-.")
    return f"{slug}-{digest}"


def fingerprint_diff(baseline: dict | None, current: dict | None) -> list[str]:
    """One line per differing field, naming both values; empty when the machines match."""
    if not isinstance(baseline, dict) or not isinstance(current, dict):
        which = " and ".join(n for n, fp in (("baseline", baseline), ("current", current)) if not isinstance(fp, dict))
        return [f"the {which} run records no machine fingerprint"]
    return [f"{k}: {baseline.get(k)!r} (baseline) vs {current.get(k)!r} (current)"
            for k in FINGERPRINT_FIELDS if baseline.get(k) != current.get(k)]
