"""A prefix cache of prompt blocks for the scheduler (bench.traces.schedule), its hit accounting, and which decode
rows of a step share a prefix (what a cascade kernel could serve once).

The cache (PrefixCache): a store of block hash ids (a trace's Request.blocks) holding at most `capacity` blocks,
evicted least recently used; apart from the running requests' own KV (a Mooncake/LMCache-like pool: a block in use by
a running request may still be evicted from it, and nothing is pinned). Its rules, as the scheduler applies them:
  lookup   when a request is admitted, its leading blocks found in the cache, one after another up to the first
           miss, are its hits; their tokens are not prefilled again, except that at least the prompt's last token is
           always computed (its logits give the first output token: vLLM's rule), so cached tokens =
           min(the hit blocks' tokens, prompt - 1). Its hit blocks are then used (made most recent).
  insert   a request's blocks enter the cache when its prefill completes (the step that ends its prompt), all of
           them, used from the last to the first, so that its first block is the most recent and its tail is evicted
           first (vLLM frees a request's blocks in that order). A block already there is only made most recent. Blocks
           of the generated output carry no hash in a trace: they never enter.
  order    within a step, lookups happen as requests are admitted, inserts after the step: two requests with the same
           new prefix admitted before either's prefill ends both prefill it.
Hit rate = cached prompt tokens / prompt tokens (all the trace's requests); block hits / blocks looked up beside it.

Sharing (decode rows): rows are grouped by their prompt's first block id; a group of 2 or more rows shares a prefix:
its longest run of leading blocks common to every row (tokens: that run's, at most the shortest prompt). Per step:
the rows in such groups, and the largest group (most rows; ties: the longer prefix) with its prefix in tokens.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import asdict, dataclass

from bench.traces.rows import Request


@dataclass
class CacheStats:
    """What the cache did over a schedule (every request counts, with blocks or without)."""

    capacity: int = 0  # blocks
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens not prefilled again
    blocks: int = 0  # blocks looked up
    block_hits: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def block_hit_rate(self) -> float:
        return self.block_hits / self.blocks if self.blocks else 0.0

    def to_dict(self) -> dict[str, float]:
        return asdict(self) | {"hit_rate": self.hit_rate, "block_hit_rate": self.block_hit_rate}


class PrefixCache:
    """Block ids, least recently used first, at most `capacity` of them (the module docstring's rules)."""

    def __init__(self, capacity: int, stats: CacheStats | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"a prefix cache holds at least 1 block, not {capacity}")
        self.capacity = capacity
        self.stats = stats or CacheStats()
        self.stats.capacity = capacity
        self.blocks: OrderedDict[int, None] = OrderedDict()  # oldest first

    def hits(self, blocks: tuple[int, ...]) -> int:
        """Leading blocks found, one after another up to the first miss (nothing is used)."""
        n = 0
        for b in blocks:
            if b not in self.blocks:
                break
            n += 1
        return n

    def use(self, blocks: tuple[int, ...]) -> None:
        """The blocks used from the last to the first (each made most recent, entering if absent), then the least
        recently used evicted down to the capacity."""
        for b in reversed(blocks):
            if b in self.blocks:
                self.blocks.move_to_end(b)
            else:
                self.blocks[b] = None
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
            self.stats.evictions += 1

    def lookup(self, r: Request) -> int:
        """Prompt tokens of `r` the cache already holds (the lookup rule), counted in the stats; its hits used."""
        h = self.hits(r.blocks)
        cached = min(sum(r.block_tokens(i) for i in range(h)), r.prompt - 1)
        s = self.stats
        s.requests += 1
        s.prompt_tokens += r.prompt
        s.cached_tokens += cached
        s.blocks += len(r.blocks)
        s.block_hits += h
        self.use(r.blocks[:h])
        return cached


class Sharing:
    """The decode rows' requests grouped by their first block (requests without blocks are left out), and when each
    ends; `now()` is the step's sharing (the module docstring)."""

    def __init__(self) -> None:
        self.groups: dict[int, dict[int, Request]] = {}
        self.ends: list[tuple[int, int, int]] = []  # (last decode step, seq, first block)
        self.seq = 0
        self.shared = 0  # rows in groups of 2 or more
        self.largest: tuple[int, int] | None = (0, 0)  # (rows, prefix tokens); None: to recompute

    def add(self, r: Request, last_step: int) -> None:
        if not r.blocks:
            return
        group = self.groups.setdefault(r.blocks[0], {})
        self.shared += 2 if len(group) == 1 else 1 if group else 0
        group[self.seq] = r
        heapq.heappush(self.ends, (last_step, self.seq, r.blocks[0]))
        self.seq += 1
        self.largest = None

    def finish(self, t: int) -> None:
        """Drop the requests whose last decode step is t."""
        while self.ends and self.ends[0][0] <= t:
            _, seq, first = heapq.heappop(self.ends)
            group = self.groups[first]
            del group[seq]
            self.shared -= 2 if len(group) == 1 else 1 if group else 0
            if not group:
                del self.groups[first]
            self.largest = None

    def now(self) -> tuple[int, int, int]:
        """(rows sharing a prefix with another row, rows of the largest such group, its prefix in tokens)."""
        if self.largest is None:
            big = max((len(g) for g in self.groups.values()), default=0)
            self.largest = (0, 0) if big < 2 else \
                max((big, prefix_tokens(list(g.values()))) for g in self.groups.values() if len(g) == big)
        return self.shared, *self.largest


def prefix_tokens(requests: list[Request]) -> int:
    """Tokens of the leading blocks every one of `requests` has in common (at most the shortest prompt)."""
    first = requests[0].blocks
    n = 0
    while n < len(first) and all(len(r.blocks) > n and r.blocks[n] == first[n] for r in requests):
        n += 1
    return min(min(n * r.block, r.prompt) for r in requests)
