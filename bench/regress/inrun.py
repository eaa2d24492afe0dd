"""The in-run control of bench compare: which control a case's rounds are scaled by, and the verdicts it demotes.

A timing verdict must hold in seconds and in units of the machine's speed beside the case: its own probe timed
between its rounds (bench.measure.control: the GEMM's FLOP/s, and a cold case's memory read in bytes/s) where both
runs recorded the same one, else each run's GEMM at its start and end. A case timed in a slow spell of the host
(its GEMM probe under SPELL_SHARE of its run's usual) cannot be regressed or improved in time either.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from bench.measure.control import spell_shares
from bench.regress.noise import Rule
from bench.regress.verdicts import CaseVerdict
from bench.results import Entry

PER_PASS = {"control_flops": "pass_control", "control_read": "pass_read"}  # a probe's field -> its pooled passes'


def segments(entry: Entry, local: str | None) -> list[tuple[int, int, float | None]]:
    """(start, end, own control) of each pooled pass in an entry's samples; one segment for a plain run.
    local: the record field of the case's own probe (PER_PASS) that is the control, else the run's GEMM (pass_gemm)."""
    n = len(entry.samples)
    split = entry.pass_rounds
    if not (len(split) > 1 and sum(split) == n):
        return [(0, n, getattr(entry.record, local) if local else None)]
    bounds = np.cumsum([0, *split])
    own = getattr(entry, PER_PASS[local]) if local else entry.pass_gemm
    return [(int(lo), int(hi), g) for lo, hi, g in zip(bounds[:-1], bounds[1:], own, strict=True) if hi > lo]


def own_control(base: Entry, cur: Entry) -> str | None:
    """The probe both sides timed beside every pass's rounds (bench.measure.control): a cold case's memory probe
    first, else the GEMM probe; None without one."""
    for local in ("control_read", "control_flops") if base.record.timing_mode == "cold" else ("control_flops",):
        if all(positive(g) for e in (base, cur) for _, _, g in segments(e, local)):
            return local
    return None


def positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def controlled(raw: CaseVerdict, in_gemm: CaseVerdict, rule: Rule, local: str | None = None) -> CaseVerdict:
    """A timing verdict must hold in seconds AND against the in-run control (in_gemm: the same case's verdict in
    units of it; local: the probe that was the control, else the run's GEMM); memory and statuses are kept."""
    if raw.verdict not in ("regressed", "improved") or in_gemm.verdict == raw.verdict:
        return raw
    mem = raw.mem_ratio
    if raw.verdict == "regressed" and mem is not None and mem > 1 + rule.threshold:
        return raw  # a memory regression needs no control
    moved = in_gemm.ratio if in_gemm.ratio is not None else float("nan")
    units = "units of its own memory probe" if local == "control_read" else "GEMM units"
    reason = (f"{raw.reason}, but not against the in-run control (x{moved:.2f} in {units} of each run: "
              "the machine's speed moved, not the code)")
    return CaseVerdict(raw.case_id, "noisy", False, reason, raw.base_status, raw.cur_status, raw.base_value,
                       raw.cur_value, raw.ratio, raw.p_value, raw.mem_ratio)


def in_spell(cases: dict[str, Entry]) -> dict[str, float]:
    """{case id: its probe's share of the run's usual speed} for the cases timed in a slow spell."""
    # a pooled entry's passes each have their own probe: not judged here
    return spell_shares({cid: e.record.control_flops for cid, e in cases.items() if len(e.pass_rounds) < 2})


def spell_checked(v: CaseVerdict, spells: dict[str, dict[str, float]], rule: Rule) -> CaseVerdict:
    """A timing verdict on a case timed in a slow spell of either run is noisy, as a throttled GPU's is; a memory
    regression needs no timing and stands (as in controlled)."""
    if v.verdict not in ("regressed", "improved"):
        return v
    hit = [f"the {name} run (its probe at {spell[v.case_id]:.2f} of the run's usual speed)"
           for name, spell in spells.items() if v.case_id in spell]
    mem = v.mem_ratio
    if not hit or (v.verdict == "regressed" and mem is not None and mem > 1 + rule.threshold):
        return v
    reason = f"{v.reason}, but it was timed in a slow spell of the host in {' and '.join(hit)}: run it again"
    return dataclasses.replace(v, verdict="noisy", failing=False, reason=reason)
