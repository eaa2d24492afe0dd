"""Top-K sparse attention by gathering (DeepSeek-V3.2's DSA kernel, in torch ops): each query attends over the K keys
its keep-set selected (bench.problem.keepset.KeepSet.indices), the same keys for every head of its group.

Per chunk of queries, the selected K and V rows are gathered once per KV head, (B, Hkv, chunk, K, D), and each query
head of the group scores them: K per query, whatever the length, which is what makes it sparse. Slots a query left
empty (-1: it sees fewer than K keys) are masked out. The mask is already in the selection. Chunks keep the gathered
rows under CHUNK_ELEMENTS, so memory stays O(S x K) per chunk and O(S) overall. Scores and the softmax run in
float32 (as fused kernels accumulate), the output in the inputs' dtype. V may have another head dim than K, or be a
view of it (MLA's absorbed form: the latent read once).
"""

from __future__ import annotations

import torch

from bench.problem.keepset import KeepSet
from bench.problem.masks import Mask
from bench.problem.scores import Score

CHUNK_ELEMENTS = 1 << 23  # gathered K and V elements held at once: 32 MiB in float32


def topk_gather_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask, score: Score,
                          sparse: KeepSet) -> torch.Tensor:
    B, Hq, Sq, D = q.shape
    Hkv, Dv = k.shape[1], v.shape[3]
    group = Hq // Hkv  # query head i reads KV head i // group
    idx = sparse.indices  # (B, Sq, K), -1: an empty slot
    K = idx.shape[-1]
    empty = idx < 0
    rows = max(1, CHUNK_ELEMENTS // max(1, B * Hkv * K * (D + Dv)))
    out = []
    for start in range(0, Sq, rows):
        ids = idx[:, start:start + rows].clamp(min=0)  # (B, c, K)
        c = ids.shape[1]
        flat = ids.reshape(B, 1, c * K, 1)
        ks = k.gather(2, flat.expand(B, Hkv, c * K, D)).view(B, Hkv, c, K, D).float()
        vs = v.gather(2, flat.expand(B, Hkv, c * K, Dv)).view(B, Hkv, c, K, Dv).float()
        qs = q[:, :, start:start + c].reshape(B, Hkv, group, c, D).transpose(2, 3).float()  # (B, Hkv, c, g, D)
        s = (qs @ ks.transpose(-1, -2)) * D**-0.5  # (B, Hkv, c, g, K)
        s = s.masked_fill(empty[:, None, start:start + c, None, :], float("-inf"))
        o = s.softmax(-1) @ vs  # (B, Hkv, c, g, Dv)
        out.append(o.transpose(2, 3).reshape(B, Hq, c, Dv))
    return torch.cat(out, dim=2).to(q.dtype)  # (B, Hq, Sq, Dv)
