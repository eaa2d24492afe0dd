"""Sweeps expanded into an ordered list of cases with stable ids; the list sharded and identified.

The axes are the Sweep's (bench.plan.sweep), the profiles bench.profiles'. The expansion asks the registered kinds
(bench.kinds.REGISTRY; the steps are bench.kinds.expansion's): the sweep's head geometries, then per geometry its
dtypes x masks x each axis declared with `shape_field=` (swept here with no hook), each point's cases from the kind
that claims the geometry, then the kinds' cases after the grid and the sweep's `also` parts. Nothing here names a
kind.
"""

from __future__ import annotations

import hashlib
import itertools

from bench.errors import UsageError
from bench.kinds import REGISTRY, kind_of
from bench.kinds.expansion import Geometry
from bench.plan.sweep import Sweep, axis_fields, from_flags
from bench.problem.case import Case  # re-exported: the engine and its callers name it here
from bench.profiles import PROFILES, profile  # re-exported: the tests name them here

__all__ = ["PROFILES", "Case", "Sweep", "axis_fields", "from_flags", "profile"]


def geometries(sweep: Sweep) -> list[Geometry]:
    """The sweep's head geometries: the last kind's that makes any (a later kind's replace the axes')."""
    return REGISTRY.last(lambda kind: kind.geometries(sweep, REGISTRY)) or []


def cases(sweep: Sweep, device: str) -> list[Case]:
    """Every case of the sweep, ordered so that cases sharing a shape are adjacent (one reference each)."""
    out: list[Case] = []
    axes = [(f.metadata["shape_field"], getattr(sweep, f.name)) for f in axis_fields() if f.metadata["shape_field"]]
    names = [name for name, _ in axes]
    found = geometries(sweep)
    for g in found:
        values = [g.axis_values(name, given) for name, given in axes]
        for dtype, mask, *more in itertools.product(sweep.dtypes, g.masks, *values):
            # the axes' values are record columns (their text, as the command line gives them): shape_from_fields
            point = g.fields() | {"dtype": dtype, "mask": mask} | dict(zip(names, more, strict=True))
            out += _point_cases(sweep, g, point, device)
    if "decode" in sweep.phases and "prefill" not in sweep.phases and not out:
        raise UsageError("decode needs a causal or window mask")
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise UsageError("the sweep lists the same case twice; check for repeated axis values")
    seen = set(ids)
    after = [case for kind in REGISTRY for case in kind.more_cases(sweep, device, found)]
    for case in after + [case for part in sweep.also for case in cases(part, device)]:
        if case.id not in seen:  # two sources of one case (two parts, two kinds' extra cases): it runs once
            seen.add(case.id)
            out.append(case)
    return out


def _point_cases(sweep: Sweep, g: Geometry, point: dict, device: str) -> list[Case]:
    """A point's cases: the last kind's that claims the geometry (dense's grid claims every one)."""
    return REGISTRY.last(lambda kind: kind.cases(sweep, g, point, device, REGISTRY)) or []


def parts(sweep: Sweep) -> list[Sweep]:
    """The sweep and every sweep it runs `also`, depth first."""
    return [sweep, *(p for part in sweep.also for p in parts(part))]


def shard(all_cases: list[Case], text: str) -> list[Case]:
    """'K/N' (1-based): the K-th of N shards balanced by predicted cost. Cases are dealt out dearest first, each
    to the shard where that case's backend costs least so far (ties: the least cost overall, then the lower
    shard; equal costs: the earlier case); each shard keeps the sweep's order. The same case list always gives
    the same shards, so `bench merge` can join them. (A stride over the list put every case of one backend in
    one shard: the backends are the inner loop.)"""
    try:
        k_text, n_text = text.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected K/N with integers, e.g. 2/4") from None
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"--shard {text}: K must be between 1 and N (N >= 1)")
    owner = shard_owners(all_cases, n)
    return [c for c, o in zip(all_cases, owner, strict=True) if o == k - 1]


CASE_SETUP_FLOPS = 1e9  # a case's fixed cost (warm-up, reference, timer), so that small cases weigh something


def predicted_cost(case: Case) -> float:
    """What a case is expected to cost: its kind's FLOPs plus a fixed set-up cost."""
    return CASE_SETUP_FLOPS + kind_of(case).predicted_flops(case)


def shard_owners(all_cases: list[Case], n: int) -> list[int]:
    """The 0-based shard of each case: longest-processing-time first over predicted_cost, within each backend
    (backends differ in speed by more than FLOPs tell, so each is split evenly), ties to the lighter shard."""
    costs = [predicted_cost(c) for c in all_cases]
    load = [0.0] * n
    by_backend: dict[str, list[float]] = {}
    owner = [0] * len(all_cases)
    for i in sorted(range(len(all_cases)), key=lambda i: (-costs[i], i)):
        mine = by_backend.setdefault(all_cases[i].backend, [0.0] * n)
        j = min(range(n), key=lambda j: (mine[j], load[j], j))
        owner[i] = j
        mine[j] += costs[i]
        load[j] += costs[i]
    return owner


def sweep_id(selected: list[Case]) -> str:
    """Identifies the case list, so that --resume refuses a file from another sweep."""
    digest = hashlib.sha256("\n".join(c.id for c in selected).encode()).hexdigest()
    return digest[:16]

