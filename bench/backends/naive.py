"""The textbook formula, as the tutorials write it: it materialises the Sq x Skv score matrix on purpose (and under a
sparsity computes every pair, then masks: the baseline that computes everything)."""

from __future__ import annotations

import torch

from bench.problem.keepset import KeepSet
from bench.problem.masks import Mask
from bench.problem.scores import Score


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask, score: Score,
                    sparse: KeepSet | None = None) -> torch.Tensor:
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    if Hkv != Hq:  # GQA/MQA: query head i reads KV head i // (Hq / Hkv)
        k = k.repeat_interleave(Hq // Hkv, dim=1)  # (B, Hq, Skv, D)
        v = v.repeat_interleave(Hq // Hkv, dim=1)  # (B, Hq, Skv, D)
    scores = (q @ k.transpose(-2, -1)) * D**-0.5  # (B, Hq, Sq, Skv)
    scores = score.apply(scores)  # softcap, ALiBi: before the mask
    ok = mask.visible(Sq, Skv, q.device) if sparse is None else sparse.tokens.unsqueeze(1)  # (Sq, Skv), (B|1, 1, ..)
    if ok is not None:
        scores = scores.masked_fill(~ok, float("-inf"))
    probs = score.softmax(scores)  # (B, Hq, Sq, Skv), sinks in the denominator
    return probs @ v  # (B, Hq, Sq, D)
