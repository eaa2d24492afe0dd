"""The tutorials' multi-head attention layer: W_Q, W_K, W_V, W_O around one `bench.attention` call.

GQA and MQA come from smaller K/V projections (n_kv_heads * head_dim outputs instead of n_heads * head_dim).
head_dim defaults to the tutorials' d_model / n_heads; models such as Qwen3 set it apart (head_dim * n_heads !=
d_model), and then W_Q is d_model -> Hq*D, W_K and W_V d_model -> Hkv*D, and W_O Hq*D -> d_model.

`make_layer` builds the layer a `scope="layer"` benchmark case times (bench.engine.runner; its input:
bench.reference.make_layer_input).
"""

from __future__ import annotations

import torch
from torch import nn

from bench.backends import attention, get_backend
from bench.counts.metrics import layer_d_model
from bench.problem.shapes import AttentionShape, ShapeError, check_heads, head_dim_for
from bench.reference import merge_heads, split_heads


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, *, head_dim: int | None = None,
                 bias: bool = True, backend: str = "sdpa") -> None:
        super().__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_heads(n_heads, self.n_kv_heads)
        if head_dim is None:
            head_dim = head_dim_for(d_model, n_heads)
        elif not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0:
            raise ShapeError(f"head_dim={head_dim!r} must be a positive integer")
        self.head_dim = head_dim
        get_backend(backend)  # fail at construction on an unknown name
        self.backend = backend
        q_dim, kv_dim = n_heads * head_dim, self.n_kv_heads * head_dim
        self.W_Q = nn.Linear(d_model, q_dim, bias=bias)
        self.W_K = nn.Linear(d_model, kv_dim, bias=bias)
        self.W_V = nn.Linear(d_model, kv_dim, bias=bias)
        self.W_O = nn.Linear(q_dim, d_model, bias=bias)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, *, causal: bool = False,
                window: int | None = None) -> torch.Tensor:
        """x (B, T, d_model) queries; memory (B, S, d_model) keys/values (defaults to x: self-attention)."""
        memory = x if memory is None else memory
        q = split_heads(self.W_Q(x), self.n_heads)  # (B, Hq, T, hs)
        k = split_heads(self.W_K(memory), self.n_kv_heads)  # (B, Hkv, S, hs)
        v = split_heads(self.W_V(memory), self.n_kv_heads)  # (B, Hkv, S, hs)
        y = attention(q, k, v, backend=self.backend, causal=causal, window=window)  # (B, Hq, T, hs)
        return self.W_O(merge_heads(y))  # (B, T, d_model)


def parameter_count(d_model: int, n_heads: int, n_kv_heads: int, bias: bool = True, head_dim: int | None = None) -> int:
    """W_Q and W_O are d x (Hq * D); W_K and W_V are d x (Hkv * D); D = d/Hq unless given."""
    head_dim = head_dim_for(d_model, n_heads) if head_dim is None else head_dim
    q_dim, kv_dim = n_heads * head_dim, n_kv_heads * head_dim
    weights = 2 * d_model * q_dim + 2 * d_model * kv_dim
    biases = q_dim + d_model + 2 * kv_dim if bias else 0  # W_Q's, W_O's (d_model outputs), W_K's and W_V's
    return weights + biases


def make_layer(shape: AttentionShape, backend: str, device: torch.device | str = "cpu",
               seed: int = 0) -> MultiHeadAttention:
    """The layer a layer-scope case times: d_model = bench.counts.metrics.layer_d_model(shape) (Hq * D, the reason is
    there), no biases (Llama, Mistral and Qwen3 have none), weights in the case's dtype on its device,
    reproducible from `seed`; `backend` computes its attention.

    Weights are N(0, 1/fan_in) (LeCun normal): Q, K, V from a standard-normal x then have unit variance, as the
    attention-alone check's inputs do, so the layer's check exercises the softmax as hard as that one does.
    """
    with torch.device("meta"):  # no default init: it would cost as much as drawing the weights twice
        layer = MultiHeadAttention(layer_d_model(shape), shape.n_heads, shape.n_kv_heads, head_dim=shape.head_dim,
                                   bias=False, backend=backend)
    layer = layer.to_empty(device=device).to(shape.torch_dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for linear in (layer.W_Q, layer.W_K, layer.W_V, layer.W_O):
            out_features, in_features = linear.weight.shape
            w = torch.randn(out_features, in_features, generator=gen, device=device, dtype=torch.float32)
            linear.weight.copy_(w * in_features**-0.5)
    return layer
