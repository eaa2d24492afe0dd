"""FLOP, byte and memory models as pure functions.

Conventions (bench/REFERENCE.md shows this docstring): FLOPs count query heads and only the visible (query, key)
pairs of the mask, 2 per pair and dim of QK^T (D_qk) and of PV (D_v): 2 * B * Hq * pairs * (D_qk + D_v), which is
4 * B * Hq * D * pairs when D_v = D_qk = D; backward is 2.5x forward.
Bytes are the minimum forward traffic: Q and O at Hq heads, K and V at Hkv heads, once each.
KV cache = 2 (K and V) x layers x Hkv x head_dim x tokens x batch x element size, tokens capped by a sliding window.
MLA (bench.kinds.mla_calls): the call's D_qk and D_v are the shape's qk_dim and value_dim; the absorbed form's V is the
first
kv_lora_rank columns of its K (one latent cache), read once: B * Skv * (rank + rope) elements; its cache per layer
is (rank + rope) x tokens x batch x element size. The projections around the call (decompression, absorption,
W_UV) are the model's, outside the timed call, and not counted.
A whole layer (scope="layer"): attention's FLOPs and bytes plus the projections' FLOPs and the weights' bytes
(layer_flops, layer_bytes; the conventions are above them).
Sparse attention (bench.problem.sparsity): useful FLOPs count the pairs the sparsity keeps within the mask; executed
FLOPs
count what the kernel computes (bench.counts.pairs: the whole matrix for a dense masked kernel, kept blocks whole
for a block-sparse one, K per query for a gather kernel) and, for topk, its indexer's forward; the efficiency of a
kernel is executed / useful. Bytes follow the useful rule: K and V only at the keys some query keeps.
"""

from __future__ import annotations

from bench.counts.pairs import executed_pairs, kept_keys, kept_pairs
from bench.problem.shapes import AttentionShape

ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
BWD_FLOP_FACTOR = 2.5  # backward = 2.5 x forward (FlashAttention's convention)


def attention_flops(shape: AttentionShape, pass_: str = "fwd") -> int:
    """Useful FLOPs: 2 * B * Hq * (D_qk + D_v) * visible pairs (QK^T and PV); masked-out work never counts, and a chunk
    mask's pairs are counted exactly. Score variants add none: a softcap's tanh, ALiBi's bias and a sink's exp are
    O(1) per pair against the 4 * D of the matmuls, elementwise work off the tensor cores that FLOP counts (and the
    FlashAttention papers' MFU) leave out, as they leave out the softmax's own exp; so one shape has one FLOP count
    and the variants' times compare directly."""
    return _with_backward(_per_pair(shape) * useful_pairs(shape), pass_)


def useful_pairs(shape: AttentionShape) -> int:
    """The (query, key) pairs per sequence and head that count: the mask's (its one rule, bench.problem.masks), and of
    those the sparsity's kept ones."""
    return kept_pairs(shape.sparsity, shape.mask, shape.seq_q, shape.seq_kv)


def _per_pair(shape: AttentionShape) -> int:
    return 2 * shape.batch * shape.n_heads * (shape.qk_dim + shape.value_dim)


def executed_flops(shape: AttentionShape, pass_: str, executes: str | None) -> int | None:
    """FLOPs one call of a kernel that `executes` so (bench.counts.pairs) computes: its pairs at the useful rule's
    cost per pair, the backward 2.5x the forward, plus a topk case's indexer (forward only); None when unknown."""
    pairs = executed_pairs(shape.sparsity, shape.mask, shape.seq_q, shape.seq_kv, executes)
    if pairs is None:
        return None
    return _with_backward(_per_pair(shape) * pairs, pass_) + indexer_flops(shape)


def indexer_dims(shape: AttentionShape) -> tuple[int, int]:
    """A topk case's indexer (heads, head dim): bench.problem.sparsity.Sparsity.indexer_dims."""
    return shape.sparsity.indexer_dims(shape.n_heads, shape.head_dim)


def indexer_flops(shape: AttentionShape) -> int:
    """A topk case's indexer (bench.problem.indexer): 2 * B * H * D per pair it scores, every pair the mask leaves (its
    ReLU,
    weights and top-K are elementwise and not counted); 0 for any other case."""
    if shape.sparsity.kind != "topk":
        return 0
    heads, dim = indexer_dims(shape)
    return 2 * shape.batch * heads * dim * shape.mask.pairs(shape.seq_q, shape.seq_kv)


def indexer_bytes(shape: AttentionShape) -> int:
    """A topk case's indexer inputs read once (index queries and weights at H heads, one index key per token)."""
    if shape.sparsity.kind != "topk":
        return 0
    heads, dim = indexer_dims(shape)
    return shape.batch * (heads * shape.seq_q * (dim + 1) + shape.seq_kv * dim) * ELEMENT_BYTES[shape.dtype]


def attention_bytes(shape: AttentionShape) -> int:
    """Minimum forward memory traffic: read Q, K, V and write O once (K and V at Hkv heads; absorbed MLA's V is
    part of its K, the latent cache, read once; under a sparsity only the keys some query keeps)."""
    s = shape
    e = ELEMENT_BYTES[s.dtype]
    keys = s.seq_kv if not s.sparsity.sparse else kept_keys(s.sparsity, s.mask, s.seq_q, s.seq_kv)
    q_and_o = s.batch * s.n_heads * s.seq_q * (s.qk_dim + s.value_dim)
    k_and_v = s.batch * s.n_kv_heads * keys * (s.qk_dim + (0 if s.absorbed else s.value_dim))
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


def latent_cache_bytes(layers: int, latent_dim: int, tokens: int, batch: int = 1, dtype: str = "bf16",
                       window: int | None = None) -> int:
    """MLA: layers x (kv_lora_rank + rope) x tokens x batch x element size, one latent shared by all heads."""
    if window is not None:
        tokens = min(tokens, window)
    return layers * latent_dim * tokens * batch * ELEMENT_BYTES[dtype]


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
        expanded = s.batch * s.n_heads * s.seq_kv * (s.qk_dim + s.value_dim) * e if s.n_kv_heads != s.n_heads else 0
        return 2 * score_matrix_bytes(s) + (2 * s.seq_q * s.seq_kv if s.causal else 0) + expanded
    out = s.batch * s.n_heads * s.seq_q * s.value_dim * e
    explicit = s.mask.kind not in ("none", "causal") or (s.causal and 1 < s.seq_q < s.seq_kv)
    explicit_mask = s.seq_q * s.seq_kv if explicit else 0
    return out + s.batch * s.n_heads * s.seq_q * 4 + explicit_mask


# --- a whole layer (scope="layer"): W_Q, W_K, W_V, attention, W_O ---------------------------------------------
# d_model defaults to layer_d_model(shape) = Hq * D, the width the runner's layer has
# (bench.kinds.mha_layer.make_layer).
# FLOPs: attention's useful FLOPs plus the four projections, 2 per multiply-add: x (B*S, d_model) times W_Q
# (d_model, Hq*D), W_K and W_V (d_model, Hkv*D), and attention's output (B*S, Hq*D) times W_O (Hq*D, d_model).
# fwd+bwd is 3.5x the forward for the whole layer, the convention attention's FLOPs use. A GEMM's own backward is
# 2x its forward (3x overall), so fwd+bwd slightly over-counts the projections' work; one factor keeps attention's
# share of the layer's FLOPs the same in both passes. Biases (none in make_layer's layer) are not counted.
# Bytes: attention's minimum traffic plus the four weight matrices read once; x and the layer's output are not
# counted, as attention's own count leaves out everything but Q, K, V and O.


def layer_d_model(shape: AttentionShape) -> int:
    """The d_model of a layer-scope case: Hq * D.

    A shape carries no d_model of its own. Hq * D is the tutorials' d_model and that of every preset here
    (Llama, Mistral, GPT, BERT, Qwen2.5: head_dim = d_model / n_heads); a model with head_dim != d_model / Hq
    (Qwen3) would need a d_model field on the shape before its layer could be benchmarked at its own width.
    """
    return shape.n_heads * shape.head_dim


def projection_flops(shape: AttentionShape, pass_: str = "fwd", d_model: int | None = None) -> int:
    """2 * B * S * d_model * (2 * Hq * D + 2 * Hkv * D): W_Q and W_O at Hq heads, W_K and W_V at Hkv heads."""
    d_model = layer_d_model(shape) if d_model is None else d_model
    fwd = 2 * shape.batch * shape.seq_q * d_model * (2 * shape.n_heads + 2 * shape.n_kv_heads) * shape.head_dim
    return _with_backward(fwd, pass_)


def layer_flops(shape: AttentionShape, pass_: str = "fwd", d_model: int | None = None) -> int:
    """Useful FLOPs of one layer call: attention's (visible pairs only) plus the projections'; fwd+bwd = 3.5x fwd."""
    return _with_backward(attention_flops(shape, "fwd") + projection_flops(shape, "fwd", d_model), pass_)


def layer_weight_bytes(shape: AttentionShape, d_model: int | None = None) -> int:
    """W_Q and W_O (d_model x Hq*D) and W_K and W_V (d_model x Hkv*D) in the case's dtype."""
    d_model = layer_d_model(shape) if d_model is None else d_model
    return 2 * d_model * (shape.n_heads + shape.n_kv_heads) * shape.head_dim * ELEMENT_BYTES[shape.dtype]


def layer_bytes(shape: AttentionShape, d_model: int | None = None) -> int:
    """Minimum forward traffic of a layer call: attention's (Q, K, V, O once each) plus the weights read once."""
    return attention_bytes(shape) + layer_weight_bytes(shape, d_model)


def _with_backward(fwd: int, pass_: str) -> int:
    if pass_ == "fwd":
        return fwd
    if pass_ == "fwd+bwd":
        return int(fwd * (1 + BWD_FLOP_FACTOR))
    raise ValueError(f"unknown pass {pass_!r}; expected fwd or fwd+bwd")
