"""A decode step against a paged KV cache: fixed-size pages in a shuffled pool, found through a block table.

The pool holds the pages of every sequence of the batch in a seeded random order, as a long-running server's pool
looks after many allocations and frees: pool (pages, page_size, Hkv, D), the layout vLLM and flash-attn use, and
block_table (B, most pages) int32, row i listing sequence i's pages in order (unused entries point at page 0). The
last page of a sequence is filled up to its context length; the rest of it is never read. The layout is the
backend's paged trait (Backend.layouts, bench.backends.base.Layout):
  paged-mask    the pool as one (1, Hkv, pages x page_size, D) sequence under a paged block mask: query token t of
                sequence s sees pool slot j iff j belongs to s and its position passes the mask; KV blocks are one
                page, so a block is either skipped whole or belongs to the sequence (flex)
  paged-gather  gathers each sequence's tokens, then runs the backend's ragged layout on them: per-sequence
                (naive), nested jagged tensors (sdpa, where torch supports them), or a padded (B, Hkv, most pages x
                page_size, D) batch with a padding mask (sdpa's forced kernels)
  paged-table   flash_attn_with_kvcache with block_table and cache_seqlens (flash-attn, CUDA; flash-attn 2 needs
                pages of a multiple of 256 tokens)
The gathers are inside the timed call: they are what not having a paged kernel costs. Layout conversions of the
pool itself (paged-mask's) are not: a server keeps its pool in its kernel's layout.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench.backends.base import PAGED_LAYOUTS, RAGGED_LAYOUTS, Backend, Layout, Unsupported, bind
from bench.backends.flex import run_flex
from bench.backends.sdpa import run_sdpa
from bench.measure.rotation import Rotating
from bench.problem.masks import Mask
from bench.problem.scores import NO_SCORE
from bench.problem.shapes import AttentionShape
from bench.serving.batch import Sequences, offsets
from bench.serving.ragged import (
    Prepared,
    flash_import,
    flash_window,
    masked,
    nested,
    nested_kwargs,
    padding_mask,
    probe_nested,
    query_block,
    split_nested,
)
from bench.serving.workload import SEED, Workload

FLASH_PAGE_MULTIPLE = 256  # flash-attn 2's paged kernel: "page block size must be divisible by 256"


def block_table(w: Workload) -> torch.Tensor:
    """(B, most pages) int32: row i lists sequence i's pages in the pool, in order; unused entries are page 0."""
    assert w.page_size is not None
    pages = [math.ceil(n / w.page_size) for n in w.kv_lens]
    order = torch.randperm(sum(pages), generator=torch.Generator().manual_seed(SEED))  # the shuffled pool
    table = torch.zeros((w.batch, max(pages)), dtype=torch.int32)
    start = 0
    for i, n in enumerate(pages):
        table[i, :n] = order[start:start + n]
        start += n
    return table


def page_order(w: Workload) -> tuple[int, torch.Tensor]:
    """(pages in the pool, every sequence's tokens in order as slots of the flattened pool (pages x page_size))."""
    assert w.page_size is not None
    p, table = w.page_size, block_table(w).long()
    slots = [table[i, torch.arange(n) // p] * p + torch.arange(n) % p for i, n in enumerate(w.kv_lens)]
    return sum(math.ceil(n / p) for n in w.kv_lens), torch.cat(slots)


class PagedCache:
    """K and V of every sequence scattered into a shuffled page pool, with the block table that finds them."""

    def __init__(self, w: Workload, seqs: Sequences) -> None:
        assert w.page_size is not None
        p = self.page_size = w.page_size
        k0 = seqs.k[0]
        pages, index = page_order(w)
        self.block_table = block_table(w).to(k0.device)  # (B, most pages)
        self.token_index = index.to(k0.device)  # every sequence's tokens as slots of the flattened pool
        # (pages x page_size, Hkv, D) pools, filled through the index, viewed as (pages, page_size, Hkv, D)
        self.k_pool = k0.new_zeros((pages * p, k0.shape[1], k0.shape[3]))
        self.v_pool = torch.zeros_like(self.k_pool)
        self.k_pool[self.token_index] = torch.cat([k[0].transpose(0, 1) for k in seqs.k])
        self.v_pool[self.token_index] = torch.cat([v[0].transpose(0, 1) for v in seqs.v])
        self.k_pool = self.k_pool.view(pages, p, k0.shape[1], k0.shape[3])
        self.v_pool = self.v_pool.view(pages, p, k0.shape[1], k0.shape[3])

    @property
    def cold(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What a gathering step reads from memory: the pools and the index into them (a Rotating call's inputs)."""
        return self.k_pool, self.v_pool, self.token_index


def gathered(k_pool: torch.Tensor, v_pool: torch.Tensor, token_index: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Every sequence's K and V, packed (sum of contexts, Hkv, D): one index_select per tensor."""
    flat_k = k_pool.flatten(0, 1)  # (pages x page_size, Hkv, D)
    flat_v = v_pool.flatten(0, 1)
    return flat_k[token_index], flat_v[token_index]


def paged(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences) -> Prepared:
    """The timed decode step of `backend` on a paged cache, and how to split its output per sequence."""
    layout = backend.layout(PAGED_LAYOUTS)
    if layout is None:
        raise Unsupported(f"{backend.name}: no paged-cache layout (its registry line lists none of "
                          f"{', '.join(PAGED_LAYOUTS)})")
    return PAGED[layout](backend, shape, w, seqs, PagedCache(w, seqs))


def _gather(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences, cache: PagedCache) -> Prepared:
    """paged-gather: the backend's ragged layout, on K and V gathered from the pool inside the call."""
    ragged = backend.layout(RAGGED_LAYOUTS)
    if ragged not in GATHERED:
        raise Unsupported(f"{backend.name}: paged-gather needs a ragged layout to gather into, one of "
                          f"{', '.join(GATHERED)}; its registry line has {ragged or 'none'}")
    return GATHERED[ragged](backend, shape, w, seqs, cache)


def _per_sequence(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences, cache: PagedCache
                  ) -> Prepared:
    fn = bind(backend.fn, shape.mask, NO_SCORE)  # serving batches take no score variant (bench.kinds.serving)

    def call(*pool):
        k, v = gathered(*pool)  # (sum of contexts, Hkv, D)
        outs = []
        for q, k_i, v_i in zip(seqs.q, k.split(list(w.kv_lens)), v.split(list(w.kv_lens)), strict=True):
            outs.append(fn(q, k_i.transpose(0, 1).unsqueeze(0), v_i.transpose(0, 1).unsqueeze(0)))
        return outs
    return Rotating(call, cache.cold), lambda outs: outs


def _nested(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences, cache: PagedCache) -> Prepared:
    kwargs = nested_kwargs(backend, shape, w)
    q = nested(seqs.q)  # (B, Hq, j, D)
    kv_offsets = offsets(w.kv_lens, q.device).long()

    def attend(*pool):
        k, v = gathered(*pool)  # (sum of contexts, Hkv, D)
        k_nt = torch.nested.nested_tensor_from_jagged(k, kv_offsets).transpose(1, 2)  # (B, Hkv, j, D)
        v_nt = torch.nested.nested_tensor_from_jagged(v, kv_offsets).transpose(1, 2)
        return q, k_nt, v_nt

    probe_nested(backend, *attend(*cache.cold), kwargs)

    def call(*pool):
        return F.scaled_dot_product_attention(*attend(*pool), **kwargs)
    return Rotating(call, cache.cold), split_nested


def _padded(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences, cache: PagedCache) -> Prepared:
    most = cache.block_table.shape[1]
    width = most * cache.page_size
    q = torch.cat(seqs.q)  # (B, Hq, Sq, D): every sequence decodes the same number of queries
    kwargs = {"attn_mask": padding_mask(shape, w, q.device, kv_width=width),
              "enable_gqa": shape.n_kv_heads != shape.n_heads}
    def call(k_pool, v_pool, table):
        # (B, most pages, page_size, Hkv, D) -> (B, Hkv, most pages x page_size, D)
        k = k_pool[table].flatten(1, 2).transpose(1, 2)
        v = v_pool[table].flatten(1, 2).transpose(1, 2)
        return run_sdpa(backend.name, q, k, v, kwargs)
    return Rotating(call, (cache.k_pool, cache.v_pool, cache.block_table.long())), lambda out: list(out.split(1))


@functools.lru_cache(maxsize=8)
def paged_mask(w: Workload, mask: Mask, device: str):
    """Flex's paged block mask: query token t of sequence s sees pool slot j iff the block table puts one of s's
    tokens there and the mask lets it. KV blocks are one page, so whole pages of other sequences are skipped;
    query blocks hold one sequence's queries (query_block).
    Cached (the pool's order is a function of the workload and the seed), so the check and the timed call share
    one mask_mod and one compiled kernel."""
    from torch.nn.attention.flex_attention import create_block_mask

    p = w.page_size
    assert p is not None
    pages, index = page_order(w)
    owner = torch.full((pages * p,), -1, dtype=torch.long)  # pool slot -> its sequence (-1: unused tail)
    position = torch.zeros(pages * p, dtype=torch.long)  # pool slot -> its position in that sequence
    owner[index] = torch.cat([torch.full((n,), i) for i, n in enumerate(w.kv_lens)])
    position[index] = torch.cat([torch.arange(n) for n in w.kv_lens])
    q_len = w.q_lens[0]
    q_seq = torch.arange(w.batch).repeat_interleave(q_len)  # query token -> its sequence
    q_pos = torch.cat([torch.arange(q_len) + n - q_len for n in w.kv_lens])  # its position in the sequence
    owner, position, q_seq, q_pos = (t.to(device) for t in (owner, position, q_seq, q_pos))

    def paged(b, h, q_idx, kv_idx):
        return masked(owner[kv_idx] == q_seq[q_idx], q_pos[q_idx], position[kv_idx], mask)

    return create_block_mask(paged, None, None, len(q_seq), pages * p, device=device, BLOCK_SIZE=(query_block(w), p))


def _mask(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences, cache: PagedCache) -> Prepared:
    block_mask = paged_mask(w, shape.mask, str(seqs.device))
    q = torch.cat(seqs.q, dim=2)  # (1, Hq, B x Sq, D)
    k = cache.k_pool.flatten(0, 1).transpose(0, 1).unsqueeze(0).contiguous()  # (1, Hkv, pages x page_size, D)
    v = cache.v_pool.flatten(0, 1).transpose(0, 1).unsqueeze(0).contiguous()
    key = ("paged", w, shape.mask)

    def call(k, v):
        return run_flex(q, k, v, block_mask, key)
    return Rotating(call, (k, v)), lambda out: list(out.split(w.q_lens[0], dim=2))


def _table(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences, cache: PagedCache) -> Prepared:
    with_kvcache = flash_import(backend, "flash_attn_with_kvcache", shape.head_dim)
    if cache.page_size % FLASH_PAGE_MULTIPLE:
        raise Unsupported(f"{backend.name}: its paged KV cache needs pages of a multiple of {FLASH_PAGE_MULTIPLE} "
                          f"tokens, not {cache.page_size}")
    q = torch.cat(seqs.q).transpose(1, 2).contiguous()  # (B, Sq, Hq, D)
    lengths = torch.tensor(w.kv_lens, dtype=torch.int32, device=q.device)
    # with cache_seqlens the causal mask is bottom-right aligned: query a sits at position context - Sq + a
    kwargs = {"cache_seqlens": lengths, "causal": shape.causal, "window_size": flash_window(shape)}

    def call(k_pool, v_pool, table):
        return with_kvcache(q, k_pool, v_pool, block_table=table, **kwargs)
    cold = (cache.k_pool, cache.v_pool, cache.block_table)
    return Rotating(call, cold), lambda out: list(out.transpose(1, 2).split(1))


PagedBuilder = Callable[[Backend, AttentionShape, Workload, Sequences, PagedCache], Prepared]
# The one place a paged layout meets its builder, and paged-gather's ragged layouts theirs.
PAGED: dict[Layout, PagedBuilder] = {"paged-gather": _gather, "paged-mask": _mask, "paged-table": _table}
GATHERED: dict[Layout, PagedBuilder] = {"per-sequence": _per_sequence, "nested": _nested, "padded": _padded}
