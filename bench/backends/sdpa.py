"""torch.nn.functional.scaled_dot_product_attention: automatic choice, or one kernel forced.

A forced kernel runs alone (sdpa_kernel with one backend), so torch cannot fall back to another;
GQA goes through enable_gqa and K/V are never expanded behind the caller's back.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.backends.base import Unsupported
from bench.problem.keepset import KeepSet
from bench.problem.masks import Mask
from bench.problem.scores import Score, alibi_bias

KERNELS: dict[str, SDPBackend | None] = {
    "sdpa": None,
    "sdpa-math": SDPBackend.MATH,
    "sdpa-flash": SDPBackend.FLASH_ATTENTION,
    "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
}


TORCH_SOURCE = re.compile(r"\s*\(Triggered internally at [^)]*\)")


def _mask_args(q: torch.Tensor, k: torch.Tensor, mask: Mask, score: Score, sparse: KeepSet | None = None) -> dict:
    """SDPA's one additive mask: ALiBi's bias with the mask in it, a boolean mask, or is_causal where that is exact.
    Its variants trait lists what fits in it (alibi, chunk); the rest never reaches here. A keep-set is a boolean
    mask (1 or B, 1, Sq, Skv) with the mask in it (a sparse call has no score variant)."""
    Sq, Skv = q.shape[2], k.shape[2]
    if sparse is not None:
        return {"attn_mask": sparse.tokens.unsqueeze(1)}
    if score.alibi:  # ALiBi's bias as an additive float mask (1, Hq, Sq, Skv) in q's dtype (torch requires it)
        bias = alibi_bias(q.shape[1], Sq, Skv, q.device).to(q.dtype)  # built in fp32, rounded once
        ok = mask.visible(Sq, Skv, q.device)
        return {"attn_mask": (bias if ok is None else bias.masked_fill(~ok, float("-inf"))).unsqueeze(0)}
    if mask.kind == "window" and mask.window >= Skv:  # a window over every key is the causal mask, exactly
        mask = Mask(causal=True)
    if not mask.causal or Sq == 1 and mask.kind == "causal":  # a single query sees the whole cache under causal
        return {}
    if mask.kind != "causal":  # a window, a chunk: the boolean mask, built once per shape as a model builds it
        return {"attn_mask": _visible(mask, Sq, Skv, str(q.device))}  # once per forward, not in every layer
    if Sq == Skv:  # torch's is_causal is top-left aligned, which equals bottom-right only here
        return {"is_causal": True}
    from torch.nn.attention.bias import causal_lower_right  # here: importing it imports torch._dynamo (2 s)

    return {"attn_mask": causal_lower_right(Sq, Skv)}


@functools.lru_cache(maxsize=2)  # a run times one case at a time; a 16k x 16k boolean mask is 256 MiB
def _visible(mask: Mask, seq_q: int, seq_kv: int, device: str) -> torch.Tensor | None:
    return mask.visible(seq_q, seq_kv, device)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask, score: Score,
                   name: str = "sdpa", sparse: KeepSet | None = None) -> torch.Tensor:
    kwargs = _mask_args(q, k, mask, score, sparse)
    if k.shape[1] != q.shape[1]:
        kwargs["enable_gqa"] = True
    return run_sdpa(name, q, k, v, kwargs)


def run_sdpa(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kwargs: dict) -> torch.Tensor:
    """scaled_dot_product_attention(q, k, v, **kwargs) on backend `name`'s kernel; Unsupported, with torch's
    reasons, when that kernel refuses these inputs."""
    kernel = KERNELS.get(name)  # a backend outside this table (a padded serving layout of its own): torch's choice
    try:
        return _call(kernel, q, k, v, kwargs)
    except RuntimeError as err:
        if "No viable backend" not in str(err) and "No available kernel" not in str(err):
            raise
        first = str(err).splitlines()[0]
    # On CUDA torch explains each refusal in a warning: ask again, listening (kept off the hot path).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(RuntimeError):
            _call(kernel, q, k, v, kwargs)
    # torch's C++ source locations say nothing to a reader of the reason, nor does a header left empty by them
    said = [TORCH_SOURCE.sub("", str(w.message)).strip() for w in caught]
    why = "; ".join(m for m in said if m and not m.endswith(":")) or first
    raise Unsupported(f"{name}: {why}")


def _call(kernel: SDPBackend | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kwargs: dict) -> torch.Tensor:
    if kernel is None:
        return F.scaled_dot_product_attention(q, k, v, **kwargs)
    with sdpa_kernel([kernel]):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def make(name: str):
    return functools.partial(sdpa_attention, name=name)
