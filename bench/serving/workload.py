"""What a serving case computes, as plain numbers: each sequence's query and key lengths, and the counts that follow.

No tensors here: records are counted from these numbers alone. The batch comes from the shape (bench.problem.shapes):
  ragged prefill  (lengths equal/uniform/zipf, seq_q == seq_kv = S): B sequences whose lengths are drawn from the
                  named distribution and sum to exactly B x S tokens; each attends causally (or per the mask) to itself.
  ragged decode   (lengths set, seq_q < seq_kv): each sequence decodes seq_q tokens against its own context; the
                  contexts are drawn the same way and sum to B x seq_kv (each at least seq_q).
  mixed           (lengths mixed, seq_q == seq_kv = S): the first ceil(B/2) sequences are prefill chunks of S tokens
                  that continue an S-token cached prompt (S queries, 2S keys), the others decode steps (1 query)
                  against contexts drawn uniform at a total of 2S per step: a chunked-prefill scheduler's batch.
  rows            (lengths rows:NxQ:K+...) explicit groups: N sequences of Q queries over K keys, in order; a
                  replayed trace's step (bench.traces). Q == K is a whole prompt, Q < K a prefill chunk or decode
                  step continuing a cached context of K - Q tokens.
  page_size       the decode step's cache lives in pages of that many tokens (bench.serving.paged).
Distributions, seeded (the same shape always gives the same lengths): equal (all S); uniform (weights uniform in
[0, 1)); zipf (weights 1/rank for ranks 1..B in a seeded order: one long sequence and a tail of short ones).
Every sequence gets 1 token (decode: seq_q) and the rest is shared out by weight, largest remainders first.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.backends.base import PAGED_LAYOUTS, RAGGED_LAYOUTS, Backend
from bench.counts.metrics import ELEMENT_BYTES
from bench.problem.case import shape_kind
from bench.problem.masks import visible_pairs
from bench.problem.shapes import AttentionShape

SEED = 0


def is_serving(shape: AttentionShape) -> bool:
    """A serving batch (ragged lengths, mixed or paged) rather than a dense one (bench.problem.case holds the rule)."""
    return shape_kind(shape) == "serving"


def draw_lengths(distribution: str, count: int, total: int, minimum: int = 1, seed: int = SEED) -> list[int]:
    """`count` lengths of at least `minimum` summing to `total`, drawn from the named distribution."""
    if count * minimum > total:
        raise ValueError(f"{count} sequences of at least {minimum} tokens do not fit in {total}")
    rng = random.Random(f"{distribution}-{count}-{total}-{seed}")
    if distribution == "equal":
        weights = [1.0] * count
    elif distribution == "uniform":
        weights = [rng.random() + 1e-9 for _ in range(count)]
    elif distribution == "zipf":
        ranks = list(range(1, count + 1))
        rng.shuffle(ranks)
        weights = [1.0 / r for r in ranks]
    else:
        raise ValueError(f"unknown length distribution {distribution!r}")
    spare = total - count * minimum
    shares = [spare * w / sum(weights) for w in weights]
    lengths = [minimum + math.floor(s) for s in shares]
    by_remainder = sorted(range(count), key=lambda i: (math.floor(shares[i]) - shares[i], i))
    for i in by_remainder[:total - sum(lengths)]:
        lengths[i] += 1
    return lengths


@dataclass(frozen=True)
class Workload:
    """Per sequence: how many queries it computes and how many keys (its context, queries included) it sees.

    Masks are bottom-right aligned per sequence, as for a dense case: query a of sequence i sits at position
    a + kv_lens[i] - q_lens[i] of that sequence."""

    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    page_size: int | None = None

    @property
    def batch(self) -> int:
        return len(self.q_lens)


def workload_of(shape: AttentionShape) -> Workload:
    """The sequences of a serving shape (see the module's docstring for each kind)."""
    b, s = shape.batch, shape.seq_q
    assert shape.serving is not None, "workload_of takes a serving shape"
    lengths, page_size = shape.serving.lengths, shape.serving.page_size
    groups = shape.serving.rows
    if groups is not None:
        return Workload(tuple(q for n, q, _ in groups for _ in range(n)),
                        tuple(k for n, _, k in groups for _ in range(n)), page_size)
    if lengths == "mixed":
        chunks = math.ceil(b / 2)
        decode_kv = draw_lengths("uniform", b - chunks, (b - chunks) * 2 * s)
        return Workload((s,) * chunks + (1,) * (b - chunks), (2 * s,) * chunks + tuple(decode_kv))
    if shape.seq_q == shape.seq_kv:  # ragged prefill: every sequence is its own queries and keys
        drawn = tuple(draw_lengths(lengths or "equal", b, b * s))
        return Workload(drawn, drawn)
    contexts = draw_lengths(lengths or "equal", b, b * shape.seq_kv, minimum=shape.seq_q)
    return Workload((shape.seq_q,) * b, tuple(contexts), page_size)


def real_pairs(w: Workload, causal: bool, window: int | None) -> int:
    """(query, key) pairs the mask leaves visible, summed over the sequences: the only work FLOPs count."""
    return sum(visible_pairs(q, k, causal, window) for q, k in zip(w.q_lens, w.kv_lens, strict=True))


def padded_pairs(w: Workload, causal: bool, window: int | None) -> int:
    """The pairs a padded batch (every sequence at the longest query and key length, same mask) computes; a paged
    cache's gather pads the keys to whole pages."""
    kv = max(w.kv_lens) if w.page_size is None else math.ceil(max(w.kv_lens) / w.page_size) * w.page_size
    return w.batch * visible_pairs(max(w.q_lens), kv, causal, window)


def pads(backend: Backend, paged: bool) -> bool:
    """Whether the backend's layout for this batch is the padded one (B, H, max length, D) with a padding mask,
    which computes the pairs of padding tokens too: its ragged layout, or on a paged cache its ragged layout after
    paged-gather (the other paged layouts read the pool itself)."""
    if paged and backend.layout(PAGED_LAYOUTS) != "paged-gather":
        return False
    return backend.layout(RAGGED_LAYOUTS) == "padded"


def padding_waste(shape: AttentionShape, backend: Backend) -> float:
    """Work of `backend`'s serving layout, padding included, / the real work: 1.0 when it pads nothing.

    A padded layout computes every sequence at the batch's longest lengths; per-sequence calls, nested jagged
    tensors, packed sequences under a document or paged block mask, varlen and a block table pad nothing."""
    if not pads(backend, paged=shape.serving is not None and shape.serving.page_size is not None):
        return 1.0
    w = workload_of(shape)
    return padded_pairs(w, shape.causal, shape.mask.window) / real_pairs(w, shape.causal, shape.mask.window)


def serving_flops(shape: AttentionShape) -> int:
    """4 x Hq x D per real visible pair (a forward; serving cases time inference only)."""
    return 4 * shape.n_heads * shape.head_dim * real_pairs(workload_of(shape), shape.causal, shape.mask.window)


def serving_bytes(shape: AttentionShape) -> int:
    """Minimum traffic: each sequence's Q and O at Hq heads and its K and V at Hkv heads, once."""
    w = workload_of(shape)
    return 2 * shape.head_dim * ELEMENT_BYTES[shape.dtype] * (
        shape.n_heads * sum(w.q_lens) + shape.n_kv_heads * sum(w.kv_lens))


def serving_kv_bytes(shape: AttentionShape) -> int:
    """One layer's K and V cache that the batch's decode step reads: every context, capped by a window."""
    w = workload_of(shape)
    tokens = sum(min(k, shape.mask.window) if shape.mask.window else k for k in w.kv_lens)
    return 2 * shape.n_kv_heads * shape.head_dim * tokens * ELEMENT_BYTES[shape.dtype]

