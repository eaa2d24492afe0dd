"""The registry of attention backends and the one public entry point, `attention`."""

from __future__ import annotations

import torch

from bench.backends import sdpa
from bench.backends.base import Backend, Unsupported
from bench.backends.flash_attn import flash_attn_attention
from bench.backends.flex import flex_attention
from bench.backends.naive import naive_attention
from bench.shapes import ShapeError, check_heads

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in [
        Backend("naive", naive_attention, "textbook softmax(QK^T/sqrt(D))V, materialises the score matrix"),
        Backend("sdpa", sdpa.make("sdpa"), "torch SDPA, torch's automatic kernel choice"),
        Backend("sdpa-math", sdpa.make("sdpa-math"), "torch SDPA forced to the math (reference) kernel"),
        Backend("sdpa-flash", sdpa.make("sdpa-flash"), "torch SDPA forced to its FlashAttention kernel"),
        Backend("sdpa-efficient", sdpa.make("sdpa-efficient"), "torch SDPA forced to memory-efficient"),
        Backend("sdpa-cudnn", sdpa.make("sdpa-cudnn"), "torch SDPA forced to cuDNN attention"),
        Backend("flex", flex_attention, "torch.compile(flex_attention) with block masks"),
        Backend("flash-attn", flash_attn_attention, "flash_attn.flash_attn_func (CUDA only)"),
    ]
}


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D), one dtype and device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ShapeError(f"{name} must be 4-D (B, H, S, D), got shape {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ShapeError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if q.shape[0] != k.shape[0]:
        raise ShapeError(f"batch of q ({q.shape[0]}) != batch of k/v ({k.shape[0]})")
    if q.shape[3] != k.shape[3]:
        raise ShapeError(f"head_dim of q ({q.shape[3]}) != head_dim of k/v ({k.shape[3]})")
    check_heads(q.shape[1], k.shape[1])
    if not (q.dtype == k.dtype == v.dtype):
        raise ShapeError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ShapeError(f"q, k, v devices differ: {q.device}, {k.device}, {v.device}")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, backend: str, causal: bool = False,
              window: int | None = None) -> torch.Tensor:
    """Attention with q (B, Hq, Sq, D), k/v (B, Hkv, Skv, D) -> (B, Hq, Sq, D), scale 1/sqrt(D).

    Masks are bottom-right aligned (see bench.masks); a window implies causal. Raises Unsupported
    when `backend` cannot run these inputs here, and never falls back to another kernel.
    """
    impl = get_backend(backend)
    check_inputs(q, k, v)
    if window is not None and (not isinstance(window, int) or window <= 0):
        raise ShapeError(f"window={window!r} must be a positive integer")
    causal = causal or window is not None
    if causal and q.shape[2] > k.shape[2]:
        raise ShapeError(f"seq_q={q.shape[2]} > seq_kv={k.shape[2]} with a causal mask leaves queries "
                         "with no visible key")
    return impl.fn(q, k, v, causal=causal, window=window)


__all__ = ["BACKENDS", "Backend", "Unsupported", "attention", "get_backend"]
