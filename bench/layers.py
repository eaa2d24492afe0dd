"""The tutorials' multi-head attention layer: W_Q, W_K, W_V, W_O around one `bench.attention` call.

GQA and MQA come from smaller K/V projections (n_kv_heads * head_dim outputs instead of d_model).
"""

from __future__ import annotations

import torch
from torch import nn

from bench.backends import attention, get_backend
from bench.shapes import check_heads, head_dim_for


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, n*hs) -> (B, n, T, hs). The transpose matters: viewing straight to (B, n, T, hs) mixes tokens."""
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)  # (B, n, T, hs)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, n, T, hs) -> (B, T, n*hs), the inverse of split_heads."""
    B, n, T, hs = x.shape
    return x.transpose(1, 2).reshape(B, T, n * hs)  # (B, T, C)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, *, bias: bool = True,
                 backend: str = "sdpa") -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_heads(n_heads, self.n_kv_heads)
        self.head_dim = head_dim_for(d_model, n_heads)
        get_backend(backend)  # fail at construction on an unknown name
        self.backend = backend
        kv_dim = self.n_kv_heads * self.head_dim
        self.W_Q = nn.Linear(d_model, d_model, bias=bias)
        self.W_K = nn.Linear(d_model, kv_dim, bias=bias)
        self.W_V = nn.Linear(d_model, kv_dim, bias=bias)
        self.W_O = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, *, causal: bool = False,
                window: int | None = None) -> torch.Tensor:
        """x (B, T, d_model) queries; memory (B, S, d_model) keys/values (defaults to x: self-attention)."""
        memory = x if memory is None else memory
        q = split_heads(self.W_Q(x), self.n_heads)  # (B, Hq, T, hs)
        k = split_heads(self.W_K(memory), self.n_kv_heads)  # (B, Hkv, S, hs)
        v = split_heads(self.W_V(memory), self.n_kv_heads)  # (B, Hkv, S, hs)
        y = attention(q, k, v, backend=self.backend, causal=causal, window=window)  # (B, Hq, T, hs)
        return self.W_O(merge_heads(y))  # (B, T, d_model)


def parameter_count(d_model: int, n_heads: int, n_kv_heads: int, bias: bool = True) -> int:
    """W_Q and W_O are d x d; W_K and W_V are d x (Hkv * d/Hq)."""
    kv_dim = n_kv_heads * head_dim_for(d_model, n_heads)
    weights = 2 * d_model * d_model + 2 * d_model * kv_dim
    biases = 2 * d_model + 2 * kv_dim if bias else 0
    return weights + biases
