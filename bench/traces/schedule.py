"""A request trace -> the steps a continuous-batching server runs (vLLM V1's scheduler, simplified), one at a time.

Each step has a token budget (max_batch_tokens) and a sequence cap (max_seqs). Every running request that is
decoding takes one row (1 query over its context); then requests still prefilling take their next chunk, then
waiting requests are admitted in arrival order while budget and sequences remain. A chunk is the rest of the prompt,
cut to the budget left and to prefill_chunk (vLLM's long_prefill_token_threshold) when set. The step that ends a
prompt samples the request's first token; its decode step j (j = 1 .. output - 1) has one query over prompt + j keys.
Requests arrive on a virtual clock: each step lasts step_ms (the server's step time, a knob: replaying on real
timings would make the schedule depend on the backend measured); an idle server jumps to the next arrival. No
preemption and no KV-capacity limit: every admitted request runs to its end. The same trace and knobs always give
the same steps.

A prefix cache (knobs.prefix_cache blocks; None: none) serves requests that carry block hashes (bench.traces.cache has
its rules): a request's leading blocks found when it is admitted are not prefilled again, so its first chunk starts
after them and attends over them (the chunk's queries are its uncached tokens, its keys the whole context so far);
its blocks enter the cache when its prefill completes. Each step also says how many of its decode rows share a
prefix (bench.traces.cache.Sharing): what a cascade kernel could serve once.

Decode rows are kept as sums, not a list: request i decoding at step t has t + c_i keys (c_i fixed when its prompt
ends), so the rows' count, sum, sum of squares and maximum follow from n, sum c, sum c^2 and max c, in O(1) a step
(a lazy heap for the maximum, rebuilt from the live rows when the finished ones outnumber them). Scheduling a
100,000-request trace stays fast and its memory flat. A step the caller asks for (`explicit`: a sampled step, timed
exactly by bench.traces.sample) also carries its decode rows' keys one by one.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from bench.errors import UsageError
from bench.traces.cache import CacheStats, PrefixCache, Sharing
from bench.traces.rows import Request

# vLLM V1's `vllm serve` defaults on GPUs below the H100 class: 2,048 batched tokens, 256 sequences; 16-token pages
MAX_BATCH_TOKENS, MAX_SEQS, PAGE_SIZE = 2048, 256, 16
STEP_MS = 25.0  # a mid-size model's step on one GPU at a few dozen sequences: the clock requests arrive on


@dataclass(frozen=True)
class Knobs:
    """The server's settings that shape its steps (the --max-batch-tokens, --max-seqs, --prefill-chunk, --step-ms
    and --prefix-cache options)."""

    max_batch_tokens: int = MAX_BATCH_TOKENS
    max_seqs: int = MAX_SEQS
    prefill_chunk: int | None = None
    step_ms: float = STEP_MS
    prefix_cache: int | None = None  # blocks the prefix cache holds; None: no cache

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "max_seqs"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(self, name)} must be at least 1")
        if self.max_batch_tokens < self.max_seqs:
            raise UsageError(f"--max-batch-tokens {self.max_batch_tokens} is below --max-seqs {self.max_seqs}: every "
                             "running sequence's decode row must fit in a step (vLLM refuses this too)")
        if self.prefill_chunk is not None and self.prefill_chunk < 1:
            raise UsageError(f"--prefill-chunk {self.prefill_chunk} must be at least 1")
        if not self.step_ms > 0:
            raise UsageError(f"--step-ms {self.step_ms} must be positive")
        if self.prefix_cache is not None and self.prefix_cache < 1:
            raise UsageError(f"--prefix-cache {self.prefix_cache}: a cache must hold at least 1 block; give none for "
                             "no cache")


@dataclass(frozen=True)
class Step:
    """One scheduled step: its prefill rows (queries, keys) and its decode rows as sums (and one by one, sorted,
    where the caller asked for them), and how its decode rows share prefixes (bench.traces.cache.Sharing: rows that
    share one with another row, the largest group's rows and its prefix in tokens); neither is part of the step's
    identity."""

    prefill: tuple[tuple[int, int], ...]
    decode_rows: int = 0
    decode_kv_sum: int = 0
    decode_kv_sumsq: int = 0
    decode_kv_max: int = 0
    decode_kv: tuple[int, ...] = field(default=(), compare=False)
    shared_rows: int = field(default=0, compare=False)
    shared_group: int = field(default=0, compare=False)
    shared_prefix: int = field(default=0, compare=False)


@dataclass
class _Prefilling:
    request: Request
    done: int = 0  # prompt tokens already prefilled, or found in the prefix cache when admitted


class _Decoding:
    """The decoding requests as sums of c_i = keys at step t minus t, and when each ends."""

    def __init__(self) -> None:
        self.n = self.c_sum = self.c_sumsq = 0
        self.ends: list[tuple[int, int]] = []  # (last decode step, c)
        self.top: list[int] = []  # -c, lazily cleaned
        self.gone: dict[int, int] = {}  # c -> count removed but still in `top`

    def add(self, c: int, last_step: int) -> None:
        self.n += 1
        self.c_sum += c
        self.c_sumsq += c * c
        heapq.heappush(self.ends, (last_step, c))
        heapq.heappush(self.top, -c)

    def rows(self, t: int) -> tuple[int, int, int, int]:
        """(n, sum of keys, sum of squares, max) of the decode rows at step t."""
        while self.top and self.gone.get(-self.top[0]):
            self.gone[-self.top[0]] -= 1
            heapq.heappop(self.top)
        if not self.n:
            return 0, 0, 0, 0
        return (self.n, self.n * t + self.c_sum, self.n * t * t + 2 * t * self.c_sum + self.c_sumsq,
                t - self.top[0])

    def keys(self, t: int) -> tuple[int, ...]:
        """Each decode row's keys at step t, sorted: the live rows are exactly those still in `ends`."""
        return tuple(sorted(t + c for _, c in self.ends))

    def finish(self, t: int) -> None:
        """Drop the requests whose last decode step is t."""
        while self.ends and self.ends[0][0] <= t:
            _, c = heapq.heappop(self.ends)
            self.n -= 1
            self.c_sum -= c
            self.c_sumsq -= c * c
            self.gone[c] = self.gone.get(c, 0) + 1
        if len(self.top) > 2 * self.n + 64:  # finished rows below a long-running one pile up: rebuild from the live
            self.top = [-c for _, c in self.ends]
            heapq.heapify(self.top)
            self.gone.clear()


def _chunk(p: _Prefilling, budget: int, cap: int | None, rows: list[tuple[int, int]]) -> int:
    """Prefill p's next chunk (the rest of its prompt, cut to the budget and the cap): its row appended, its size
    returned."""
    size = min(p.request.prompt - p.done, budget, cap or budget)
    p.done += size
    rows.append((size, p.done))
    return size


def schedule(requests: Iterable[Request], knobs: Knobs | None = None,
             explicit: Callable[[Step], bool] | None = None, stats: CacheStats | None = None) -> Iterator[Step]:
    """The steps that serve `requests` (in arrival order) under `knobs` (vLLM-like defaults), one at a time; each step
    is offered to `explicit` (when given), and one it answers True for carries its decode rows' keys (decode_kv).
    With a prefix cache, what it did is added up in `stats` (when given)."""
    knobs = knobs or Knobs()
    cache = PrefixCache(knobs.prefix_cache, stats) if knobs.prefix_cache else None
    sharing = Sharing()
    pending = iter(requests)
    upcoming = next(pending, None)
    waiting: deque[Request] = deque()
    prefilling: list[_Prefilling] = []
    decoding = _Decoding()
    step_s = knobs.step_ms / 1000
    t = 0  # step index; the clock is t * step_s
    while True:
        now = t * step_s
        while upcoming is not None and upcoming.arrival_s <= now:
            waiting.append(upcoming)
            upcoming = next(pending, None)
        if not (waiting or prefilling or decoding.n):
            if upcoming is None:
                return
            jump = math.ceil(upcoming.arrival_s / step_s)  # idle: jump to the first step at the next arrival
            while (jump - 1) * step_s >= upcoming.arrival_s:  # 0.07 / 0.01 rounds up to 7.000000000000001
                jump -= 1
            t = max(t + 1, jump)
            continue
        n, kv_sum, kv_sumsq, kv_max = decoding.rows(t)
        budget = knobs.max_batch_tokens - n
        seqs = n + len(prefilling)
        rows: list[tuple[int, int]] = []
        admitted = 0
        for p in prefilling:  # requests already prefilling first, then waiting ones while room remains
            if budget <= 0:
                break
            budget -= _chunk(p, budget, knobs.prefill_chunk, rows)
        while waiting and budget > 0 and seqs + admitted < knobs.max_seqs:
            r = waiting.popleft()
            p = _Prefilling(r, cache.lookup(r) if cache else 0)
            prefilling.append(p)
            admitted += 1
            budget -= _chunk(p, budget, knobs.prefill_chunk, rows)
        ended = [p for p in prefilling if p.done == p.request.prompt]
        step = Step(tuple(rows), n, kv_sum, kv_sumsq, kv_max, (), *sharing.now())
        if explicit is not None and explicit(step) and n:  # rows one by one only where asked: O(n) a step
            step = replace(step, decode_kv=decoding.keys(t))
        yield step
        decoding.finish(t)
        sharing.finish(t)
        for p in ended:  # its first token came out of this step: decode steps t+1 .. t+output-1, prompt + j keys
            prefilling.remove(p)
            if cache:
                cache.use(p.request.blocks)
            if p.request.output > 1:
                decoding.add(p.request.prompt - t, t + p.request.output - 1)
                sharing.add(p.request, t + p.request.output - 1)
        t += 1
