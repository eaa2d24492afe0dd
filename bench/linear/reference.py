"""The float64 oracle of linear attention: each method's recurrence itself, one token at a time, on the CPU.

Nothing here is chunked: a chunked kernel (transformers', flash-linear-attention's, bench.linear.backends') is
checked against the recurrence it claims to compute. Per sequence, value head h (reading key head h // group,
bench.linear.shape) and token t, with the state S (d_k x d_v) starting at zeros or at a given state:

gated DeltaNet (method "gdn"; Yang, Kautz and Hatamizadeh, "Gated Delta Networks", as Qwen3-Next runs it):
    q_t <- q_t / ||q_t|| / sqrt(d_k),   k_t <- k_t / ||k_t||      (L2 norm over d_k, per head)
    alpha_t = exp(g_t)                                             (g <= 0: a decay in log space)
    S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T
        = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    o_t = S_t^T q_t
  the state is decayed first, the decayed state's recall of k_t is corrected towards v_t by the step beta_t, and
  the output reads the updated state (the token sees itself). transformers 5.24's torch_recurrent_gated_delta_rule
  and torch_chunk_gated_delta_rule (use_qk_l2norm_in_kernel=True, as Qwen3-Next calls them) compute exactly this;
  they normalise with x * rsqrt(||x||^2 + 1e-6), a relative difference of 1e-6 / (2 ||x||^2) that standard-normal
  inputs (||x||^2 ~ d_k) put far below any tolerance here.

plain causal linear attention (method "linear"; g and beta are ignored):
    S_t = S_{t-1} + k_t v_t^T,   o_t = S_t^T q_t / sqrt(d_k)
  with no normalisation of any kind: no feature map, no L2 norm, no denominator (Katharopoulos et al.'s
  phi(q)^T sum phi(k) is left out). The 1/sqrt(d_k) is flash-linear-attention's default scale for its linear
  attention, and keeps o at the scale of gated DeltaNet's; o_t grows as sqrt(t) with standard-normal inputs.

Mamba-2's SSD (method "mamba2"; Dao and Gu, "Transformers are SSMs", the scan per head with a scalar A): per value
head h, with q = C, k = B (of key head h // group: B and C are shared by a group of heads), v = x, beta = dt and the
params A (per head) and D (per head):
    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T     (h: d_v x d_k, i.e. d_head x d_state)
    y_t = h_t C_t + D x_t
  with no normalisation and no scale. The state kept here is S = h^T (d_k x d_v, every method's layout), so
  S_t = exp(dt_t A) S_{t-1} + dt_t B_t x_t^T and y_t = S_t^T C_t + D x_t. The decay is formed from dt and A here (the
  definition), not read from the inputs' g (= dt A in float32, which the implementations do not read either).

Kimi Delta Attention (method "kda"; Kimi Linear, Moonshot AI 2025: gated DeltaNet with a per-channel decay):
    q_t, k_t L2-normalised and q_t scaled by 1/sqrt(d_k) as for gdn; alpha_t = exp(g_t), a vector of d_k decays
    S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T
        = Diag(alpha_t) S_{t-1} + beta_t k_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)^T
    o_t = S_t^T q_t
  row i of the state (key channel i) decays by alpha_t[i]; with every alpha_t[i] equal it is gdn.

A decode step is the same recurrence for one token from a given state, returning (o, the new state).

Tolerances (TOLERANCES): |out - ref| <= tol * (rms(ref) + |ref|) elementwise, the outputs and the state each
against their own rms (bench.reference's atol + rtol * |ref| with atol = rtol, the atol scaled by the values' rms),
because plain linear attention's outputs grow as sqrt(t): an absolute bound fit for gated DeltaNet's O(1) outputs
would be loose for short sequences and fail long ones. The reference reads the inputs as given (bf16 inputs
already rounded), so what a bound must cover is the kernel's arithmetic and its output's rounding. The bounds
sit well above what a correct kernel computing in that dtype reaches at the tests' shapes (T <= 256: about 1e-6 in
fp32, about 3e-3 in bf16, the output's own rounding) and far below the O(1) error of a wrong gate, head mapping or
chunk seam:
  fp32: 2e-4   (transformers and the torch paths compute in float32 at every input dtype)
  bf16: 3e-2   (the output rounded to bf16, 2^-9 relative; fla computes its chunks' products in bf16 too)
  fp16: 4e-3   (the output rounded to fp16, 2^-12 relative, likewise)
"""

from __future__ import annotations

import torch

TOLERANCES: dict[torch.dtype, float] = {torch.float32: 2e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def reference_prefill(method: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                      beta: torch.Tensor, state: torch.Tensor | None = None,
                      **params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every token of q, k (B, T, Hk, d_k), v (B, T, Hv, d_v), g (B, T, Hv; kda: B, T, Hv, d_k), beta (B, T, Hv)
    through `method`'s recurrence (module docstring) from `state` (B, Hv, d_k, d_v; None: zeros), mamba2 with its
    params A and D (Hv,): (o (B, T, Hv, d_v), the final state), float64 on the CPU."""
    q, k, v, g, beta = _prepared(method, q, k, v, g, beta)
    b, t, h, d_k = q.shape
    s = _state64(state, (b, h, d_k, v.shape[-1]))
    if method == "mamba2":
        a, d = (params[name].detach().to("cpu", torch.float64) for name in ("A", "D"))
        outputs = []
        for i in range(t):
            s, o = _ssd_step(s, q[:, i], k[:, i], v[:, i], beta[:, i], a, d)
            outputs.append(o)
        return torch.stack(outputs, dim=1), s
    outputs = []
    for i in range(t):
        s, o = _step(method, s, q[:, i], k[:, i], v[:, i], g[:, i], beta[:, i])
        outputs.append(o)
    return torch.stack(outputs, dim=1), s


def reference_decode(method: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                     beta: torch.Tensor, state: torch.Tensor,
                     **params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step (T = 1) from `state`: (o (B, 1, Hv, d_v), the new state), float64 on the CPU."""
    if q.shape[1] != 1:
        raise ValueError(f"a decode step takes one token per sequence, got {q.shape[1]}")
    return reference_prefill(method, q, k, v, g, beta, state, **params)


def error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / (rms(ref) + |ref|): the smallest tolerance `out` meets (module docstring)."""
    diff = (out.detach().to("cpu", torch.float64) - ref).abs()
    rms = ref.pow(2).mean().sqrt().clamp_min(torch.finfo(torch.float64).tiny)
    return float((diff / (rms + ref.abs())).max())


def within(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether `out` meets `ref` within `dtype`'s tolerance (module docstring)."""
    return error(out, ref) <= TOLERANCES[dtype]


def _prepared(method: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
              beta: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if method not in ("gdn", "linear", "mamba2", "kda"):
        raise ValueError(f"method={method!r} is unknown; expected gdn, linear, mamba2 or kda")
    q, k, v, g, beta = (x.detach().to("cpu", torch.float64) for x in (q, k, v, g, beta))
    if method in ("gdn", "kda"):
        q = q / q.norm(dim=-1, keepdim=True)
        k = k / k.norm(dim=-1, keepdim=True)
    if method != "mamba2":  # Mamba-2's C reads the state unscaled
        q = q * q.shape[-1] ** -0.5
    v_heads, k_heads = v.shape[2], k.shape[2]
    if v_heads % k_heads:
        raise ValueError(f"v heads {v_heads} are not a multiple of k heads {k_heads}")
    key_head = torch.arange(v_heads) // (v_heads // k_heads)  # value head h reads key head h // group
    return q[:, :, key_head], k[:, :, key_head], v, g, beta


def _state64(state: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor:
    if state is None:
        return torch.zeros(shape, dtype=torch.float64)
    if tuple(state.shape) != shape:
        raise ValueError(f"state shape {tuple(state.shape)} does not match {shape}")
    return state.detach().to("cpu", torch.float64)


def _step(method: str, s: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
          beta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # one token for every (sequence, value head): s (B, H, d_k, d_v), q and k (B, H, d_k), v (B, H, d_v), g and
    # beta (B, H). The products are matmuls (an outer product as (d_k x 1) @ (1 x d_v)), so FlopCounterMode counts
    # them: bench.linear.counts' recurrence formula is checked on this function.
    if method in ("gdn", "kda"):
        # alpha_t S_{t-1}: one decay per head (gdn), or one per key channel, row i of S by alpha_t[i] (kda)
        s = (g.exp()[..., None, None] if method == "gdn" else g.exp()[..., None]) * s
        recalled = (k.unsqueeze(-2) @ s).squeeze(-2)  # (alpha_t S_{t-1})^T k_t
        correction = beta.unsqueeze(-1) * (v - recalled)
        s = s + k.unsqueeze(-1) @ correction.unsqueeze(-2)
    else:
        s = s + k.unsqueeze(-1) @ v.unsqueeze(-2)
    return s, (q.unsqueeze(-2) @ s).squeeze(-2)


def _ssd_step(s: torch.Tensor, c: torch.Tensor, b: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor,
              d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Mamba-2 for one token: s (B, H, d_k, d_v) = h^T, c and b (B, H, d_k), x (B, H, d_v), dt (B, H), a and d (H,).
    # The write dt B x^T and the read S^T C are matmuls (FlopCounterMode counts 4 d_k d_v); the decay and D x are not.
    s = torch.exp(dt * a)[..., None, None] * s + (dt[..., None] * b).unsqueeze(-1) @ x.unsqueeze(-2)
    return s, (c.unsqueeze(-2) @ s).squeeze(-2) + d[:, None] * x
