"""The few lines `bench run` ends with: statuses, the best backend per shape family, the claims' verdicts, and
where the results and the report are; and, with --tables, a table of every case. Part of the report (it reads the
results as the report does): the command calls it once the run is over, so the engine never loads the report."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.analysis.claim_rows import claim_rows
from bench.analysis.load import read_results
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE
from bench.claims import BY_KEY, verdicts
from bench.report.tables import best_backends
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
    lines.append("claims (conditions holding / judged, and those holding only at their bound):")
    lines += claim_lines(claim_rows(verdicts(frame, info.meta), info.run_id))  # the rows claims.csv holds

    lines.append(f"results: {results}")
    if report is not None:
        lines.append(f"report:  {report}")
    return lines


def claim_lines(rows: list[dict]) -> list[str]:
    """One line per claim from claims.csv's rows: its word, how many of its judged conditions hold (those holding
    only at their bound apart: they sway a claim only where no other condition decides it), its text and the range
    it was judged on."""
    found = []
    for key in dict.fromkeys(r["claim"] for r in rows):
        mine = [r for r in rows if r["claim"] == key]
        judged = [r for r in mine if r.get("word") in (HOLDS, FAILS, INCONCLUSIVE)]
        at = sum(r["word"] == HOLDS and r.get("at_bound") is True for r in judged)
        count = (f"{sum(r['word'] == HOLDS for r in judged) - at}/{len(judged)}" + (f" +{at} at bound" if at else "")
                 if judged else "–")
        on = f"  [{mine[0]['judged_on']}]" if mine[0]["judged_on"] else ""
        found.append((mine[0]["claim_verdict"], count, f"{BY_KEY[key].text}{on}"))
    width = max((len(count) for _, count, _ in found), default=5)
    return [f"  {word:<13}  {count:>{width}}  {text}" for word, count, text in found]


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
