"""The registry of attention backends and the one public entry point, `attention`.

Adding a backend: one module with its function (q, k, v, *, causal, window) -> out, and one line in BACKENDS
with its traits. Everything else (the sweeps' CPU lists, the memory model, the claims, the figures' colours)
reads the traits here.
"""

from __future__ import annotations

import torch

from bench.backends import outside, sdpa
from bench.backends.base import Backend, Unsupported
from bench.backends.flash_attn import flash_attn_attention
from bench.backends.flex import flex_attention
from bench.backends.naive import naive_attention
from bench.errors import InputError
from bench.shapes import DTYPE_NAMES, ShapeError, check_heads

CUDA = ("cuda",)
HALF = ("bf16", "fp16")
PADDED = ("padded", "paged-gather")  # sdpa's forced kernels: a padded batch with a padding mask

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in [
        Backend("naive", naive_attention, "textbook softmax(QK^T/sqrt(D))V, materialises the score matrix",
                "materialising", "#555555", "o", layouts=("per-sequence", "paged-gather")),
        Backend("sdpa", sdpa.make("sdpa"), "torch SDPA, torch's automatic kernel choice", "tiled", "#1f77b4", "s",
                layouts=("nested", "paged-gather")),
        Backend("sdpa-math", sdpa.make("sdpa-math"), "torch SDPA forced to the math (reference) kernel",
                "materialising", "#9467bd", "D", layouts=PADDED),
        Backend("sdpa-flash", sdpa.make("sdpa-flash"), "torch SDPA forced to its FlashAttention kernel", "tiled",
                "#d62728", "^", layouts=PADDED),
        Backend("sdpa-efficient", sdpa.make("sdpa-efficient"), "torch SDPA forced to memory-efficient", "tiled",
                "#ff7f0e", "v", devices=CUDA, layouts=PADDED),
        Backend("sdpa-cudnn", sdpa.make("sdpa-cudnn"), "torch SDPA forced to cuDNN attention", "tiled", "#8c564b",
                "P", devices=CUDA, layouts=PADDED),
        Backend("flex", flex_attention, "torch.compile(flex_attention) with block masks", "tiled", "#2ca02c", "*",
                layouts=("packed", "paged-mask"), compiles=True),
        Backend("flash-attn", flash_attn_attention, "flash_attn.flash_attn_func (CUDA only)", "tiled", "#e377c2",
                "h", devices=CUDA, dtypes=HALF, layouts=("varlen", "paged-table")),
    ]
}


class UnknownBackend(InputError):
    """A backend name the registry does not know."""


def get_backend(name: str) -> Backend:
    """A registered backend, or one from outside (MODULE:FUNCTION, or an `attnbench.backends` entry point's name:
    bench.backends.outside), resolved on first use; UnknownBackend (or the outside one's error) otherwise."""
    if name in BACKENDS:
        return BACKENDS[name]
    found = outside.resolve(name)
    if found is None:
        raise UnknownBackend(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}, an installed "
                             f"{outside.ENTRY_POINT_GROUP} entry point, or MODULE:FUNCTION")
    return found


def backends_for(device: str) -> tuple[str, ...]:
    """The registered backends that can run on `device`, in registry order."""
    return tuple(name for name, b in BACKENDS.items() if device in b.devices)


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
    if why := impl.unsupported_reason(q.device.type, DTYPE_NAMES.get(q.dtype, str(q.dtype))):
        raise Unsupported(why)
    return impl.fn(q, k, v, causal=causal, window=window)


__all__ = ["BACKENDS", "Backend", "Unsupported", "attention", "backends_for", "get_backend"]
