"""The flash-attn package (Dao-AILab), CUDA only, fp16/bf16 (its registry traits). Its layout is (B, S, H, D)."""

from __future__ import annotations

import torch

from bench.backends.base import Unsupported


def flash_attn_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                         window: int | None) -> torch.Tensor:
    try:
        from flash_attn import flash_attn_func
    except ImportError as err:
        raise Unsupported(f"flash-attn: package not importable ({err}); pip install 'attnbench[flash]' "
                          "on a CUDA machine") from None
    if q.shape[-1] > 256 or q.shape[-1] % 8:
        raise Unsupported(f"flash-attn: head_dim must be a multiple of 8 up to 256, not {q.shape[-1]}")
    # window w = itself and the w-1 keys before it; flash-attn counts the keys to the left.
    window_size = (window - 1, 0) if window is not None else (-1, -1)
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),  # (B, S, H, D)
                          causal=causal or window is not None, window_size=window_size)
    return out.transpose(1, 2)  # (B, Hq, Sq, D)
