"""The few lines `bench run` ends with: statuses, the best backend per shape family, the claims' verdicts, and
where the results and the report are; and, with --tables, a table of every case. Part of the report (it reads the
results as the report does): the command calls it once the run is over, so the engine never loads the report."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.report.claims import best_backends, verdicts
from bench.report.load import read_results
from bench.results import read_run
from bench.results.entry import group_of
from bench.results.record import Record
from bench.results.status import STATUSES


def summary_lines(results: Path, report: Path | None = None) -> list[str]:
    frame, info = read_results(results)
    counts = Counter(frame["status"])
    lines = ["", f"== {info.n_cases} cases: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
             + ("" if info.complete else " (incomplete)")]
    best = best_backends(frame)
    if best:
        lines.append("best backend per shape family (shapes won):")
        width = max(len(b["family"]) for b in best)
        for b in best:
            vs = f", {b['speedup_vs_naive']:.1f}x naive" if b.get("speedup_vs_naive") else ""
            lines.append(f"  {b['family']:<{width}}  {b['best']} ({b['wins']}/{b['shapes']}{vs})")
    lines.append("claims:")
    for v in verdicts(frame, info.meta):  # the run's own facts (its KV measurements, its traces), as the report reads
        on = f"  [{v.judged_on}]" if v.judged_on else ""
        lines.append(f"  {v.verdict:<13}  {v.claim}{on}")
    lines.append(f"results: {results}")
    if report is not None:
        lines.append(f"report:  {report}")
    return lines


def table_lines(results: Path) -> list[str]:
    """Every case, grouped as pytest-benchmark groups them (cases differing only in backend side by side): median,
    IQR and rounds of the timed ones, the status of the others."""
    by_group: dict[str, list[Record]] = {}
    for entry in read_run(results).entries():
        by_group.setdefault(group_of(entry.record), []).append(entry.record)
    lines = []
    for group, recs in sorted(by_group.items()):
        lines.append(f"-- {group}")
        width = max(len(r.case_id) for r in recs)
        for r in sorted(recs, key=lambda r: (r.median_s is None, r.median_s or 0)):
            if r.status == "ok" and r.median_s is not None:
                iqr = f"{r.iqr_s * 1e3:9.4f}" if r.iqr_s is not None else f"{'-':>9}"
                lines.append(f"  {r.case_id:<{width}}  {r.median_s * 1e3:10.4f} ms  IQR {iqr} ms  {r.rounds:4d} rounds")
            else:
                lines.append(f"  {r.case_id:<{width}}  {r.status}: {r.reason[:80]}")
    return lines
