"""The flash-attn package (Dao-AILab), CUDA only, fp16/bf16 (its registry traits). Its layout is (B, S, H, D).

Variants: softcap (flash-attn >= 2.6's softcap=) and ALiBi (alibi_slopes=, fp32 (Hq,) slopes; flash-attn adds
-m_h * |i + off - j|, the convention of bench.problem.scores), each where the installed version's flash_attn_func takes
it.
"""

from __future__ import annotations

import inspect

import torch

from bench.backends.base import Unsupported
from bench.problem.masks import Mask
from bench.problem.scores import Score, alibi_slopes


def flash_attn_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask,
                         score: Score) -> torch.Tensor:
    try:
        from flash_attn import flash_attn_func
    except ImportError as err:
        raise Unsupported(f"flash-attn: package not importable ({err}); pip install 'attnbench[flash]' "
                          "on a CUDA machine") from None
    if q.shape[-1] > 256 or q.shape[-1] % 8:
        raise Unsupported(f"flash-attn: head_dim must be a multiple of 8 up to 256, not {q.shape[-1]}")
    kwargs: dict = {}
    takes = inspect.signature(flash_attn_func).parameters
    for name, wanted in (("softcap", score.softcap is not None), ("alibi_slopes", score.alibi)):
        if wanted and name not in takes:
            raise Unsupported(f"flash-attn: this version's flash_attn_func has no {name}= argument")
    if score.softcap is not None:
        kwargs["softcap"] = score.softcap
    if score.alibi:
        kwargs["alibi_slopes"] = torch.tensor(alibi_slopes(q.shape[1]), device=q.device, dtype=torch.float32)
    # window w = itself and the w-1 keys before it; flash-attn counts the keys to the left.
    window_size = (mask.window - 1, 0) if mask.window is not None else (-1, -1)
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),  # (B, S, H, D)
                          causal=mask.causal, window_size=window_size, **kwargs)
    return out.transpose(1, 2)  # (B, Hq, Sq, D)
