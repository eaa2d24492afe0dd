"""The verdicts as data: one row per claim and condition, the rows of a report's claims.csv and of `bench run`'s
closing summary.

A row is a claim (its key, its word, the range it was judged on, its timings flagged noisy) and one of its
conditions: the condition's key fields (one column per field: backend, dtype, variant, group_size, seq_kv ...; empty
where a claim's conditions have no such field), its ratio in its unit, its 95% interval (low, high), its bound
(where it holds; `holds`: ≥, ≤ or within its band of it) and fail_bound (where it fails: the bound itself for a
claim with one threshold), its word, whether it is at its bound, its basis (each case's CI, interleaved blocks,
counted) and the blocks run on it, why it is open where it is, and its facts (S*, the kernel it was set against
...). A claim with no condition (not measured) is one row with its claim's columns alone. Only the latest
measurement of a condition is a row: one the run re-measured in blocks is judged on them (bench.analysis.decided).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bench.analysis.conditions import Condition
from bench.analysis.verdict import Verdict

CLAIM_COLUMNS = ["run_id", "claim", "claim_verdict", "judged_on", "noisy_timings", "timings"]
JUDGED_COLUMNS = ["ratio", "unit", "low", "high", "bound", "fail_bound", "holds", "word", "at_bound", "basis",
                  "blocks", "why"]


def _holds(c: Condition) -> str:
    return "within" if c.within else "≥" if c.holds_above else "≤"


def claim_rows(verdicts: Iterable[Verdict], run_id: str = "") -> list[dict[str, Any]]:
    """One dict per claim and condition (the module docstring), in report order."""
    rows = []
    for v in verdicts:
        claim = {"run_id": run_id, "claim": v.key, "claim_verdict": v.verdict, "judged_on": v.judged_on,
                 "noisy_timings": v.noisy[0], "timings": v.noisy[1]}
        if not v.conditions:
            rows.append(claim)
        for c in v.conditions:
            judged = {"ratio": c.ratio, "unit": c.unit, "low": c.low, "high": c.high, "bound": c.bound,
                      "fail_bound": c.fail_bound, "holds": _holds(c), "word": c.verdict, "at_bound": c.at_bound,
                      "basis": c.basis, "blocks": c.blocks, "why": c.why}
            rows.append({**claim, **dict(c.key), **judged, **{k: v for k, v in c.facts if k not in judged}})
    return rows


def columns(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The rows' columns in order: the claim's, the key fields (first seen first), the judgment's, the facts'."""
    rows = list(rows)
    seen = list(dict.fromkeys(k for r in rows for k in r))
    fixed = set(CLAIM_COLUMNS) | set(JUDGED_COLUMNS)
    first_judged = {k for r in rows for k in r if k not in fixed and list(r).index(k) < _judged_at(r)}
    keys = [k for k in seen if k in first_judged]
    facts = [k for k in seen if k not in fixed and k not in first_judged]
    return [*CLAIM_COLUMNS, *keys, *JUDGED_COLUMNS, *facts]


def _judged_at(row: dict[str, Any]) -> int:
    names = list(row)
    return names.index("ratio") if "ratio" in names else len(names)
