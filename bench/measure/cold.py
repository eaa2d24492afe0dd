"""How cold inputs rotate, in plain arithmetic (no torch: a run's plan counts it before any worker starts): the
settings (ColdPlan), how many copies they ask of a call's cold inputs (copies_for) and what a rotation was (Rotation).
The copies themselves are bench.measure.rotation's."""

from __future__ import annotations

import math
from dataclasses import dataclass

COLD_MULTIPLE = 3.0  # the copies' total over the cache: benchdnn's pool is ~3x the caches
COLD_MEMORY_SHARE = 0.25  # of the memory free when the copies are made, at most
MAX_COPIES = 4096  # benchdnn caps its CPU pool at 1,000 buffers; a linear decode step's state is 64 KiB, and 1,000 of
# those fall short of 3x a 64 MiB cache: past 4,096 copies a tiny input's rotation stays partly warm


@dataclass(frozen=True)
class ColdPlan:
    """How cold inputs are rotated: `multiple` times the cache (0: not at all, every call warm), within `memory_share`
    of free memory."""

    multiple: float = COLD_MULTIPLE
    memory_share: float = COLD_MEMORY_SHARE

    def to_dict(self) -> dict[str, float]:
        return {"multiple": self.multiple, "memory_share": self.memory_share}


@dataclass(frozen=True)
class Rotation:
    """What a case's rotation was: the record's cold_* fields."""

    copies: int  # the original counts as one
    set_bytes: int  # the cold inputs of one call
    cache_bytes: int  # the cache the copies had to exceed `multiple` times
    partly_warm: str = ""  # why the copies fell short of their target, or empty
    fill_s: float = 0.0  # seconds the copies took to make


def copies_for(set_bytes: int, cache_bytes: int, plan: ColdPlan, free_bytes: int | None) -> tuple[int, str]:
    """(copies, why short or ''): enough that copies x set_bytes > multiple x cache, at least 2, within MAX_COPIES and
    memory_share of free_bytes (the original is one of the copies and is already allocated)."""
    target = plan.multiple * cache_bytes
    want = max(2, math.ceil(target / max(set_bytes, 1)) + 1)
    copies, why = want, ""
    if copies > MAX_COPIES:
        copies = MAX_COPIES
        why = f"{MAX_COPIES} copies at most"
    if free_bytes is not None and (copies - 1) * set_bytes > plan.memory_share * free_bytes:
        copies = 1 + int(plan.memory_share * free_bytes // max(set_bytes, 1))
        why = f"{plan.memory_share:g} of the {free_bytes / 2**30:.1f} GiB free at most"
    if copies < want:
        return copies, (f"partly warm: {copies} cop{'y' if copies == 1 else 'ies'} of {set_bytes / 2**20:.3g} MiB "
                        f"= {copies * set_bytes / 2**20:.4g} MiB, short of {plan.multiple:g} x the "
                        f"{cache_bytes / 2**20:.4g} MiB cache ({why})")
    return copies, ""
