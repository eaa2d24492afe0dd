"""Mask semantics shared by every backend and the reference.

With off = Skv - Sq (bottom-right alignment, as flash-attn >= 2.1 and decoding need):
  causal:     query i sees key j iff j <= i + off
  window(w):  query i sees key j iff i + off - w < j <= i + off   (itself and the w-1 keys before it)
"""

from __future__ import annotations

import torch


def visible(seq_q: int, seq_kv: int, causal: bool, window: int | None, device: torch.device | str = "cpu"
            ) -> torch.Tensor | None:
    """Boolean (Sq, Skv) matrix, True where query i may attend to key j; None when nothing is masked."""
    if not causal and window is None:
        return None
    off = seq_kv - seq_q
    i = torch.arange(seq_q, device=device).unsqueeze(1)  # (Sq, 1)
    j = torch.arange(seq_kv, device=device).unsqueeze(0)  # (1, Skv)
    ok = j <= i + off  # (Sq, Skv)
    if window is not None:
        ok &= j > i + off - window
    return ok


def visible_pairs(seq_q: int, seq_kv: int, causal: bool, window: int | None) -> int:
    """Exact number of (query, key) pairs that are not masked out."""
    if not causal and window is None:
        return seq_q * seq_kv
    off = seq_kv - seq_q
    total = 0
    for i in range(seq_q):
        hi = min(i + off, seq_kv - 1)
        lo = max(0, i + off - window + 1) if window is not None else 0
        total += max(0, hi - lo + 1)
    return total
