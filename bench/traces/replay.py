"""A workload, read, scheduled and bucketed once: what a run plans from and what its results file keeps.

`replay(name, knobs)` reads the trace (bench.traces.requests, or flashinfer-trace steps), schedules it
(bench.traces.schedule), buckets its steps (bench.traces.buckets) and samples real steps to check the buckets in
time (bench.traces.sample) in one streaming pass; the result is plain data (`to_dict`), stored in the run's
`workloads` section, so the report weighs each bucket's measured time by its steps, and sets the sampled steps'
times against their buckets', without the trace file.

With a prefix cache (knobs.prefix_cache) on a trace with block hashes, the trace is also scheduled without it
(`without`: its steps and buckets, no sampled steps), and the two share one set of buckets whose batches are made
from both (bench.traces.buckets.shared_buckets), each schedule weighing them by its own steps: both are priced with
the same measured batches. The cache's hit rate and block hits are stated (bench.traces.cache). A cache on a trace
without block hashes cannot hit: it is said, and nothing is scheduled twice. Rows a reader skipped (BurstGPT's
failed requests) are counted.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.traces.buckets import MAX_BUCKETS, Bucket, Sums, add_step, bucketing_error, buckets_of, merge, shared_buckets
from bench.traces.cache import CacheStats
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
    with_blocks: int = 0  # requests that carry block hashes
    skipped: dict[str, int] = field(default_factory=dict)  # rows the reader skipped, by reason

    def count(self, requests: Iterator[Request]) -> Iterator[Request]:
        self.prompt_hist, self.output_hist = {}, {}
        for r in requests:
            self.requests += 1
            self.with_blocks += bool(r.blocks)
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
    source: str  # azure, csv, jsonl, flashinfer, mooncake, bailian or burstgpt
    knobs: Knobs
    tally: Tally
    steps: int
    mixed_steps: int  # steps with prefill and decode rows
    shapes: int  # distinct step shapes (prefill rows and decode sums), counted up to DISTINCT_CAP
    buckets: tuple[Bucket, ...]
    error: dict[str, float]
    kinds: dict[str, int]  # steps of each kind (bench.traces.sample.KINDS)
    checks: tuple[Checked, ...]  # the sampled steps, timed exactly
    cache: CacheStats | None = None  # what the prefix cache did (knobs.prefix_cache set)
    shared_steps: int = 0  # decode steps with two or more rows sharing a prefix (Step.shared_group >= 2)
    without: Replay | None = None  # the same trace without the cache (a cache on a trace with block hashes)

    def cache_summary(self) -> str:
        """'; prefix cache of 4,096 blocks: 3.6% of prompt tokens cached (498 of 14,162 blocks hit), 254,976 fewer
        prefilled; 7,703 steps against 7,705 without it (bucketing error -2.3% packed), both priced with the same
        buckets' ("" without a cache)."""
        c = self.cache
        if c is None:
            return ""
        if not self.tally.with_blocks:
            return f"; prefix cache of {c.capacity:,} blocks: no block hashes in this trace, so it cannot hit"
        w = self.without
        than = (f"; {self.steps:,} steps against {w.steps:,} without it (bucketing error "
                f"{100 * w.error['packed']:+.1f}% packed), both priced with the same buckets") if w else ""
        return (f"; prefix cache of {c.capacity:,} blocks: {100 * c.hit_rate:.1f}% of prompt tokens cached "
                f"({c.block_hits:,} of {c.blocks:,} blocks hit, {c.evictions:,} evicted), {c.cached_tokens:,} fewer "
                f"prefilled{than}")

    def reuse_summary(self) -> str:
        """Rows skipped, decode steps whose rows share a prefix, and the cache ("" when none applies)."""
        t = self.tally
        skipped = "".join(f"; {n:,} rows skipped: {why}" for why, n in t.skipped.items())
        shared = f"; {self.shared_steps:,} decode steps have rows sharing a prefix" if t.with_blocks else ""
        return skipped + shared + self.cache_summary()

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
                + ", ".join(f"{[c.kind for c in self.checks].count(k)} {k}" for k in KINDS) + ")"
                + self.reuse_summary())

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the results file (a run without a cache writes what it wrote before there was one)."""
        t = self.tally
        knobs = {k: v for k, v in asdict(self.knobs).items() if k != "prefix_cache" or v is not None}
        return {"source": self.source, "knobs": knobs, "requests": t.requests,
                "prompt_tokens": t.prompt_tokens, "output_tokens": t.output_tokens, "duration_s": t.duration_s,
                "prompt_hist": {str(k): v for k, v in sorted((t.prompt_hist or {}).items())},
                "output_hist": {str(k): v for k, v in sorted((t.output_hist or {}).items())},
                "steps": self.steps, "mixed_steps": self.mixed_steps, "shapes": self.shapes, "error": self.error,
                "kinds": self.kinds, "checks": [c.to_dict() for c in self.checks],
                "buckets": bucket_dicts(self.buckets)} | self.reuse_dict()

    def reuse_dict(self) -> dict[str, Any]:
        """skipped rows, block-hash facts and the cache's, with the schedule without it (only where they apply)."""
        t, out = self.tally, {}
        if t.skipped:
            out["skipped"] = dict(t.skipped)
        if t.with_blocks:
            out["block_requests"] = t.with_blocks
            out["shared_steps"] = self.shared_steps
        if self.cache is not None:
            out["prefix_cache"] = self.cache.to_dict()
            if self.without is not None:
                w = self.without
                out["prefix_cache"]["without"] = {"steps": w.steps, "mixed_steps": w.mixed_steps, "error": w.error,
                                                  "kinds": w.kinds, "buckets": bucket_dicts(w.buckets)}
        return out


def bucket_dicts(buckets: tuple[Bucket, ...]) -> list[dict[str, Any]]:
    """The buckets as a results file keeps them (decode sharing sums only where a row shared a prefix)."""
    return [{"phase": b.phase, "lengths": b.lengths, "steps": b.steps, "rows": b.rows, "q_tokens": b.q_tokens,
             "kv_tokens": b.kv_tokens, "packed": b.packed, "padded": b.padded}
            | ({"shared_rows": b.shared_rows, "shared_group": b.shared_group, "shared_prefix": b.shared_prefix}
               if b.shared_rows else {}) for b in buckets]


def replay(name: str, knobs: Knobs | None = None, max_buckets: int = MAX_BUCKETS,
           check_steps: int = CHECK_STEPS) -> Replay:
    """The workload `name` (a named one or a file) under `knobs`, with `check_steps` real steps sampled: cached per
    file version, so planning and the run's metadata read the trace once. With a prefix cache on a trace with block
    hashes, `without` is the same trace scheduled without it (no steps sampled), and both share one set of buckets
    (bench.traces.buckets.shared_buckets): each weighs the same batches by its own steps."""
    path = source_path(name)
    stat = path.stat()
    return _replay(name, str(path.resolve()), stat.st_mtime_ns, stat.st_size, knobs or Knobs(), max_buckets,
                   check_steps)


@dataclass
class _Pass:
    """One streaming pass of a schedule: what it counted, and its halves' bucket sums before merging."""

    tally: Tally
    steps: int
    mixed: int
    shapes: int
    shared: int
    found: Sums
    sampler: Sampler
    cache: CacheStats | None


def _pass(path: Path, kind: str, knobs: Knobs, check_steps: int) -> _Pass:
    tally = Tally()
    sampler = Sampler(check_steps)
    cache = CacheStats() if knobs.prefix_cache else None
    steps: Iterator[Step] = read_steps(path, sampler.wants) if kind == "flashinfer" else \
        schedule(tally.count(read_requests(path, tally.skipped)), knobs, sampler.wants, cache)
    found: Sums = {}
    seen: set[int] = set()  # hashes of the step shapes, up to DISTINCT_CAP of them: memory stays bounded
    n = mixed = shared = 0
    for step in steps:
        n += 1
        mixed += bool(step.prefill and step.decode_rows)
        shared += step.shared_group >= 2
        if len(seen) < DISTINCT_CAP:
            seen.add(hash(step))
        add_step(found, step)
        sampler.keep(step)
    return _Pass(tally, n, mixed, len(seen), shared, found, sampler, cache)


@functools.lru_cache(maxsize=8)
def _replay(name: str, path_text: str, _mtime: int, _size: int, knobs: Knobs, max_buckets: int,
            check_steps: int) -> Replay:
    path = Path(path_text)
    kind = file_format(path)
    p = _pass(path, kind, knobs, check_steps)
    other = _pass(path, kind, replace(knobs, prefix_cache=None), 0) \
        if knobs.prefix_cache is not None and p.tally.with_blocks else None
    if other is None:
        buckets = merge(buckets_of(p.found), max_buckets)
        without = None
    else:
        buckets, theirs = shared_buckets(p.found, other.found, max_buckets)
        o = other
        without = Replay(name, kind, replace(knobs, prefix_cache=None), o.tally, o.steps, o.mixed, o.shapes,
                         tuple(theirs), bucketing_error(theirs), dict(o.sampler.seen), (), None, o.shared)
    checks = tuple(checked(i, step, buckets) for i, step in p.sampler.drawn())
    return Replay(name, kind, knobs, p.tally, p.steps, p.mixed, p.shapes, tuple(buckets), bucketing_error(buckets),
                  dict(p.sampler.seen), checks, p.cache, p.shared, without)
