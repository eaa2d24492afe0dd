"""How much cache a timed call's cold inputs must get past (bench.measure.rotation): the CPU's, read from the OS,
or a GPU's L2, read from torch.

CPU: every distinct level-2 and level-3 cache instance under /sys/devices/system/cpu/cpu*/cache (an instance is
one (level, cpus sharing it) pair), summed. L2 counts beside L3 because on today's server parts the L3 does not
hold a copy of what the L2s hold (AMD's Zen L3 is a victim cache; Intel's has not been inclusive since Skylake-SP),
so the two add up to what a working set must exceed to leave both. A VM may report a cache that is not the one it
gets (a host socket's L3 shared with other tenants, or a made-up size): CPU_CACHE_FLOOR is the least this module
believes, so a reported cache under it is taken as the floor.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")
CPU_CACHE_FLOOR = 64 << 20  # bytes: under this, a reported cache is not trusted (every server CPU sold since 2020
# has at least this much L2 + L3 on a socket, and a VM's report of a smaller one may not be what it shares)


@dataclass(frozen=True)
class CacheSize:
    bytes: int  # what a rotation must exceed: the reported size, or the floor where that is smaller or unknown
    reported: int | None  # what the OS or the driver says, bytes (None: nothing readable)
    how: str  # where it was read, in words, for the record and the report


def _size(text: str) -> int:
    """sysfs's '32768K' (or '2M', or bytes) as bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


@functools.lru_cache(maxsize=4)
def cpu_cache(root: Path = SYS_CPU) -> CacheSize:
    """The CPU's L2 + L3 (module docstring), or the floor with the reason."""
    instances: dict[tuple[int, str], int] = {}
    for index in sorted(root.glob("cpu[0-9]*/cache/index[0-9]*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            if level < 2 or kind not in ("Unified", "Data"):
                continue
            instances[(level, (index / "shared_cpu_list").read_text().strip())] = _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
    if not instances:
        return CacheSize(CPU_CACHE_FLOOR, None, f"no cache sizes under {root}: the floor, "
                                                f"{CPU_CACHE_FLOOR >> 20} MiB")
    parts = []
    for level in sorted({lv for lv, _ in instances}):
        sizes = [b for (lv, _), b in instances.items() if lv == level]
        parts.append(f"L{level} {len(sizes)} x {sizes[0] / 2**20:g} MiB" if len(set(sizes)) == 1
                     else f"L{level} {sum(sizes) / 2**20:g} MiB in {len(sizes)}")
    reported = sum(instances.values())
    how = f"{' + '.join(parts)} = {reported / 2**20:g} MiB ({root})"
    if reported < CPU_CACHE_FLOOR:
        how += f"; under the {CPU_CACHE_FLOOR >> 20} MiB floor, which is used"
    return CacheSize(max(reported, CPU_CACHE_FLOOR), reported, how)


def gpu_l2(device: int | None = None) -> CacheSize:
    """The GPU's L2 (the current device's by default: `bench run --devices` gives each worker its own), as torch
    reports it."""
    import torch

    index = torch.cuda.current_device() if device is None else device
    l2 = int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or 0)
    if l2 <= 0:
        return CacheSize(64 << 20, None, "the GPU's L2 unknown to torch: 64 MiB assumed")
    return CacheSize(l2, l2, f"L2 {l2 / 2**20:g} MiB (torch.cuda.get_device_properties)")


PLANNED_GPU_L2 = 64 << 20  # a plan's guess at a GPU's L2 (an H100's is 50 MiB), read without loading torch


def planned_cache_bytes(device: str) -> int:
    """The cache a plan counts copies against: the CPU's as measured here, a GPU's guessed (its plan loads no torch)."""
    return PLANNED_GPU_L2 if device == "cuda" else cpu_cache().bytes


def cache_of(device: str) -> CacheSize:
    return gpu_l2() if device == "cuda" else cpu_cache()
