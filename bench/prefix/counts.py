"""What a shared-prefix case costs, by formula (no torch): plain attention's FLOPs for both methods, and each
method's minimum memory traffic.

  flops          4 * B * Hq * D * pairs, pairs = each request's visible (query, key) pairs over its whole context
                 (bench.counts.metrics.attention_flops of the shape: the cascade computes the same pairs, split);
  plain_bytes    Q and O (B * Hq * Sq * D each) + K and V of every request's whole context (B * Hkv * (P + L) * D
                 each): the prefix's K/V is read once per request, B times;
  cascade_bytes  Q and O as plain + the prefix's K and V once (Hkv * P * D each) + every suffix's (B * Hkv * L * D);
                 the parts' partial outputs and log-sum-exps, which the merge reads back, are not counted (minimum
                 traffic: a fused cascade kernel keeps them on chip);
  kv_bytes       the K/V a step reads: plain B * (P + L) tokens, cascade P + B * L (times 2 * Hkv * D * element).
Element sizes are the dtype's (fp32 4, bf16/fp16 2).
"""

from __future__ import annotations

from bench.problem.shapes import AttentionShape

ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}
METHODS: tuple[str, ...] = ("plain", "cascade")


def suffix(shape: AttentionShape) -> int:
    """L: each request's own tokens after the shared prefix."""
    assert shape.prefix is not None, "a shared-prefix shape"
    return shape.seq_kv - shape.prefix


def prefix_flops(shape: AttentionShape) -> int:
    """Plain attention's useful FLOPs of the whole batch (both methods compute exactly these pairs)."""
    from bench.counts.metrics import attention_flops

    return attention_flops(shape, "fwd")


def kv_tokens(shape: AttentionShape, method: str) -> int:
    """The K/V tokens one call reads: B * (P + L) plain, P + B * L by cascade."""
    assert shape.prefix is not None and method in METHODS, (shape.prefix, method)
    if method == "plain":
        return shape.batch * shape.seq_kv
    return shape.prefix + shape.batch * suffix(shape)


def kv_bytes(shape: AttentionShape, method: str) -> int:
    return 2 * shape.n_kv_heads * shape.head_dim * kv_tokens(shape, method) * ELEMENT[shape.dtype]


def method_bytes(shape: AttentionShape, method: str) -> int:
    """Minimum traffic of one call by `method` (module docstring): Q and O, then the K/V it reads."""
    qo = 2 * shape.batch * shape.n_heads * shape.seq_q * shape.head_dim * ELEMENT[shape.dtype]
    return qo + kv_bytes(shape, method)
