"""Mask semantics shared by every backend and the reference.

With off = Skv - Sq (bottom-right alignment, as flash-attn >= 2.1 and decoding need):
  causal:     query i sees key j iff j <= i + off
  window(w):  query i sees key j iff i + off - w < j <= i + off   (itself and the w-1 keys before it)
  chunk(C):   query i sees key j iff j <= i + off and floor((i + off) / C) == floor(j / C)   (Llama-4's chunked
              local attention: the keys are cut into blocks of C from key 0, a query sees its own block up to itself)
"""

from __future__ import annotations

import torch


def visible(seq_q: int, seq_kv: int, causal: bool, window: int | None, device: torch.device | str = "cpu",
            chunk: int | None = None) -> torch.Tensor | None:
    """Boolean (Sq, Skv) matrix, True where query i may attend to key j; None when nothing is masked.
    A window or a chunk implies causal."""
    if not causal and window is None and chunk is None:
        return None
    off = seq_kv - seq_q
    i = torch.arange(seq_q, device=device).unsqueeze(1)  # (Sq, 1)
    j = torch.arange(seq_kv, device=device).unsqueeze(0)  # (1, Skv)
    ok = j <= i + off  # (Sq, Skv)
    if window is not None:
        ok &= j > i + off - window
    if chunk is not None:
        ok &= (i + off) // chunk == j // chunk
    return ok


def visible_pairs(seq_q: int, seq_kv: int, causal: bool, window: int | None, chunk: int | None = None) -> int:
    """Exact number of (query, key) pairs that are not masked out."""
    if not causal and window is None and chunk is None:
        return seq_q * seq_kv
    off = seq_kv - seq_q
    total = 0
    for i in range(seq_q):
        hi = min(i + off, seq_kv - 1)
        lo = max(0, i + off - window + 1) if window is not None else 0
        if chunk is not None:  # the query's own chunk starts at the multiple of C at or below i + off
            lo = max(lo, (i + off) // chunk * chunk)
        total += max(0, hi - lo + 1)
    return total
