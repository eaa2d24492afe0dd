"""The textbook formula, as the tutorials write it: it materialises the Sq x Skv score matrix on purpose."""

from __future__ import annotations

import torch

from bench.masks import visible
from bench.scores import alibi_bias, softmax_with_sinks


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                    window: int | None, chunk: int | None = None, softcap: float | None = None,
                    alibi: bool = False, sinks: torch.Tensor | None = None) -> torch.Tensor:
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    if Hkv != Hq:  # GQA/MQA: query head i reads KV head i // (Hq / Hkv)
        k = k.repeat_interleave(Hq // Hkv, dim=1)  # (B, Hq, Skv, D)
        v = v.repeat_interleave(Hq // Hkv, dim=1)  # (B, Hq, Skv, D)
    scores = (q @ k.transpose(-2, -1)) * D**-0.5  # (B, Hq, Sq, Skv)
    if softcap is not None:  # Gemma-2: before the mask and the bias
        scores = softcap * torch.tanh(scores / softcap)
    if alibi:
        scores = scores + alibi_bias(Hq, Sq, Skv, q.device, scores.dtype)
    ok = visible(Sq, Skv, causal, window, q.device, chunk)  # (Sq, Skv) or None
    if ok is not None:
        scores = scores.masked_fill(~ok, float("-inf"))
    probs = softmax_with_sinks(scores, sinks)  # (B, Hq, Sq, Skv)
    return probs @ v  # (B, Hq, Sq, D)
