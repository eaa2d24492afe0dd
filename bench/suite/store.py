"""The results document of a run in progress, written atomically after every case so an interrupted run loses
nothing; with no path (pytest without --attn-out) it lives in memory for pytest-benchmark's own JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.results import RunDocument, RunMeta, read_run, write_atomic


class ResultsStore:
    def __init__(self, path: Path | None, doc: RunDocument) -> None:
        self.path = path
        self.doc = doc
        self.save()

    @classmethod
    def new(cls, path: Path | None, meta: RunMeta, machine_info: dict, commit_info: dict, version: str,
            started: str) -> ResultsStore:
        return cls(path, RunDocument(meta=meta, machine_info=machine_info, commit_info=commit_info,
                                     datetime=started, version=version))

    @classmethod
    def resume(cls, path: Path) -> ResultsStore:
        doc = read_run(path)
        doc.meta.complete = False
        return cls(path, doc)

    def add(self, entry: dict[str, Any]) -> None:
        self.doc.add(entry)
        self.save()

    def finish(self, complete: bool) -> None:
        self.doc.meta.complete = complete
        self.save()

    def save(self) -> None:
        if self.path is not None:
            write_atomic(self.path, self.doc)
