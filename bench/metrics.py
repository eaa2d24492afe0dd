"""FLOP, byte and memory models as pure functions.

Conventions (the README's Reference states them too): FLOPs count query heads and only the visible (query, key)
pairs of the mask, 4 per pair and head dim (QK^T and PV, a multiply and an add each); backward is 2.5x forward.
Bytes are the minimum forward traffic: Q and O at Hq heads, K and V at Hkv heads, once each.
KV cache = 2 (K and V) x layers x Hkv x head_dim x tokens x batch x element size, tokens capped by a sliding window.
"""

from __future__ import annotations

from bench.masks import visible_pairs
from bench.shapes import AttentionShape

ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
BWD_FLOP_FACTOR = 2.5  # backward = 2.5 x forward (FlashAttention's convention)


def attention_flops(shape: AttentionShape, pass_: str = "fwd") -> int:
    """Useful FLOPs: 4 * B * Hq * D * visible pairs (QK^T and PV, 2 each); masked-out work never counts."""
    pairs = visible_pairs(shape.seq_q, shape.seq_kv, shape.causal, shape.window)
    fwd = 4 * shape.batch * shape.n_heads * shape.head_dim * pairs
    if pass_ == "fwd":
        return fwd
    if pass_ == "fwd+bwd":
        return int(fwd * (1 + BWD_FLOP_FACTOR))
    raise ValueError(f"unknown pass {pass_!r}; expected fwd or fwd+bwd")


def attention_bytes(shape: AttentionShape) -> int:
    """Minimum forward memory traffic: read Q, K, V and write O once (K and V at Hkv heads)."""
    e = ELEMENT_BYTES[shape.dtype]
    q_and_o = 2 * shape.batch * shape.n_heads * shape.seq_q * shape.head_dim
    k_and_v = 2 * shape.batch * shape.n_kv_heads * shape.seq_kv * shape.head_dim
    return (q_and_o + k_and_v) * e


def score_matrix_bytes(shape: AttentionShape) -> int:
    """The Sq x Skv matrix per query head that naive attention materialises, in the input dtype."""
    return shape.batch * shape.n_heads * shape.seq_q * shape.seq_kv * ELEMENT_BYTES[shape.dtype]


def kv_cache_bytes(layers: int, n_kv_heads: int, head_dim: int, tokens: int, batch: int = 1, dtype: str = "bf16",
                   window: int | None = None) -> int:
    """2 (K and V) x layers x Hkv x D x tokens x batch x element size; a sliding window caps the tokens."""
    if window is not None:
        tokens = min(tokens, window)
    return 2 * layers * n_kv_heads * head_dim * tokens * batch * ELEMENT_BYTES[dtype]


def model_mem_bytes(shape: AttentionShape, memory: str, pass_: str = "fwd") -> int | None:
    """Analytic peak memory of one forward call above its inputs; None for fwd+bwd, which has no model here.

    memory is the backend's trait: "materialising" (the Sq x Skv scores and probabilities alive together, the
    bool mask and its negation, K/V expanded to Hq heads for GQA) or "tiled" (flash-style: the output and a
    float32 log-sum-exp per query row, O(S), plus an explicit mask where the kernel needs one).
    """
    if pass_ != "fwd":
        return None
    s = shape
    e = ELEMENT_BYTES[s.dtype]
    if memory == "materialising":
        expanded = 2 * s.batch * s.n_heads * s.seq_kv * s.head_dim * e if s.n_kv_heads != s.n_heads else 0
        return 2 * score_matrix_bytes(s) + (2 * s.seq_q * s.seq_kv if s.causal else 0) + expanded
    out = s.batch * s.n_heads * s.seq_q * s.head_dim * e
    explicit_mask = s.seq_q * s.seq_kv if (s.mask == "window" or (s.causal and 1 < s.seq_q < s.seq_kv)) else 0
    return out + s.batch * s.n_heads * s.seq_q * 4 + explicit_mask
