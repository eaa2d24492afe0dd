"""FLOPs and bytes of linear attention, counted from the algorithms' definitions. Pure Python.

Notation: B batch, T a prefill's tokens (shape.tokens), C the chunk, Hk key heads, Hv value heads, d_k, d_v; FLOPs
are 2 per multiply-add of a product (an outer product k v^T counts 2 d_k d_v, as a (d_k x 1) @ (1 x d_v) matmul
does), summed over every sequence and token.

Chunked prefill (chunk_flops: the matmul products, per sequence and token):
  gdn     Hv * (4 C d_k + 2 C d_v + 6 d_k d_v)
          per chunk and value head, the chunked algorithm transformers' torch_chunk_gated_delta_rule runs (the
          Gated DeltaNet paper's chunkwise form, a UT transform): beta K K^T and Q K^T (2 C^2 d_k each), the
          intra-chunk scores times the corrected values (2 C^2 d_v), and against the state carried in, the decayed
          keys' recall, the queries' read and the state update (2 C d_k d_v each);
  linear  Hk * 2 C d_k + Hv * (2 C d_v + 4 d_k d_v)
          the textbook chunk form (bench.linear.backends.torch_linear_chunk): Q K^T once per key head, its masked
          scores times V, Q S and K^T V per value head; the causal mask's zero half of each C x C block is counted,
          as the matmul computes it.
  mamba2  Hv * (2 C d_k + 2 C d_v + 4 d_k d_v), plus per sequence Hv * 2 (N + 1)^2 d_k d_v with N = T / C chunks
          transformers' mamba2_chunk_scan (the SSD paper's chunked algorithm; d_k = d_state, d_v = d_head): per chunk
          and value head (B and C repeated to the value heads first) C B^T (2 C^2 d_k), the masked scores times x
          (2 C^2 d_v), each chunk's state B^T x (2 C d_k d_v) and the chunk's read of the state carried in C S
          (2 C d_k d_v); the states carried between chunks are one dense (N + 1) x (N + 1) decay matrix times every
          chunk's state (an einsum, quadratic in the chunks: it is what that code computes, not a sequential scan);
  kda     Hv * (2 C d_k + 4 C d_v + 6 d_k d_v)
          transformers' chunk_kimi_delta_attention: per chunk and value head the UT transform's products with the
          betas' values and decayed keys (2 C^2 d_v + 2 C^2 d_k), the intra-chunk scores times the corrected values
          (2 C^2 d_v), and against the state carried in the decayed queries' read, the decayed keys' recall and the
          state update (2 C d_k d_v each).
  and chunk_solve_flops: gdn's two unit-lower-triangular C x C solves per chunk (the UT transform, against d_v and
  d_k right-hand columns), Hv * (C - 1) * (d_k + d_v) per sequence and token; 0 for linear and mamba2. A solve is no
  matmul to FlopCounterMode, so it is counted apart. kda's work that is no matmul, likewise: its two C x C blocks of
  decay-weighted products over d_k (beta K K^T and Q K^T with a decay per key channel, which does not factor into
  one matmul: transformers forms them as elementwise products summed over d_k, 2 C^2 d_k each per chunk) and the
  forward substitution that inverts the UT triangle (a row loop: sum over rows i < C of i^2 multiply-adds), Hv *
  (4 C d_k + (C - 1)(2 C - 1) / 3) per sequence and token. flash-linear-attention inverts the triangle instead and
  multiplies by the inverse (more FLOPs, better on a GPU): these counts are transformers' algorithm, not fla's.
Recurrence (recurrent_flops; a decode step is one token), per sequence and token:
  gdn     Hv * 6 d_k d_v: S^T k, the rank-one update k (beta (v - S^T k))^T and the output S^T q; kda the same;
  linear  Hv * 4 d_k d_v: the update k v^T and the output S^T q; mamba2 the same (dt B x^T and S^T C; D x is
          elementwise).

Left out, as torch.utils.flop_counter.FlopCounterMode leaves out all elementwise work: the L2 norms and the
1/sqrt(d_k) scale of q and k, the gate's exp and cumulative sums, the C x C decay masks and the causal mask, beta's
scaling of k and v, the subtractions v - S^T k, the additions of the intra- and inter-chunk terms and of an update
into the state, and the recurrence's decay alpha S: per token and value head the recurrence's elementwise work is
2 d_k d_v for gdn (decay and add, a third of its products) and d_k d_v for linear (the add). transformers'
torch_recurrent_gated_delta_rule writes its products as elementwise multiplies and sums, so FlopCounterMode counts
none of its work (nor of recurrent_kimi_delta_attention's, nor of mamba2_selective_state_update's update, only its
read S^T C, a bmm); the counts here are the products they compute all the same.

Bytes. The recurrent state is float32 at any model dtype (transformers and fla keep it so): B x Hv x d_k x d_v x 4
per layer. A layer also keeps its short causal convolution's state over q, k and v: (conv_kernel - 1) x channels,
channels = 2 Hk d_k + Hv d_v (Qwen3-Next's layout), in the model's dtype (bench.models.linear keeps the same
rules). A decode step reads the recurrent state once and writes it once, and that dominates its traffic:
decode_bytes is those two passes plus the token's inputs and output (token_bytes: q, k, v, beta in the model's dtype
and g in float32, o out; mamba2's dt is its g and beta, float32, read once; kda's g is per key channel); the
convolution runs outside the timed call, so its state is in state_bytes but not in decode_bytes.
"""

from __future__ import annotations

from bench.linear.shape import LinearShape

STATE_BYTES = 4  # the recurrent state's element: float32
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
GATE_BYTES = 4  # g is float32 at any dtype (bench.linear.inputs)


def chunk_flops(shape: LinearShape) -> int:
    """The chunked prefill's matmul FLOPs (module docstring), whole chunks; a decode shape has none."""
    if shape.phase != "prefill":
        raise ValueError(f"{shape.label}: a decode step is not chunked (recurrent_flops counts it)")
    c, d_k, d_v = shape.chunk, shape.d_k, shape.d_v
    per_sequence = 0
    if shape.method == "gdn":
        per_token = shape.v_heads * (4 * c * d_k + 2 * c * d_v + 6 * d_k * d_v)
    elif shape.method == "mamba2":
        per_token = shape.v_heads * (2 * c * d_k + 2 * c * d_v + 4 * d_k * d_v)
        per_sequence = shape.v_heads * 2 * (shape.tokens // c + 1) ** 2 * d_k * d_v
    elif shape.method == "kda":
        per_token = shape.v_heads * (2 * c * d_k + 4 * c * d_v + 6 * d_k * d_v)
    else:
        per_token = shape.k_heads * 2 * c * d_k + shape.v_heads * (2 * c * d_v + 4 * d_k * d_v)
    return shape.batch * (shape.tokens * per_token + per_sequence)


def chunk_solve_flops(shape: LinearShape) -> int:
    """gdn's triangular solves in the chunked prefill (module docstring); 0 for plain linear attention."""
    if shape.phase != "prefill":
        raise ValueError(f"{shape.label}: a decode step is not chunked")
    c = shape.chunk
    if shape.method == "kda":
        return shape.batch * shape.tokens * shape.v_heads * (4 * c * shape.d_k + (c - 1) * (2 * c - 1) // 3)
    if shape.method != "gdn":
        return 0
    return shape.batch * shape.tokens * shape.v_heads * (c - 1) * (shape.d_k + shape.d_v)


def recurrent_flops(shape: LinearShape) -> int:
    """The recurrence's product FLOPs over shape.tokens (T for a prefill run token by token, 1 for a decode step)."""
    per_token = (6 if shape.method in ("gdn", "kda") else 4) * shape.d_k * shape.d_v
    return shape.batch * shape.tokens * shape.v_heads * per_token


def recurrent_state_bytes(shape: LinearShape) -> int:
    """The batch's recurrent state for one layer: B x Hv x d_k x d_v float32."""
    return shape.batch * shape.v_heads * shape.d_k * shape.d_v * STATE_BYTES


def conv_channels(shape: LinearShape) -> int:
    """The short convolution's channels: q, k and v, 2 Hk d_k + Hv d_v."""
    return 2 * shape.k_heads * shape.d_k + shape.v_heads * shape.d_v


def state_bytes(shape: LinearShape, conv_kernel: int) -> int:
    """What one layer keeps for the batch: the recurrent state plus the convolution's (conv_kernel - 1) x channels
    past inputs in the model's dtype (module docstring)."""
    if not isinstance(conv_kernel, int) or isinstance(conv_kernel, bool) or conv_kernel < 1:
        raise ValueError(f"conv_kernel={conv_kernel!r} must be a positive integer")
    conv = shape.batch * (conv_kernel - 1) * conv_channels(shape) * ELEMENT_BYTES[shape.dtype]
    return recurrent_state_bytes(shape) + conv


def token_bytes(shape: LinearShape) -> int:
    """One token's inputs read and output written, one sequence (module docstring): q, k, v and o in the model's
    dtype, beta too (mamba2: none apart from dt), g in float32 (kda: d_k per head; mamba2: dt)."""
    element = ELEMENT_BYTES[shape.dtype]
    qkvo = element * (2 * shape.k_heads * shape.d_k + 2 * shape.v_heads * shape.d_v)
    if shape.method == "mamba2":
        return qkvo + GATE_BYTES * shape.v_heads
    gate = shape.v_heads * (shape.d_k if shape.method == "kda" else 1)
    return qkvo + element * shape.v_heads + GATE_BYTES * gate


def decode_bytes(shape: LinearShape) -> int:
    """The minimum traffic of one decode step (every sequence's token): the recurrent state read and written once,
    and the token's inputs and output (token_bytes)."""
    return 2 * recurrent_state_bytes(shape) + shape.batch * token_bytes(shape)
