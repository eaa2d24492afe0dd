"""A workload, read, scheduled and bucketed once: what a run plans from and what its results file keeps.

`replay(name, knobs)` reads the trace (bench.traces.requests, or flashinfer-trace steps), schedules it
(bench.traces.schedule), buckets its steps (bench.traces.buckets) and samples real steps to check the buckets in
time (bench.traces.sample) in one streaming pass; the result is plain data (`to_dict`), stored in the run's
`workloads` section, so the report weighs each bucket's measured time by its steps, and sets the sampled steps'
times against their buckets', without the trace file.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.traces.buckets import MAX_BUCKETS, Bucket, Sums, add_step, bucketing_error, buckets_of, merge
from bench.traces.flashinfer import read_steps
from bench.traces.requests import Request, file_format, read_requests, source_path
from bench.traces.sample import CHECK_STEPS, KINDS, Checked, Sampler, checked
from bench.traces.schedule import Knobs, Step, schedule

# distinct step shapes are counted exactly up to here (~3 MiB of hashes; a 100,000-request trace has ~840,000 steps)
DISTINCT_CAP = 50_000


@dataclass
class Tally:
    """What the requests were: counts, token totals and log2 histograms of their lengths (bin i: [2^i, 2^(i+1)))."""

    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    prompt_hist: dict[int, int] | None = None
    output_hist: dict[int, int] | None = None

    def count(self, requests: Iterator[Request]) -> Iterator[Request]:
        self.prompt_hist, self.output_hist = {}, {}
        for r in requests:
            self.requests += 1
            self.prompt_tokens += r.prompt
            self.output_tokens += r.output
            self.duration_s = r.arrival_s
            for hist, n in ((self.prompt_hist, r.prompt), (self.output_hist, r.output)):
                b = int(math.log2(n))
                hist[b] = hist.get(b, 0) + 1
            yield r


@dataclass(frozen=True)
class Replay:
    name: str
    source: str  # azure, csv, jsonl or flashinfer
    knobs: Knobs
    tally: Tally
    steps: int
    mixed_steps: int  # steps with prefill and decode rows
    shapes: int  # distinct step shapes (prefill rows and decode sums), counted up to DISTINCT_CAP
    buckets: tuple[Bucket, ...]
    error: dict[str, float]
    kinds: dict[str, int]  # steps of each kind (bench.traces.sample.KINDS)
    checks: tuple[Checked, ...]  # the sampled steps, timed exactly

    def summary(self) -> str:
        """One line for --plan: what the trace asks for, the schedule, and what bucketing makes of it."""
        t, phases = self.tally, [b.phase for b in self.buckets]
        asked = (f"{t.requests:,} requests over {t.duration_s:,.0f} s ({t.prompt_tokens:,} prompt + "
                 f"{t.output_tokens:,} output tokens) -> " if t.requests else "")
        shapes = f"{self.shapes:,}" if self.shapes < DISTINCT_CAP else f"over {DISTINCT_CAP:,}"
        return (f"trace {self.name}: {asked}{self.steps:,} steps ({self.mixed_steps:,} mixed, {shapes} distinct "
                f"shapes, {sum(b.q_tokens for b in self.buckets):,} query tokens) -> {phases.count('prefill')} "
                f"prefill and {phases.count('decode')} decode buckets; bucketing error "
                f"{100 * self.error['packed']:+.1f}% packed, {100 * self.error['padded']:+.1f}% padded; "
                f"{len(self.checks)} real steps timed exactly to check them in time ("
                + ", ".join(f"{[c.kind for c in self.checks].count(k)} {k}" for k in KINDS) + ")")

    def to_dict(self) -> dict[str, Any]:
        t = self.tally
        return {"source": self.source, "knobs": asdict(self.knobs), "requests": t.requests,
                "prompt_tokens": t.prompt_tokens, "output_tokens": t.output_tokens, "duration_s": t.duration_s,
                "prompt_hist": {str(k): v for k, v in sorted((t.prompt_hist or {}).items())},
                "output_hist": {str(k): v for k, v in sorted((t.output_hist or {}).items())},
                "steps": self.steps, "mixed_steps": self.mixed_steps, "shapes": self.shapes, "error": self.error,
                "kinds": self.kinds, "checks": [c.to_dict() for c in self.checks],
                "buckets": [{"phase": b.phase, "lengths": b.lengths, "steps": b.steps, "rows": b.rows,
                             "q_tokens": b.q_tokens, "kv_tokens": b.kv_tokens, "packed": b.packed,
                             "padded": b.padded} for b in self.buckets]}


def replay(name: str, knobs: Knobs | None = None, max_buckets: int = MAX_BUCKETS,
           check_steps: int = CHECK_STEPS) -> Replay:
    """The workload `name` (a named one or a file) under `knobs`, with `check_steps` real steps sampled: cached per
    file version, so planning and the run's metadata read the trace once."""
    path = source_path(name)
    stat = path.stat()
    return _replay(name, str(path.resolve()), stat.st_mtime_ns, stat.st_size, knobs or Knobs(), max_buckets,
                   check_steps)


@functools.lru_cache(maxsize=8)
def _replay(name: str, path_text: str, _mtime: int, _size: int, knobs: Knobs, max_buckets: int,
            check_steps: int) -> Replay:
    path = Path(path_text)
    kind = file_format(path)
    tally = Tally()
    sampler = Sampler(check_steps)
    steps: Iterator[Step] = read_steps(path, sampler.wants) if kind == "flashinfer" else \
        schedule(tally.count(read_requests(path)), knobs, sampler.wants)
    found: Sums = {}
    seen: set[int] = set()  # hashes of the step shapes, up to DISTINCT_CAP of them: memory stays bounded
    n = mixed = 0
    for step in steps:
        n += 1
        mixed += bool(step.prefill and step.decode_rows)
        if len(seen) < DISTINCT_CAP:
            seen.add(hash(step))
        add_step(found, step)
        sampler.keep(step)
    buckets = merge(buckets_of(found), max_buckets)
    checks = tuple(checked(i, step, buckets) for i, step in sampler.drawn())
    return Replay(name, kind, knobs, tally, n, mixed, len(seen), tuple(buckets), bucketing_error(buckets),
                  dict(sampler.seen), checks)
