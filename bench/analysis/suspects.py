"""Timings that look stalled: a case whose time did not grow with its work, or that jumps against its neighbour.

On a machine where other work takes a core from one of torch's threads, every call of a short kernel can wait a
scheduler slice for it: the case then reads a flat few milliseconds whatever its work, and its rounds all stall
alike, so its own interval is tight and wrong. Within a line of dense cases (one backend and every shape field but the
lengths), ordered by work (FLOPs), a case is suspect when
- flat: the next case has at least MIN_WORK_STEP times its work and takes less than FLAT times its time, while its
  own time is over FLAT_FLOOR_S (below that, fixed per-call costs legitimately set the time), or
- a jump: its work per second is under 1/JUMP of the previous case's (a cache that spills costs a few times, not
  more).
A CPU case is a suspect of a second kind, a spell, when the probe timed between its rounds (control_flops) ran under
bench.measure.control.SPELL_SHARE of the run's usual probe speed: a slow spell of the host, which slowed such cases
1.26-1.29x (median) against the same case in other runs of the same code.
Once the claims' least sets have run, a run re-measures each suspect once in a fresh worker (bench.engine.decide:
RunMeta.suspects, each {"case_id", "reason", "kind", "first_s", "again_s", "again_low_s", "again_high_s",
"again_share"}); the report takes the second measurement (and flags the case noisy, and names it) where a stalled
one is faster by more than STALLED (a stall only ever adds time), or a spell's is faster and its own probe ran at the
usual speed (again_share, its probe's share of the first run's usual).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from bench.analysis.frames import SHAPE_KEYS, dense_rows, ok_rows
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE
from bench.measure.control import SPELL_SHARE, spell_shares

FLAT, FLAT_FLOOR_S, MIN_WORK_STEP = 1.15, 1e-3, 2.0
JUMP = 5.0
STALLED = 1.5  # a re-measurement this many times faster: the first was stalled
LINE_KEYS = ["backend", *(k for k in SHAPE_KEYS if k not in ("seq_q", "seq_kv"))]


def suspects(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The ok cases whose time looks stalled (the module docstring): [{"case_id", "reason"}], each case once."""
    ok = ok_rows(dense_rows(df))  # a sparse case's useful FLOPs need not grow with its lengths: not a line of work
    ok = ok[pd.to_numeric(ok["flops"], errors="coerce") > 0]
    found: dict[str, str] = {}
    keys = [k for k in LINE_KEYS if k in ok]
    for _, line in ok.groupby(keys, dropna=False, sort=False):
        line = line.sort_values("flops")
        rows = list(zip(line["case_id"], line["flops"].astype(float), line["median_s"].astype(float), strict=True))
        for (a, wa, ta), (b, wb, tb) in zip(rows, rows[1:], strict=False):
            if wb >= MIN_WORK_STEP * wa and tb < FLAT * ta and ta > FLAT_FLOOR_S:
                found.setdefault(a, f"{ta * 1e3:.2f} ms, flat against {tb * 1e3:.2f} ms for {wb / wa:.0f}× the work")
            elif (wb / tb) < (wa / ta) / JUMP:
                found.setdefault(b, f"{tb * 1e3:.2f} ms, {(wa / ta) / (wb / tb):.0f}× less work per second than "
                                    "its shorter neighbour")
    return [{"case_id": c, "reason": r} for c, r in found.items()]


def _spell_shares(df: pd.DataFrame) -> dict[str, float]:
    """{case: its probe's share of the usual speed} for the ok cases timed in a slow spell ({} without probes)."""
    if "control_flops" not in df:
        return {}
    ok = ok_rows(df)
    return spell_shares(dict(zip(ok["case_id"], pd.to_numeric(ok["control_flops"], errors="coerce"), strict=True)))


def spells(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The ok cases timed in a slow spell of the host (the module docstring), the slowest probe first:
    [{"case_id", "reason", "kind": "spell"}] (bench.engine.decide re-orders them by what they move and cost)."""
    shares = _spell_shares(df)
    return [{"case_id": c, "kind": "spell", "reason": f"timed in a slow spell of the host (its probe at {share:.2f} of "
                                                     "the run's usual speed)"}
            for c, share in sorted(shares.items(), key=lambda item: item[1])]


def turning(conditions: Iterable[Any], df: pd.DataFrame) -> frozenset[str]:
    """The cases timed in a slow spell behind a condition whose word would turn were each such case's time scaled
    by its probe's share of the usual speed (time x share: the spell taken out as it slowed the probe): those whose
    re-measurement could change an answer, which bench.engine.remeasure takes first. A guess that orders the
    re-measures, never a time the report uses. Over 53 saved default runs (18 triples of one commit each, a 2-core
    AMD EPYC), 85 conditions turned so; of the 79 whose triple's two other runs agreed, the scaled word was theirs in
    62 and the first word in 14, and re-measuring the quickest first had left a case of 19 of the 85 unmeasured.
    conditions: the claims' (bench.analysis.conditions.Condition: pairs, ratio, interval, judged); one open for a
    stated reason (a cache on-chip) is left out, as a time cannot decide it."""
    shares = _spell_shares(df)
    if not shares:
        return frozenset()
    ok = ok_rows(df)
    times = dict(zip(ok["case_id"], pd.to_numeric(ok["median_s"], errors="coerce"), strict=True))
    found: set[str] = set()
    for c in conditions:
        spelled = {case for pair in c.pairs for case in pair if case in shares}
        pairs = [(times[t], times[b], shares.get(t, 1.0), shares.get(b, 1.0)) for t, b in c.pairs
                 if times.get(t, 0) > 0 and times.get(b, 0) > 0]
        if not spelled or not pairs or c.verdict not in (HOLDS, FAILS, INCONCLUSIVE) or \
                (c.why and c.verdict == INCONCLUSIVE):
            continue
        factor = (statistics.median(t * st / (b * sb) for t, b, st, sb in pairs)
                  / statistics.median(t / b for t, b, _, _ in pairs))
        if c.judged(c.ratio * factor, c.low * factor, c.high * factor).verdict != c.verdict:
            found |= spelled
    return frozenset(found)


def usual_probe(df: pd.DataFrame) -> float | None:
    """The run's usual probe speed: the median of its cases' control_flops (None without any)."""
    if "control_flops" not in df:
        return None
    speeds = pd.to_numeric(ok_rows(df)["control_flops"], errors="coerce").dropna()
    return float(speeds.median()) if len(speeds) else None


def again_by_case(remeasured: Sequence[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The re-measurements the report takes (the module docstring), by case id."""
    out = {}
    for r in remeasured or ():
        first, again = r.get("first_s"), r.get("again_s")
        if not (isinstance(first, (int, float)) and isinstance(again, (int, float)) and again > 0):
            continue
        if r.get("kind") == "spell":
            share = r.get("again_share")
            if isinstance(share, (int, float)) and share >= SPELL_SHARE and again < first:
                out[str(r.get("case_id"))] = r
        elif again * STALLED < first:
            out[str(r.get("case_id"))] = r
    return out


def note(remeasured: Sequence[dict[str, Any]] | None) -> str:
    """One paragraph on the run's suspect timings: which were stalled (and taken from their re-measurement) and
    which measured the same again (kept: a real effect of the machine, or of the kernel)."""
    if not remeasured:
        return ""
    taken = again_by_case(remeasured)
    stalled = {c: r for c, r in taken.items() if r.get("kind") != "spell"}
    spelled = {c: r for c, r in taken.items() if r.get("kind") == "spell"}
    same = [r for r in remeasured if str(r.get("case_id")) not in taken]
    parts = []
    if stalled:
        parts.append(f"{len(stalled)} timing(s) looked stalled and measured faster again in a fresh worker, so the "
                     "report uses the second measurement: " + "; ".join(
                         f"{c} ({r.get('reason')}; again {r['again_s'] * 1e3:.2f} ms)" for c, r in stalled.items()))
    if spelled:
        parts.append(f"{len(spelled)} timing(s) ran in a slow spell of the host and measured faster once it ran at "
                     "its usual speed again, so the report uses the second measurement: " + "; ".join(
                         f"{c} ({r['first_s'] * 1e3:.2f} → {r['again_s'] * 1e3:.2f} ms)" for c, r in spelled.items()))
    if same:
        parts.append(f"{len(same)} suspect timing(s) measured alike again and are kept: " + "; ".join(
            f"{r.get('case_id')} ({r.get('reason')})" for r in same))
    return ". ".join(parts) + "."
