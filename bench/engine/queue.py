"""A case queue that worker processes share through two small files and an exclusive lock (fcntl.flock).

`<dir>/queue` lists the case ids, one per line; `<dir>/queue.next` holds two counters, the next case to hand out
and the cases finished. A worker asks for the next case when it is free, so a worker on slow cases simply takes
fewer of them: the load balances itself, where a fixed stride (`--shard`) would leave the fastest device idle.
Unix only (flock); every worker must see the folder on one machine's file system.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

QUEUE_ENV = "ATTNBENCH_QUEUE"  # set by the launcher: the queue folder a worker pulls its cases from
DEVICE_ENV = "ATTNBENCH_DEVICE_NAME"  # set by the launcher: the device the worker runs on, e.g. cuda:1


def worker_of_launcher(env: Mapping[str, str]) -> tuple[CaseQueue | None, str | None]:
    """(the queue, the device name) when this process is a `bench run --devices` worker, read from the environment
    the launcher set; (None, None) otherwise. The command line reads it once and hands it to the Session."""
    folder = env.get(QUEUE_ENV)
    return (CaseQueue(folder), env.get(DEVICE_ENV)) if folder else (None, None)


class CaseQueue:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.ids = (self.folder / "queue").read_text().split()

    @classmethod
    def create(cls, folder: str | Path, case_ids: list[str]) -> CaseQueue:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "queue").write_text("".join(f"{c}\n" for c in case_ids))
        (folder / "queue.next").write_text("0 0\n")
        return cls(folder)

    @contextmanager
    def _counters(self) -> Iterator[list[int]]:
        """The two counters under the lock; what the block leaves in the list is written back."""
        with open(self.folder / "queue.next", "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            counters = [int(x) for x in f.read().split()]
            before = list(counters)
            yield counters
            if counters != before:
                f.seek(0)
                f.write(f"{counters[0]} {counters[1]}\n")
                f.truncate()
                f.flush()
                os.fsync(f.fileno())

    def claim(self) -> str | None:
        """The next case no worker has taken yet, or None when the queue is empty."""
        with self._counters() as c:
            if c[0] >= len(self.ids):
                return None
            c[0] += 1
            return self.ids[c[0] - 1]

    def finished(self) -> int:
        """Count one more finished case (any worker); returns how many are finished."""
        with self._counters() as c:
            c[1] += 1
            return c[1]

    def counts(self) -> tuple[int, int]:
        """(handed out, finished)."""
        with self._counters() as c:
            return c[0], c[1]

    def __len__(self) -> int:
        return len(self.ids)
