"""The journal of a run in progress: an append-only file beside the results file, so that recording a case
costs the same at case 10 and at case 10,000, and a crash at any moment loses no finished case.

The journal `<out>.journal` holds one JSON object per line, each written whole, flushed and fsync'd:
  {"run": {...}}    first line: the results document without its cases (machine, commit, run metadata)
  {"case": {...}}   one line per finished case: its entry, exactly as it goes into the results file
  {"end": {...}}    when the run stops: the final run metadata and machine info (complete or not)
The results file itself (pytest-benchmark's JSON, see bench.results) is written from the journal, atomically,
when the run starts (no cases yet), when it ends and when it is interrupted; once the run is complete the
journal is deleted. Readers (bench.results.read_run) prefer a journal when one is present: after a crash the
journal holds every finished case, the results file only those of the last clean stop.

A crash while a line is being written leaves that last line cut short: reading tolerates it and says so
(`RunDocument.notes`), and resuming cuts it off before appending. Any other bad line is a corrupt journal.
With no path (pytest without --attn-out) the document lives in memory only, for pytest-benchmark's own JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.results.document import ResultsError, RunDocument, RunMeta, json_safe, validate, validate_entry
from bench.results.entry import Entry

JOURNAL_SUFFIX = ".journal"


def journal_path(results: str | Path) -> Path:
    results = Path(results)
    return results.with_name(results.name + JOURNAL_SUFFIX)


def line(obj: dict) -> bytes:
    return (json.dumps(json_safe(obj), allow_nan=False, separators=(",", ":")) + "\n").encode()


def header(doc: RunDocument) -> dict:
    data = doc.to_dict()
    data["benchmarks"] = []
    data["attnbench"] = {**data["attnbench"], "untimed": []}
    return data


def read_journal(path: str | Path) -> tuple[RunDocument, int]:
    """The document a journal holds, and the byte length of its intact part (shorter when its last line was cut
    short by a crash, which `doc.notes` then names). Raises ResultsError for anything else that is wrong."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ResultsError(f"{path}: cannot read ({err.strerror})") from None
    lines = data.split(b"\n")
    good = 0
    doc: RunDocument | None = None
    notes: list[str] = []
    for i, raw in enumerate(lines):
        last = i == len(lines) - 1
        if last and not raw:
            break  # the file ends with a newline: nothing after it
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict) or len(obj) != 1:
                raise ValueError
        except ValueError:
            if last or (i == len(lines) - 2 and not lines[-1]):
                notes.append(f"{path}: its last line (line {i + 1}) was cut short by a crash; ignored")
                break
            raise ResultsError(f"{path}: line {i + 1} is not a journal line; corrupt?") from None
        kind, value = next(iter(obj.items()))
        if doc is None:
            if kind != "run":
                raise ResultsError(f"{path}: not a results journal (no 'run' line first)")
            validate(value, str(path))
            doc = RunDocument.from_dict(value, owned=True)
        elif kind == "case":
            validate_entry(value, f"{path}: line {i + 1}")
            doc.add(Entry.from_dict(value))
        elif kind == "end":
            doc.meta = RunMeta.from_dict(value["attnbench"])
            doc.machine_info = value["machine_info"]
        else:
            raise ResultsError(f"{path}: line {i + 1} has an unknown kind {kind!r}")
        good += len(raw) + (0 if last else 1)
    if doc is None:
        raise ResultsError(f"{path}: empty journal (the run stopped before it started)")
    doc.notes = notes
    return doc, good
