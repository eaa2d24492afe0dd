"""Performance across commits: results files grouped by the commit they measured, ordered by commit date, each
case's median per commit, and the change points between consecutive commits judged by bench.regress.compare (the same
noise model, threshold and tests as `bench compare`). Pure analysis and markdown; figures/history.py draws it.

A file's commit is its commit_info (pytest-benchmark's: id, time = committer date) or, when that is not a git
commit (the run was started outside the checkout), the commit attnbench itself was loaded from
(machine_info.attnbench.git_commit), dated by `git log` in the current checkout. Several files of one commit are
pooled as passes (bench.results.merge). Consecutive commits measured on different machines are compared in
GEMM units (--normalize); on one machine with the in-run control, as `bench compare` does by default.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench.errors import InputError
from bench.measure.environment import fingerprint_diff
from bench.problem.case import FAMILY_FIELDS, family_label
from bench.regress.compare import CompareError, Rule, compare_runs
from bench.results import RunDocument, read_run
from bench.results.merge import merge_passes
from bench.results.record import Record

SHA = re.compile(r"^[0-9a-f]{7,40}$")


class HistoryError(InputError):
    """Results that cannot make a history (no files, no commit recorded): exit 2."""


@dataclass(frozen=True)
class Point:
    """One commit: its runs pooled, and when it was committed."""

    commit: str
    date: datetime
    dirty: bool
    files: tuple[str, ...]
    doc: RunDocument

    @property
    def label(self) -> str:
        return self.commit[:8] + ("+" if self.dirty else "")


@dataclass(frozen=True)
class Change:
    """A case that moved between two consecutive commits, by bench.regress.compare's verdict."""

    case_id: str
    family: str
    commit: str  # where the change happened
    previous: str
    verdict: str  # regressed | improved
    ratio: float | None
    reason: str


@dataclass(frozen=True)
class History:
    points: tuple[Point, ...]
    medians: dict[str, list[float | None]]  # case id -> median seconds per point (None: not timed there)
    families: dict[str, str]  # case id -> shape family
    backends: dict[str, str]  # case id -> backend
    sizes: dict[str, str]  # case id -> its sizes (batch, heads, lengths, head dim), for a legend
    changes: tuple[Change, ...]
    notes: tuple[str, ...]


def family(record: Record) -> str:
    """The report's family label (bench.problem.case.family_label), plus scope and model when set: one figure's
    cases."""
    row = record.to_dict()  # the family's columns, as the report reads them
    text = family_label(*(str(row[k]) for k in FAMILY_FIELDS))
    extra = [str(row[k]) for k in ("scope", "model") if row[k] not in (None, "attention")]
    return " · ".join([text, *extra])


def sizes_label(record: Record) -> str:
    """What a family's cases differ in, read from the record's shape: B, Hq, Hkv, the lengths and D."""
    s = record.shape
    if s is None:
        return "?"
    seq = f"S={s.seq_kv}" if record.phase == "prefill" else f"Sq={s.seq_q} KV={s.seq_kv}"
    return f"B={s.batch} Hq={s.n_heads} Hkv={s.n_kv_heads} {seq} D={s.head_dim}"


def _git_date(commit: str) -> datetime | None:
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%cI", commit], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return datetime.fromisoformat(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def commit_of(doc: RunDocument, path: str) -> tuple[str, datetime, bool]:
    """(commit id, commit date, dirty) of a results file, or HistoryError naming the file."""
    info = doc.commit_info or {}
    cid = str(info.get("id") or "")
    date = info.get("time")
    if not SHA.match(cid):
        cid, date = str(doc.environment.get("git_commit") or ""), None
    if not SHA.match(cid):
        raise HistoryError(f"{path}: no commit recorded (commit_info.id or machine_info.attnbench.git_commit); "
                           "history needs runs made in a git checkout")
    try:
        when = datetime.fromisoformat(str(date)) if date else _git_date(cid)
    except ValueError:
        when = _git_date(cid)
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)  # dates without an offset are taken as UTC, so all compare
    if when is None:
        raise HistoryError(f"{path}: commit {cid[:12]} has no date in the file and git does not know it here; run "
                           "history in the repository that has that commit")
    return cid, when, bool(info.get("dirty"))


def collect(paths: list[str]) -> list[Path]:
    """The results files named, folders searched for *.json (their baselines/ skipped)."""
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.json") if "baselines" not in p.relative_to(path).parts[:-1])
        else:
            files.append(path)  # read_run names a missing file
    if not files:
        raise HistoryError(f"no results files in {', '.join(paths) or 'the arguments'}")
    return files


def _points(files: list[Path], notes: list[str]) -> list[Point]:
    by_commit: dict[str, list[tuple[str, RunDocument, datetime, bool]]] = {}
    for path in files:
        doc = read_run(path)
        cid, when, dirty = commit_of(doc, str(path))
        by_commit.setdefault(cid, []).append((str(path), doc, when, dirty))
    points = []
    for cid, runs in by_commit.items():
        labels, docs = [r[0] for r in runs], [r[1] for r in runs]
        try:
            doc = merge_passes(docs, labels) if len(docs) > 1 else docs[0]
        except InputError as err:  # runs of another machine or incomplete: the first one stands for the commit
            notes.append(f"commit {cid[:8]}: only {labels[0]} used ({err})")
            doc = docs[0]
        points.append(Point(cid, runs[0][2], any(r[3] for r in runs), tuple(labels), doc))
    return sorted(points, key=lambda p: (p.date, p.commit))


def _judge(prev: Point, cur: Point, rule: Rule, wanted: set[str], fam: dict[str, str],
           notes: list[str]) -> list[Change]:
    other_machine = bool(fingerprint_diff(prev.doc.fingerprint, cur.doc.fingerprint))
    try:
        cmp = compare_runs(prev.doc, cur.doc, rule, normalize=other_machine)
    except CompareError as err:
        notes.append(f"{prev.label} -> {cur.label}: not judged ({err})")
        return []
    return [Change(v.case_id, fam.get(v.case_id, "?"), cur.commit, prev.commit, v.verdict, v.ratio, v.reason)
            for v in cmp.cases if v.verdict in ("regressed", "improved") and v.case_id in wanted]


def build_history(paths: list[str], case: str | None = None, rule: Rule | None = None) -> History:
    """Everything `bench history` shows, from results files or folders; `case` filters case ids (glob or part)."""
    rule = rule or Rule()
    notes: list[str] = []
    points = _points(collect(paths), notes)
    records = {i: {e.case_id: e.record for e in p.doc.entries()} for i, p in enumerate(points)}
    ids = sorted({cid for recs in records.values() for cid in recs})
    if case:
        ids = [cid for cid in ids if fnmatch.fnmatchcase(cid, case) or case in cid]
        if not ids:
            raise HistoryError(f"--case {case!r} matches no case of the {len(points)} commits")
    medians = {cid: [_median(records[i].get(cid)) for i in range(len(points))] for cid in ids}
    first = {cid: next(records[i][cid] for i in range(len(points)) if cid in records[i]) for cid in ids}
    fam = {cid: family(rec) for cid, rec in first.items()}
    pairs = zip(points, points[1:], strict=False)
    changes = [c for prev, cur in pairs for c in _judge(prev, cur, rule, set(ids), fam, notes)]
    return History(tuple(points), medians, fam, {cid: r.backend for cid, r in first.items()},
                   {cid: sizes_label(r) for cid, r in first.items()}, tuple(changes), tuple(notes))


def _median(record: Record | None) -> float | None:
    if record is None or record.status != "ok":
        return None
    value = record.median_s
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def markdown(history: History, figures: dict[str, str]) -> str:
    """The summary: the commits in order, every change point naming its commit, and the figures per family."""
    pts = history.points
    lines = ["# attnbench history", "",
             f"{len(pts)} commits, {len(history.medians)} cases; a change is a case that `bench compare` judges "
             "regressed or improved between two consecutive commits (threshold, significance and the run-to-run "
             "noise model of the compare rule).", "",
             "| # | commit | date | files | cases timed |", "|---|---|---|---|---|"]
    for i, p in enumerate(pts, 1):
        timed = sum(1 for m in history.medians.values() if m[i - 1] is not None)
        lines.append(f"| {i} | `{p.label}` | {p.date:%Y-%m-%d %H:%M} | {len(p.files)} | {timed} |")
    lines += ["", "## Change points", ""]
    if history.changes:
        lines += ["| commit | previous | verdict | time | case | note |", "|---|---|---|---|---|---|"]
        for c in history.changes:
            ratio = f"x{c.ratio:.2f}" if c.ratio else "-"
            lines.append(f"| `{c.commit[:8]}` | `{c.previous[:8]}` | {c.verdict} | {ratio} | `{c.case_id}` | "
                         f"{c.reason.replace('|', '/')} |")
    else:
        lines.append("No case changed between consecutive commits." if len(pts) > 1 else
                     "One commit only: nothing to judge yet.")
    lines += [f"- note: {n}" for n in history.notes]
    if figures:
        lines += ["", "## Median time per call, by shape family", ""]
        lines += [f"![{name}]({path})" for name, path in figures.items()]
    return "\n".join(lines) + "\n"
