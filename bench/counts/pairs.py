"""How many (query, key) pairs a sparsity keeps, which blocks it draws, and how many pairs a kernel executes for it:
pure arithmetic over the lengths (numpy, no torch), so plans, records and the report share one count.

Every mask leaves each query an interval of keys [lo, hi], read from the one rule (bench.problem.masks, Mask.bounds),
and every static sparsity (bench.problem.sparsity) keeps one or two intervals of it, or whole key blocks;
the counts below intersect intervals, row by row, vectorised. topk keeps min(K, visible keys) per query whatever
the indexer picks, so its kept pairs are exact too; which blocks it touches is known only once it has picked.

How a kernel executes a case (a backend's `executes` trait):
  all       every Sq x Skv pair (a materialising kernel computes the whole score matrix, then masks it)
  causal    the pairs of a none or causal mask (a tiled kernel skips the blocks a causal mask hides), and every pair
            when it is handed a boolean mask: a window or chunk mask, any sparsity (SDPA cannot skip what it does not
            know is empty)
  visible   the pairs the case's mask leaves (flash-attn: causal and windows are native)
  blocks    FlexAttention: each (Q block, KV block) of FLEX_BLOCK holding a kept pair, whole (partial blocks
            whole; the last block of a length that FLEX_BLOCK does not divide is as long as what is left)
  selected  a gather kernel: K keys per query for topk (the padding of a query that sees fewer keys included)
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal

from bench.problem.masks import Mask
from bench.problem.sparsity import NO_SPARSITY, Sparsity, block_table

if TYPE_CHECKING:  # numpy is imported where a count needs it: importing this module stays light
    import numpy as np

Executes = Literal["all", "causal", "visible", "blocks", "selected"]
EXECUTES: tuple[str, ...] = ("all", "causal", "visible", "blocks", "selected")
FLEX_BLOCK = 128  # FlexAttention's BlockMask block, both ways (its default; bench.backends.flex builds with it)


def _overlap(a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray | int, b_hi: np.ndarray | int
             ) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    return np.maximum(a_lo, b_lo), np.minimum(a_hi, b_hi)


def _length(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.clip(hi - lo + 1, 0, None)


def doc_bounds(docs: int, seq_kv: int, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and last key of the document each position lies in: N equal documents, the last takes the rest."""
    import numpy as np

    length = seq_kv // docs
    d = np.minimum(p // length, docs - 1)
    start = d * length
    end = np.where(d == docs - 1, seq_kv - 1, start + length - 1)
    return start, end


def _intervals(sparsity: Sparsity, mask: Mask, seq_q: int, seq_kv: int) -> list[tuple[np.ndarray, np.ndarray,
                                                                                          np.ndarray]]:
    """The kept keys as intervals: [(query index, lo, hi)] arrays, possibly empty ones (lo > hi), possibly
    overlapping across the list. A block sparsity gives one interval per (query, kept block); topk the whole visible
    interval (an upper bound: which keys it keeps is the indexer's)."""
    import numpy as np

    p, lo, hi = mask.bounds(seq_q, seq_kv)
    rows = np.arange(seq_q, dtype=np.int64)
    kind = sparsity.kind
    if kind in ("none", "topk"):
        return [(rows, lo, hi)]
    if kind == "docs":
        start, end = doc_bounds(sparsity.docs, seq_kv, p)  # type: ignore[arg-type]
        return [(rows, *_overlap(lo, hi, start, end))]
    if kind == "global":
        G, W = sparsity.global_tokens, sparsity.window
        glob = _overlap(lo, hi, 0, G - 1)  # type: ignore[operator]
        band = _overlap(lo, hi, p - W + 1, p + W - 1)  # type: ignore[operator]
        everything = p < G  # type: ignore[operator]
        return [(rows, np.where(everything, lo, glob[0]), np.where(everything, hi, glob[1])),
                (rows, np.where(everything, hi + 1, band[0]), band[1])]
    B = sparsity.block
    table = block_table(sparsity, mask, seq_kv)
    out = []
    for r in range(int(p[0]) // B, int(p[-1]) // B + 1):  # type: ignore[operator]
        mine = (p // B) == r  # type: ignore[operator]
        blocks = np.asarray(table[r], dtype=np.int64) * B  # type: ignore[operator]
        q_rows = np.repeat(rows[mine], len(blocks))
        b_lo = np.tile(blocks, int(mine.sum()))
        row_lo, row_hi = np.repeat(lo[mine], len(blocks)), np.repeat(hi[mine], len(blocks))
        out.append((q_rows, *_overlap(row_lo, row_hi, b_lo, b_lo + B - 1)))  # type: ignore[operator]
    return out


def kept_per_row(sparsity: Sparsity, mask: Mask, seq_q: int, seq_kv: int) -> np.ndarray:
    """Keys each query keeps (int64, one per query): the sparsity's pairs within the mask's."""
    import numpy as np

    if sparsity.kind == "topk":
        _, lo, hi = mask.bounds(seq_q, seq_kv)
        return np.minimum(_length(lo, hi), sparsity.k)
    counts = np.zeros(seq_q, dtype=np.int64)
    parts = _intervals(sparsity, mask, seq_q, seq_kv)
    for rows, lo, hi in parts:
        np.add.at(counts, rows, _length(lo, hi))
    if sparsity.kind == "global":  # the two intervals may overlap: count the shared keys once
        (_, a_lo, a_hi), (_, b_lo, b_hi) = parts
        counts -= _length(*_overlap(a_lo, a_hi, b_lo, b_hi))
    return counts


@functools.lru_cache(maxsize=4096)  # plans ask it of every case, several times
def kept_pairs(sparsity: Sparsity, mask: Mask, seq_q: int, seq_kv: int) -> int:
    """Pairs the sparsity keeps within the mask (per batch and head): the useful pairs of a sparse case."""
    if not sparsity.sparse:
        return mask.pairs(seq_q, seq_kv)
    return int(kept_per_row(sparsity, mask, seq_q, seq_kv).sum())


def density(sparsity: Sparsity, mask: Mask, seq_q: int, seq_kv: int) -> float:
    """Kept pairs over the pairs the mask alone leaves: 1 for a dense case; the ideal speedup is 1 / this."""
    visible = kept_pairs(NO_SPARSITY, mask, seq_q, seq_kv)
    return kept_pairs(sparsity, mask, seq_q, seq_kv) / visible if visible else 1.0


@functools.lru_cache(maxsize=4096)
def kept_keys(sparsity: Sparsity, mask: Mask, seq_q: int, seq_kv: int) -> int:
    """Distinct keys some query keeps (the K/V rows a sparse kernel must read at least); topk: at most Sq x K."""
    import numpy as np

    cover = np.zeros(seq_kv + 1, dtype=np.int64)
    for _, lo, hi in _intervals(sparsity, mask, seq_q, seq_kv):
        keep = hi >= lo
        np.add.at(cover, lo[keep], 1)
        np.add.at(cover, hi[keep] + 1, -1)
    keys = int((np.cumsum(cover)[:seq_kv] > 0).sum())
    return min(keys, seq_q * sparsity.k) if sparsity.kind == "topk" else keys  # type: ignore[operator]


def _mask_block_pairs(mask: Mask, seq_q: int, seq_kv: int, block: int) -> int:
    """block_pairs of the mask alone: a Q block's rows leave one run of keys, from its first row's lo to its last
    row's hi (each bound grows with the row), and every KV block across that run holds a pair."""
    import numpy as np

    _, lo, hi = mask.bounds(seq_q, seq_kv)
    first_row = np.arange(0, seq_q, block)
    last_row = np.minimum(first_row + block, seq_q) - 1
    run_lo, run_hi = lo[first_row], hi[last_row]
    first, last = run_lo // block * block, np.minimum(seq_kv, (run_hi // block + 1) * block)
    return int(((last_row - first_row + 1) * (last - first))[run_hi >= run_lo].sum())


@functools.lru_cache(maxsize=4096)
def block_pairs(sparsity: Sparsity, mask: Mask, seq_q: int, seq_kv: int, block: int = FLEX_BLOCK) -> int:
    """Pairs a block-sparse kernel executes: every (Q block, KV block) holding a kept pair, whole. For topk this is
    the blocks its mask leaves (an upper bound until the indexer has picked)."""
    if sparsity.kind in ("none", "topk"):
        return _mask_block_pairs(mask, seq_q, seq_kv, block)
    import numpy as np

    n_q, n_kv = -(-seq_q // block), -(-seq_kv // block)
    diff = np.zeros((n_q, n_kv + 1), dtype=np.int32)
    for rows, lo, hi in _intervals(sparsity, mask, seq_q, seq_kv):
        keep = hi >= lo
        q_block = rows[keep] // block
        np.add.at(diff, (q_block, lo[keep] // block), 1)
        np.add.at(diff, (q_block, hi[keep] // block + 1), -1)
    touched = np.cumsum(diff, axis=1)[:, :n_kv] > 0
    q_len = np.minimum(block, seq_q - np.arange(n_q) * block)
    kv_len = np.minimum(block, seq_kv - np.arange(n_kv) * block)
    return int((touched * np.outer(q_len, kv_len)).sum())


def executed_pairs(sparsity: Sparsity, mask: Mask, seq_q: int, seq_kv: int, executes: str | None) -> int | None:
    """Pairs a kernel of this `executes` trait computes for the case (module docstring); None when unknown."""
    if executes == "all":
        return seq_q * seq_kv
    if executes in ("causal", "visible"):
        explicit = sparsity.sparse or (executes == "causal" and mask.kind not in ("none", "causal"))
        return seq_q * seq_kv if explicit else kept_pairs(NO_SPARSITY, mask, seq_q, seq_kv)
    if executes == "blocks":
        return block_pairs(sparsity, mask, seq_q, seq_kv)
    if executes == "selected":
        return seq_q * sparsity.k if sparsity.kind == "topk" else kept_pairs(sparsity, mask, seq_q, seq_kv)  # type: ignore[operator]
    return None
