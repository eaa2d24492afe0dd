"""Steps -> a few representative batches, each weighted by the steps it stands for, and the error that adds.

Every step is two batches a server's attention runs: its prefill rows and its decode rows (a split-kernel server,
FlashInfer's way, calls them apart; a fused varlen call would take both). Each half falls in a bucket:
  decode   rows on a half-octave grid x mean keys per row on a half-octave grid
  prefill  query tokens (half-octave) x mean cached context per row (half-octave) x rows (octave)
Buckets beyond `max_buckets` per phase (the lightest by work) join their nearest kept one. A bucket's batch is
written out as explicit rows (bench.problem.shapes.parse_rows), its mean row count in all. Decode: one row at the steps'
mean longest context (what a padded layout pays for), the others in two groups with the mean and within-step
spread that are left. Prefill: equal chunks over the mean cached context, or with several rows one at the steps'
mean longest row and the others sharing the rest.
The error: two work models are summed over the real steps and over the buckets' batches times their weights,
packed work (the (query, key) pairs a causal mask leaves, as bench.problem.masks counts them: what per-sequence,
packed and varlen layouts compute)
and padded work (every row at the step's longest: what a padded layout computes); the difference is stated. That is
work, not time: bench.traces.sample times real steps to check the buckets in time.
Two schedules of one trace (with a prefix cache and without) share one set of buckets (shared_buckets), each weighing
them by its own steps.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from bench.problem.masks import CAUSAL
from bench.problem.shapes import parse_rows, rows_label
from bench.traces.schedule import Step

MAX_BUCKETS = 24  # per phase: two Azure traces x 2 phases x 24 x 4 CPU backends stays a few hundred cases


@functools.lru_cache(maxsize=1 << 16)  # a replay asks it of every prefill row, and a trace repeats its lengths
def visible(q: int, kv: int) -> int:
    """Pairs a bottom-right causal mask leaves for q queries at the end of kv keys (Mask.pairs)."""
    return CAUSAL.pairs(q, kv)


def _grid(x: float, per_octave: int) -> int:
    return round(per_octave * math.log2(max(x, 1.0)))


def prefill_key(q: int, kv: int, rows: int) -> tuple[int, ...]:
    """A prefill half's bucket before merging: query tokens, mean cached context a row, rows (q, kv: sums)."""
    return (_grid(q, 2), _grid(1 + (kv - q) / rows, 2), _grid(rows, 1))


def decode_key(rows: int, kv: int) -> tuple[int, ...]:
    """A decode half's bucket before merging: rows, mean keys a row (kv: their sum)."""
    return (_grid(rows, 2), _grid(kv / rows, 2))


@dataclass
class Bucket:
    phase: str  # prefill | decode
    key: tuple[int, ...]
    steps: int = 0
    rows: int = 0
    q_tokens: int = 0  # prefill: queries; decode: one a row
    kv_tokens: int = 0  # keys over the rows (decode: contexts; prefill: contexts, the chunk included)
    spread: float = 0.0  # decode: sum over steps of the rows' keys' squared deviation from their step's mean
    longest: int = 0  # sum over steps of the step's longest context (prefill: its most keys of a row)
    longest_q: int = 0  # prefill: sum over steps of the step's most queries of a row
    packed: float = 0.0  # work models over the real steps
    padded: float = 0.0
    # decode: sums over steps of the rows sharing a prefix with another row, of the largest such group's rows and of
    # its prefix in tokens (Step.shared_*: what a cascade pricing would read; 0 for a trace without block hashes)
    shared_rows: int = 0
    shared_group: int = 0
    shared_prefix: int = 0
    lengths: str = field(default="", compare=False)  # the representative batch, once made

    def add(self, other: Bucket) -> None:
        for name in ("steps", "rows", "q_tokens", "kv_tokens", "spread", "longest", "longest_q", "packed",
                     "padded", "shared_rows", "shared_group", "shared_prefix"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def groups(self) -> list[tuple[int, int, int]]:
        """The representative batch as (rows, queries, keys) groups."""
        n = max(1, round(self.rows / self.steps))
        if self.phase == "prefill":
            return self._prefill_groups(n)
        mean = self.kv_tokens / self.rows
        variance = max(0.0, self.spread / self.rows)
        if n < 2 or variance < 1:
            return [(n, 1, max(2, round(mean)))]
        # one row at the steps' mean longest context (what a padded layout pays for), the others at the mean and
        # spread that are left
        top = max(mean, self.longest / self.steps)
        rest_mean = (n * mean - top) / (n - 1)
        rest_var = max(0.0, (n * variance - (top - mean) ** 2 - (n - 1) * (rest_mean - mean) ** 2) / (n - 1))
        groups = {max(2, round(top)): 1}
        if n - 1 < 2 or rest_var < 1:
            groups[max(2, round(rest_mean))] = groups.get(max(2, round(rest_mean)), 0) + n - 1
        else:
            a, b = (n - 1) // 2, n - 1 - (n - 1) // 2
            sd = math.sqrt(rest_var)
            for count, k in ((a, rest_mean - sd * math.sqrt(b / a)), (b, rest_mean + sd * math.sqrt(a / b))):
                k = min(max(2, round(k)), round(top))
                groups[k] = groups.get(k, 0) + count
        return [(count, 1, k) for k, count in sorted(groups.items())]

    def _prefill_groups(self, n: int) -> list[tuple[int, int, int]]:
        """n equal chunks at the mean queries and cached context; with more rows, one of them at the steps' mean
        longest row (what a padded layout pays for) and the others sharing what is left."""
        q_mean, context = self.q_tokens / self.steps / n, (self.kv_tokens - self.q_tokens) / self.rows
        equal = [(n, max(1, round(q_mean)), max(1, round(q_mean)) + round(context))]
        if n < 2:
            return equal
        q_top, k_top = round(self.longest_q / self.steps), round(self.longest / self.steps)
        q_rest = (self.q_tokens / self.steps - q_top) / (n - 1)
        ctx_rest = ((self.kv_tokens - self.q_tokens) / self.steps - (k_top - q_top)) / (n - 1)
        if q_rest < 1 or ctx_rest < 0 or k_top < q_top:
            return equal
        groups = {(q_top, k_top): 1}
        rest = (round(q_rest), round(q_rest) + round(ctx_rest))
        groups[rest] = groups.get(rest, 0) + n - 1
        return [(count, q, k) for (q, k), count in sorted(groups.items())]

    def work(self) -> tuple[float, float]:
        """(packed, padded) work of the representative batch (its lengths once made, which may be another
        schedule's: shared_buckets), once."""
        return groups_work(parse_rows(self.lengths) if self.lengths else self.groups())


def groups_work(groups: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(packed, padded) work of a batch given as (rows, queries, keys) groups: the (query, key) pairs a causal mask
    leaves, and every row at the batch's longest."""
    packed = sum(n * visible(q, k) for n, q, k in groups)
    rows = sum(n for n, _, _ in groups)
    return packed, rows * visible(max(q for _, q, _ in groups), max(k for _, _, k in groups))


@functools.lru_cache(maxsize=1 << 12)  # the report asks it of every bucket and sampled step, for every backend
def batch_work(lengths: str) -> tuple[int, int]:
    """(packed, padded) work of a batch written as explicit rows (rows:...)."""
    return groups_work(parse_rows(lengths))


Sums = dict[tuple[str, tuple[int, ...]], list[float]]  # (phase, key) -> Bucket's fields from steps on


def add_step(found: Sums, step: Step) -> None:
    """The step's prefill half and decode half added to their buckets' sums (plain lists: a 100,000-request trace
    is ~840,000 steps, and a Bucket object a half would be most of the replay's time)."""
    if step.prefill:
        rows = len(step.prefill)
        q = kv = most_q = most_kv = 0
        packed = 0
        for a, b in step.prefill:
            q += a
            kv += b
            most_q, most_kv = max(most_q, a), max(most_kv, b)
            packed += visible(a, b)
        _add(found, ("prefill", prefill_key(q, kv, rows)),
             (1, rows, q, kv, 0.0, most_kv, most_q, float(packed), float(rows * visible(most_q, most_kv)), 0, 0, 0))
    if step.decode_rows:
        n, total = step.decode_rows, step.decode_kv_sum
        _add(found, ("decode", decode_key(n, total)),
             (1, n, n, total, step.decode_kv_sumsq - total * total / n, step.decode_kv_max, 0, float(total),
              float(n * step.decode_kv_max), step.shared_rows, step.shared_group, step.shared_prefix))


def _add(found: Sums, key: tuple[str, tuple[int, ...]], values: tuple[float, ...]) -> None:
    sums = found.get(key)
    found[key] = list(values) if sums is None else [a + b for a, b in zip(sums, values, strict=True)]


def buckets_of(found: Sums) -> dict[tuple[str, tuple[int, ...]], Bucket]:
    """The sums as Buckets (their fields in Bucket's order, after phase and key)."""
    return {(phase, key): Bucket(phase, key, *sums) for (phase, key), sums in found.items()}


def merge(buckets: dict[tuple[str, tuple[int, ...]], Bucket], max_buckets: int = MAX_BUCKETS) -> list[Bucket]:
    """Per phase, the `max_buckets` heaviest by packed work kept, each lighter one joined to its nearest kept one
    (squared distance on the grid); each kept bucket's representative batch made."""
    out: list[Bucket] = []
    for phase in ("prefill", "decode"):
        mine = sorted((b for b in buckets.values() if b.phase == phase), key=lambda b: (-b.packed, b.key))
        kept, rest = mine[:max_buckets], mine[max_buckets:]
        for b in rest:
            nearest(kept, b.key).add(b)
        for b in kept:
            b.lengths = rows_label(b.groups())
        out += sorted(kept, key=lambda b: b.key)
    return out


def shared_buckets(found: Sums, other: Sums, max_buckets: int = MAX_BUCKETS) -> tuple[list[Bucket], list[Bucket]]:
    """One set of buckets for two schedules of one trace (with a prefix cache and without: bench.traces.replay), so
    that both are priced with the same measured batches and their difference is the schedules', not the noise between
    two nearly equal batches timed apart. The buckets are merge's over the two schedules' halves together (their
    representative batches made from both); then each schedule's own halves are summed into them by merge's rule (its
    own bucket if kept, else the nearest kept one). Returns each schedule's buckets, in the same order and with the
    same lengths; a bucket one schedule never falls in has 0 steps there."""
    union: Sums = {}
    for sums in (found, other):
        for key, values in sums.items():
            have = union.get(key)
            union[key] = list(values) if have is None else [a + b for a, b in zip(have, values, strict=True)]
    kept = merge(buckets_of(union), max_buckets)

    def own(sums: Sums) -> list[Bucket]:
        out = {(b.phase, b.key): Bucket(b.phase, b.key, lengths=b.lengths) for b in kept}
        for (phase, key), b in buckets_of(sums).items():
            target = (phase, key) if (phase, key) in out else \
                (phase, nearest([k for k in kept if k.phase == phase], key).key)
            out[target].add(b)
        return [out[(b.phase, b.key)] for b in kept]

    return own(found), own(other)


def nearest(kept: list[Bucket], key: tuple[int, ...]) -> Bucket:
    """The kept bucket (of one phase) a half with this key falls in: its own, else the nearest on the grid (squared
    distance; ties: the lower key). merge joins the lighter buckets by this rule, so a step is weighed where it is."""
    return min(kept, key=lambda k: (sum((x - y) ** 2 for x, y in zip(k.key, key, strict=True)), k.key))


def bucketing_error(buckets: list[Bucket]) -> dict[str, float]:
    """(the buckets' work x their steps - the real steps' work) / the real steps' work, under each work model."""
    real_packed = sum(b.packed for b in buckets) or 1.0
    real_padded = sum(b.padded for b in buckets) or 1.0
    packed = sum(b.steps * b.work()[0] for b in buckets)
    padded = sum(b.steps * b.work()[1] for b in buckets)
    return {"packed": packed / real_packed - 1, "padded": padded / real_padded - 1}
