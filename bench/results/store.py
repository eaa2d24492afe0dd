"""The store a run records into: its document in memory, each finished case appended to the journal
(bench.results.journal) as it comes, and the results file (bench.results.file) written from it at the start and at
the end. With no path (pytest without --attn-out) the document lives in memory only, for pytest-benchmark's JSON."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.results.document import RunDocument, RunMeta
from bench.results.entry import Entry
from bench.results.file import read_run, write_atomic
from bench.results.journal import header, journal_path, line, read_journal


class ResultsStore:
    def __init__(self, path: Path | None, doc: RunDocument) -> None:
        self.path = path
        self.doc = doc
        self._journal: Any = None

    @classmethod
    def new(cls, path: Path | None, meta: RunMeta, machine_info: dict, commit_info: dict, version: str,
            started: str) -> ResultsStore:
        store = cls(path, RunDocument(meta=meta, machine_info=machine_info, commit_info=commit_info,
                                      datetime=started, version=version))
        if path is not None:
            write_atomic(path, store.doc)  # first: a results file exists from the start (incomplete)
            store._start_journal([])
        return store

    @classmethod
    def resume(cls, path: Path) -> ResultsStore:
        """Continue the journal when there is one (cutting off a torn last line), else start one from the file."""
        journal = journal_path(path)
        if journal.exists():
            doc, intact = read_journal(journal)
            store = cls(path, doc)
            with open(journal, "r+b") as f:
                f.truncate(intact)
                if intact:  # a whole last line whose newline the crash cut off: end it before appending
                    f.seek(intact - 1)
                    if f.read(1) != b"\n":
                        f.write(b"\n")
            store._journal = open(journal, "ab")  # noqa: SIM115  (open for the run's whole length)
        else:
            doc = read_run(path)
            store = cls(path, doc)
            store._start_journal(doc.entries())
        doc.meta.complete = False
        return store

    def _start_journal(self, entries: list[Entry]) -> None:
        """Header (and any cases already done) to a temporary file, renamed into place: all or nothing."""
        journal = journal_path(self.path)
        tmp = journal.with_name(f".{journal.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(line({"run": header(self.doc)}))
            for entry in entries:
                f.write(line({"case": entry.to_dict()}))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, journal)
        self._journal = open(journal, "ab")  # noqa: SIM115

    def _append(self, obj: dict) -> None:
        if self._journal is not None:
            self._journal.write(line(obj))  # one write per line: a crash tears at most the last one
            self._journal.flush()
            os.fsync(self._journal.fileno())

    def add(self, entry: Entry) -> None:
        self.doc.add(entry)
        self._append({"case": entry.to_dict()})

    def finish(self, complete: bool) -> None:
        """Write the results file from the journal's content; a complete run needs its journal no more."""
        self.doc.meta.complete = complete
        if self.path is None:
            return
        self._append({"end": {"attnbench": self.doc.meta.to_dict(), "machine_info": self.doc.machine_info}})
        write_atomic(self.path, self.doc)
        self._journal.close()
        self._journal = None
        if complete:
            journal_path(self.path).unlink(missing_ok=True)
