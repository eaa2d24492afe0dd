"""The top-K indexer of DeepSeek-V3.2's sparse attention (DSA), which picks the keys a topk case keeps.

Per query t and key s, with H index heads of dim D (bench.problem.sparsity.Sparsity.indexer_dims):
    I[t, s] = sum_h w[t, h] * ReLU(q[t, h] . k[s])
one index key k[s] per token shared by the heads (it is what the model caches beside its latent), and per-head
weights w (the model projects them from the hidden state; here they are inputs like q and k). Every key the mask
leaves is scored; each query keeps its K highest (all of them where fewer are visible, the rest of its row -1).
Inputs are standard normal, w uniform in (0, 1), seeded: the check and every backend see the same selection.

Queries are scored in chunks, so the (H, chunk, Skv) scores stay under CHUNK_ELEMENTS whatever the length: the
indexer's memory is O(S) above its inputs, like a tiled kernel's, and its FLOPs are 2 * B * H * D per scored pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.problem.masks import Mask
from bench.problem.shapes import AttentionShape

CHUNK_ELEMENTS = 1 << 24  # scores held at once: 64 MiB in float32


@dataclass(frozen=True)
class IndexerInputs:
    q: torch.Tensor  # (B, H, Sq, D) index queries
    k: torch.Tensor  # (B, Skv, D) index keys, one per token, shared by the heads
    w: torch.Tensor  # (B, H, Sq) per-head weights


def make_indexer_inputs(shape: AttentionShape, device: torch.device | str = "cpu", seed: int = 0) -> IndexerInputs:
    """The indexer's inputs for a topk case, in its dtype, reproducible from `seed`."""
    heads, dim = shape.sparsity.indexer_dims(shape.n_heads, shape.head_dim)
    gen = torch.Generator(device=device).manual_seed(seed + 7919)  # apart from the attention inputs' stream
    B, Sq, Skv, dtype = shape.batch, shape.seq_q, shape.seq_kv, shape.torch_dtype
    q = torch.randn(B, heads, Sq, dim, generator=gen, device=device, dtype=dtype)
    k = torch.randn(B, Skv, dim, generator=gen, device=device, dtype=dtype)
    w = torch.rand(B, heads, Sq, generator=gen, device=device, dtype=dtype)
    return IndexerInputs(q, k, w)


def select(x: IndexerInputs, k: int, mask: Mask) -> torch.Tensor:
    """(B, Sq, K) int64: each query's K highest-scoring visible keys, ascending, -1 where fewer are visible."""
    B, H, Sq, _ = x.q.shape
    Skv = x.k.shape[1]
    rows = max(1, CHUNK_ELEMENTS // max(1, B * H * Skv))
    out = []
    for start in range(0, Sq, rows):
        q = x.q[:, :, start:start + rows]  # (B, H, c, D)
        scores = torch.einsum("bhqd,bkd->bhqk", q, x.k).relu_()  # (B, H, c, Skv)
        index = torch.einsum("bhqk,bhq->bqk", scores.float(), x.w[:, :, start:start + rows].float())  # (B, c, Skv)
        if mask.causal:  # this chunk's rows of the (Sq, Skv) mask, bottom-right aligned
            visible = mask.allows(torch.arange(start, start + q.shape[2], device=q.device).view(-1, 1) + Skv - Sq,
                                  torch.arange(Skv, device=q.device).view(1, -1))
            index = index.masked_fill(~visible, float("-inf"))
        top = index.topk(k, dim=-1)
        picked = torch.where(torch.isinf(top.values), -1, top.indices)  # a query with fewer than K visible keys
        out.append(picked.sort(dim=-1).values)  # ascending; the -1 padding first
    return torch.cat(out, dim=1)
