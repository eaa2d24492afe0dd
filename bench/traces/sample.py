"""Real steps of a trace, drawn at random (seeded) and timed exactly: the check of the buckets' estimate in time.

The buckets (bench.traces.buckets) stand each step's half in for a representative batch; their error is stated as
counted work, which says nothing of time. So a replay also draws CHECK_STEPS of the trace's real steps, stratified by
kind: prefill only, decode only, and mixed (prefill chunks beside decode rows). The count is shared among the kinds
the trace has in proportion to their steps (stratified sampling's proportional allocation, whose error in the total
is at most about an unstratified draw's), after each kind gets MIN_PER_KIND (or all its steps, when fewer), so that
each kind's error has a spread to resample; within a kind every step is equally likely (reservoir sampling,
Algorithm R, seeded by SEED: one pass, memory flat however long the trace, the same steps every time). Each sampled
step's halves are written out as explicit rows (its prefill rows; its decode rows one by one, as the schedule had
them) and timed as their own cases beside the buckets (bench.kinds.trace.trace_cases). The report
(bench.analysis.time_to_serve) sets each sampled step's measured time against what the buckets predict for it: the
time of the bucket each half falls in, as the replay weighs it.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass

from bench.problem.shapes import rows_label
from bench.traces.buckets import Bucket, decode_key, nearest, prefill_key
from bench.traces.schedule import Step

# a dozen left a backend's time to serve a 2x-wide interval (its decode steps' errors spread over an order of
# magnitude); 24 shared equally among the kinds, about ±17% (azure-conv: 22,293 decode steps to 3,328 mixed, whose
# errors spread alike, so equal shares spent most of the sample where it weighs least). A step's exact case costs
# about its bucket's, so the sample adds about as many cases as 12-16 buckets.
CHECK_STEPS = 32
MIN_PER_KIND = 5
SEED = 0
KINDS = ("prefill", "decode", "mixed")  # prefill rows only, decode rows only, both


def kind_of(step: Step) -> str:
    return "mixed" if step.prefill and step.decode_rows else "prefill" if step.prefill else "decode"


@dataclass(frozen=True)
class Checked:
    """A sampled step: where it is in the trace, its kind, its halves written out (rows:..., "" for a half it has
    not) and the lengths of the bucket each half falls in."""

    index: int  # 0-based, among the trace's steps
    kind: str
    prefill: str
    decode: str
    prefill_bucket: str
    decode_bucket: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Sampler:
    """Per kind, a uniform sample of up to `n` steps, in one pass (Algorithm R, seeded). The schedule asks `wants`
    of each step before it yields it (a wanted step then carries its decode rows one by one); `keep` then takes the
    step as yielded."""

    def __init__(self, n: int = CHECK_STEPS, seed: int = SEED) -> None:
        self.n, self.rng = n, random.Random(seed)
        self.seen = dict.fromkeys(KINDS, 0)
        self.kept: dict[str, list[tuple[int, Step]]] = {k: [] for k in KINDS}
        self._index = -1
        self._slot = n  # where the step last asked about goes in its kind's sample (n: nowhere)

    def wants(self, step: Step) -> bool:
        if not self.n:
            return False
        kind = kind_of(step)
        i = self.seen[kind]
        self.seen[kind] = i + 1
        self._index += 1
        self._slot = i if i < self.n else self.rng.randrange(i + 1)
        return self._slot < self.n

    def keep(self, step: Step) -> None:
        if self._slot >= self.n:
            return
        kept = self.kept[kind_of(step)]
        if self._slot == len(kept):
            kept.append((self._index, step))
        else:
            kept[self._slot] = (self._index, step)
        self._slot = self.n

    def drawn(self) -> list[tuple[int, Step]]:
        """n of the kept steps, shared among the kinds by `shares`, each kind's share a uniform draw from its sample;
        in trace order."""
        share = shares(self.n, self.seen, {k: len(self.kept[k]) for k in KINDS})
        return sorted((s for k in KINDS for s in self.rng.sample(self.kept[k], share[k])), key=lambda s: s[0])


def shares(n: int, steps: dict[str, int], kept: dict[str, int]) -> dict[str, int]:
    """How many of n sampled steps each kind gets: MIN_PER_KIND each first (fewer where n is short: one each in turn,
    prefill-only first), then one at a time to the kind with the most steps per share + 1 (D'Hondt's rule: shares
    proportional to `steps`), never past what a kind `kept`."""
    share, left = dict.fromkeys(KINDS, 0), n
    for _ in range(MIN_PER_KIND):
        for k in KINDS:
            if left and share[k] < kept[k]:
                share[k] += 1
                left -= 1
    while left and (open_ := [k for k in KINDS if share[k] < kept[k]]):
        k = max(open_, key=lambda k: steps[k] / (share[k] + 1))
        share[k] += 1
        left -= 1
    return share


def prefill_rows(step: Step) -> str:
    """The step's prefill half as explicit rows (equal rows grouped), or ""."""
    if not step.prefill:
        return ""
    return rows_label([(n, q, k) for (q, k), n in sorted(Counter(step.prefill).items())])


def decode_rows(step: Step) -> str:
    """The step's decode half as explicit rows (one query over each row's keys, equal rows grouped), or ""."""
    if not step.decode_rows:
        return ""
    assert len(step.decode_kv) == step.decode_rows, "a sampled step carries its decode rows one by one"
    return rows_label([(n, 1, k) for k, n in sorted(Counter(step.decode_kv).items())])


def checked(index: int, step: Step, buckets: list[Bucket]) -> Checked:
    """A sampled step with the buckets its halves fall in (bench.traces.buckets.nearest: merge's own rule)."""
    pre = [b for b in buckets if b.phase == "prefill"]
    dec = [b for b in buckets if b.phase == "decode"]
    prefill_bucket = decode_bucket = ""
    if step.prefill:
        q, kv = sum(a for a, _ in step.prefill), sum(b for _, b in step.prefill)
        prefill_bucket = nearest(pre, prefill_key(q, kv, len(step.prefill))).lengths
    if step.decode_rows:
        decode_bucket = nearest(dec, decode_key(step.decode_rows, step.decode_kv_sum)).lengths
    return Checked(index, kind_of(step), prefill_rows(step), decode_rows(step), prefill_bucket, decode_bucket)
