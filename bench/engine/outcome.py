"""What running one case gives back, wherever it ran (the Runner here, or a worker): its record and samples."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.results.record import Record


@dataclass
class Outcome:
    """A case's record and its timed samples (seconds)."""

    record: Record
    samples: list[float] = field(default_factory=list)
