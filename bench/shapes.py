"""The vocabulary of attention shapes: sizes, variant (MHA/GQA/MQA), dtype and mask, validated once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from bench.errors import InputError

Variant = Literal["mha", "gqa", "mqa"]
MaskKind = Literal["none", "causal", "window"]

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}
MASKS: tuple[str, ...] = ("none", "causal", "window")


class ShapeError(InputError):
    """An impossible shape; the message names the field and the rule it breaks."""


def variant_of(n_heads: int, n_kv_heads: int) -> Variant:
    """MHA iff Hkv == Hq; MQA iff Hkv == 1; GQA otherwise (Hq % Hkv == 0 is checked by the caller)."""
    if n_kv_heads == n_heads:
        return "mha"
    return "mqa" if n_kv_heads == 1 else "gqa"


def check_heads(n_heads: int, n_kv_heads: int) -> None:
    _positive(n_heads=n_heads, n_kv_heads=n_kv_heads)
    if n_kv_heads > n_heads:
        raise ShapeError(f"n_kv_heads={n_kv_heads} exceeds n_heads={n_heads}")
    if n_heads % n_kv_heads:
        raise ShapeError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")


def head_dim_for(d_model: int, n_heads: int) -> int:
    """d_model split evenly over the heads (the tutorials' d_k = d_model / h)."""
    _positive(d_model=d_model, n_heads=n_heads)
    if d_model % n_heads:
        raise ShapeError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return d_model // n_heads


def parse_mask(text: str) -> tuple[MaskKind, int | None]:
    """'none' | 'causal' | 'window:256' -> (kind, window)."""
    kind, _, size = text.strip().partition(":")
    if kind == "window":
        if not size:
            raise ShapeError("mask 'window' needs a size, e.g. window:256")
        try:
            w = int(size)
        except ValueError:
            raise ShapeError(f"window size {size!r} is not an integer") from None
        _positive(window=w)
        return "window", w
    if kind in ("none", "causal") and not size:
        return kind, None  # type: ignore[return-value]
    raise ShapeError(f"unknown mask {text!r}; expected none, causal or window:<size>")


def mask_label(mask: MaskKind, window: int | None) -> str:
    return f"window:{window}" if mask == "window" else mask


def _positive(**sizes: object) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ShapeError(f"{name}={value!r} must be a positive integer")


@dataclass(frozen=True)
class AttentionShape:
    """One attention call: q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D)."""

    batch: int
    seq_q: int
    seq_kv: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    dtype: str = "fp32"  # fp32 | bf16 | fp16
    mask: MaskKind = "none"
    window: int | None = None  # keys a query sees, itself included; only with mask="window"

    def __post_init__(self) -> None:
        _positive(batch=self.batch, seq_q=self.seq_q, seq_kv=self.seq_kv, head_dim=self.head_dim)
        check_heads(self.n_heads, self.n_kv_heads)
        if self.dtype not in DTYPES:
            raise ShapeError(f"dtype={self.dtype!r} is unknown; expected one of {', '.join(DTYPES)}")
        if self.mask not in MASKS:
            raise ShapeError(f"mask={self.mask!r} is unknown; expected one of {', '.join(MASKS)}")
        if self.mask == "window":
            if self.window is None:
                raise ShapeError("mask='window' needs a positive window size")
            _positive(window=self.window)
        elif self.window is not None:
            raise ShapeError(f"window={self.window} given with mask={self.mask!r}; use mask='window'")
        if self.causal and self.seq_q > self.seq_kv:
            raise ShapeError(
                f"seq_q={self.seq_q} > seq_kv={self.seq_kv} with a {self.mask} mask leaves the first "
                "queries with no visible key (masks are bottom-right aligned)"
            )

    @property
    def variant(self) -> Variant:
        return variant_of(self.n_heads, self.n_kv_heads)

    @property
    def causal(self) -> bool:
        return self.mask in ("causal", "window")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def mask_label(self) -> str:
        return mask_label(self.mask, self.window)

    @property
    def q_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.n_heads, self.seq_q, self.head_dim)

    @property
    def kv_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.n_kv_heads, self.seq_kv, self.head_dim)
