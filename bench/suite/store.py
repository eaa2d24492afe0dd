"""The results file of a run, rewritten atomically after every case so an interrupted run loses nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.results import SCHEMA, entries, read_run, write_atomic


class ResultsStore:
    def __init__(self, path: Path, meta: dict[str, Any], machine_info: dict, commit_info: dict, version: str,
                 started: str, resume: bool = False) -> None:
        self.path = path
        if resume:
            self.doc = read_run(path)
            self.doc["attnbench"]["complete"] = False
        else:
            self.doc = {"machine_info": machine_info, "commit_info": commit_info, "benchmarks": [],
                        "datetime": started, "version": version,
                        "attnbench": {"schema": SCHEMA, "complete": False, **meta, "untimed": []}}
        self.save()

    @property
    def done(self) -> set[str]:
        return {e["extra_info"]["case_id"] for e in entries(self.doc)}

    def add(self, entry: dict[str, Any]) -> None:
        timed = entry.get("stats") is not None
        (self.doc["benchmarks"] if timed else self.doc["attnbench"]["untimed"]).append(entry)
        self.save()

    def finish(self, complete: bool) -> None:
        self.doc["attnbench"]["complete"] = complete
        self.save()

    def save(self) -> None:
        write_atomic(self.path, self.doc)
