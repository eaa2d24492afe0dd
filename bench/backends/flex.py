"""FlexAttention, compiled: block masks for causal and window, GQA native.

torch.compile caches one graph per shape/dtype; the first call for a shape compiles (tens of seconds
on CPU), so callers must warm up before timing and report that first call apart.
"""

from __future__ import annotations

import functools
import warnings

import torch

from bench.backends.base import Unsupported


@functools.cache
def _compiled():
    import torch._dynamo.config as dynamo_config
    from torch.nn.attention.flex_attention import flex_attention

    # Past the recompile limit dynamo silently runs eager flex, which materialises the whole score
    # matrix: a sweep touches many shapes, so raise the limit and make hitting it an error instead.
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 512)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4096)
    dynamo_config.fail_on_recompile_limit_hit = True
    return torch.compile(flex_attention, dynamic=False)  # one specialised kernel per shape


@functools.lru_cache(maxsize=64)
def _block_mask(seq_q: int, seq_kv: int, is_causal: bool, window: int | None, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    off = seq_kv - seq_q

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + off

    def sliding(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + off) & (kv_idx > q_idx + off - window)

    def everything(b, h, q_idx, kv_idx):
        return q_idx >= 0

    mask_mod = sliding if window is not None else causal if is_causal else everything
    return create_block_mask(mask_mod, None, None, seq_q, seq_kv, device=device)


def flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                   window: int | None) -> torch.Tensor:
    Sq, Skv = q.shape[2], k.shape[2]
    # Even without a mask, a (full) block mask: with block_mask=None compiled flex on CPU keeps O(S^2)
    # intermediates alive, which is not what FlexAttention users pay.
    block_mask = _block_mask(Sq, Skv, causal, window, str(q.device))
    return run_flex(q, k, v, block_mask, (causal, window))


def run_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask, mask_key: object) -> torch.Tensor:
    """Compiled flex_attention under `block_mask` (GQA native). mask_key names the mask's structure: the first call
    of each (shapes, mask_key) is watched for torch's silent fallback to eager flex, later ones run bare."""
    gqa = k.shape[1] != q.shape[1]
    key = (q.shape, k.shape, q.dtype, str(q.device), q.requires_grad, mask_key)
    if key in _COMPILED_OK:  # checked once per shape below: keep the warnings machinery off the timed path
        return _compiled()(q, k, v, block_mask=block_mask, enable_gqa=gqa)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = _compiled()(q, k, v, block_mask=block_mask, enable_gqa=gqa)
        except (NotImplementedError, AssertionError) as err:
            raise Unsupported(f"flex: {str(err).splitlines()[0]}") from None
    if any("without torch.compile" in str(w.message) for w in caught):
        raise RuntimeError("flex: torch fell back to eager (unfused) flex_attention; refusing to report it")
    _COMPILED_OK.add(key)
    return out


_COMPILED_OK: set[tuple] = set()  # shapes whose call ran the compiled kernel (no eager fallback warning)
