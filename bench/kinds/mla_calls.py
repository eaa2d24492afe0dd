"""Multi-head latent attention (DeepSeek-V2/V3): a case's latent inputs and weights, the two forms' attention calls
built from them, and the float64 check of a backend on either form.

Per token the cache holds c (kv_lora_rank) and k_rope (rope_dim), shared by all Hq heads. Head h has
W_UK,h (qk_nope x rank) and W_UV,h (v_head_dim x rank); its query is [q_nope,h ; q_rope,h] (head_dim wide).
  expanded (prefill): K_h = [W_UK,h c ; k_rope], V_h = W_UV,h c; attention with D_qk = head_dim, D_v = v_head_dim.
  absorbed (decode):  q_lat,h = [W_UK,h^T q_nope,h ; q_rope,h] attends over [c ; k_rope] with V = c (a view of
                      the same cache: it is read once), then out_h = W_UV,h out_lat,h.
The two give the same scores: q_nope . (W_UK c) = (W_UK^T q_nope) . c. Both use the expanded form's scale
1/sqrt(head_dim); a backend scales by 1/sqrt(its q's width), so q_lat is pre-multiplied by
sqrt((rank + rope_dim) / head_dim), as real implementations fold the scale into the absorbed weights.

What is timed is the attention call alone, as FlashMLA and FlashInfer's MLA take it: the decompression (expanded)
and the absorption and W_UV (absorbed) are the model's projections, built untimed here; the check covers them,
since it compares the final (B, Hq, Sq, v_head_dim) output with the float64 expanded formula.

Inputs are standard normal; W_UK and W_UV are N(0, 1/rank), so K_nope and V have unit variance like an ordinary
case's K and V and the softmax is as far from degenerate as theirs. Weights are part of the case: one seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.backends import attention
from bench.problem.keepset import KeepSet
from bench.problem.shapes import AttentionShape
from bench.reference import TOLERANCES, Check, compare_to_reference, reference_attention


@dataclass(frozen=True)
class MlaInputs:
    """One MLA case's latent inputs and weights, float32 (exact in float64)."""

    c: torch.Tensor  # (B, Skv, rank): the latent
    k_rope: torch.Tensor  # (B, Skv, rope): the shared rotary key
    q_nope: torch.Tensor  # (B, Hq, Sq, nope)
    q_rope: torch.Tensor  # (B, Hq, Sq, rope)
    w_uk: torch.Tensor  # (Hq, nope, rank)
    w_uv: torch.Tensor  # (Hq, v_head_dim, rank)


def _need_mla(shape: AttentionShape) -> None:
    if shape.mla is None:
        raise ValueError(f"{shape} is not an MLA shape (mla_form is unset)")


def make_mla_inputs(shape: AttentionShape, device: torch.device | str = "cpu", seed: int = 0) -> MlaInputs:
    """The latent, the rotary key, the query and the weights of `shape`, reproducible from `seed`."""
    _need_mla(shape)
    gen = torch.Generator(device=device).manual_seed(seed)
    B, H, Sq, Skv = shape.batch, shape.n_heads, shape.seq_q, shape.seq_kv
    rank, rope, v = shape.mla.kv_lora_rank, shape.mla.rope_dim, shape.mla.v_head_dim
    nope = shape.head_dim - rope  # type: ignore[operator]

    def normal(*size: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(size, generator=gen, device=device, dtype=torch.float32) * scale

    return MlaInputs(c=normal(B, Skv, rank), k_rope=normal(B, Skv, rope), q_nope=normal(B, H, Sq, nope),
                     q_rope=normal(B, H, Sq, rope), w_uk=normal(H, nope, rank, scale=rank**-0.5),
                     w_uv=normal(H, v, rank, scale=rank**-0.5))


def call_tensors(shape: AttentionShape, x: MlaInputs, dtype: torch.dtype | None = None,
                 form: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) of the attention call of `form` (default: the shape's), in `dtype` (default: the shape's).

    expanded: q (B, Hq, Sq, head_dim), k (B, Hq, Skv, head_dim), v (B, Hq, Skv, v_head_dim).
    absorbed: q (B, Hq, Sq, rank + rope), k (B, 1, Skv, rank + rope), v = k[..., :rank] (a view: one cache)."""
    _need_mla(shape)
    dtype = dtype or shape.torch_dtype
    form = form or shape.mla.form  # type: ignore[union-attr]
    work = torch.float64 if dtype == torch.float64 else torch.float32
    c, k_rope, q_nope, q_rope, w_uk, w_uv = (t.to(work) for t in (x.c, x.k_rope, x.q_nope, x.q_rope, x.w_uk, x.w_uv))
    H = q_nope.shape[1]
    if form == "expanded":
        q = torch.cat([q_nope, q_rope], dim=-1)
        k_nope = torch.einsum("bsr,hnr->bhsn", c, w_uk)
        k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(-1, H, -1, -1)], dim=-1)
        v = torch.einsum("bsr,hvr->bhsv", c, w_uv)
        return q.to(dtype), k.to(dtype), v.to(dtype)
    if form != "absorbed":
        raise ValueError(f"form={form!r}; expected expanded or absorbed")
    rank = c.shape[-1]
    scale = ((rank + k_rope.shape[-1]) / shape.head_dim) ** 0.5  # keep the expanded form's 1/sqrt(head_dim)
    q = torch.cat([torch.einsum("bhqn,hnr->bhqr", q_nope, w_uk), q_rope], dim=-1) * scale
    kv = torch.cat([c, k_rope], dim=-1).unsqueeze(1).to(dtype)  # (B, 1, Skv, rank + rope): the cache as stored
    return q.to(dtype), kv, kv[..., :rank]


def finish(shape: AttentionShape, out: torch.Tensor, x: MlaInputs, form: str | None = None) -> torch.Tensor:
    """The call's output as the layer's (B, Hq, Sq, v_head_dim): absorbed outputs go through W_UV (in float32, or
    float64 for a float64 output, then back to the output's dtype, as the model's projection would)."""
    if (form or shape.mla.form) == "expanded":  # type: ignore[union-attr]
        return out
    work = torch.float64 if out.dtype == torch.float64 else torch.float32
    return torch.einsum("bhqr,hvr->bhqv", out.to(work), x.w_uv.to(out.device, work)).to(out.dtype)


def reference_mla(shape: AttentionShape, x: MlaInputs, sparse: KeepSet | None = None) -> torch.Tensor:
    """Float64 MLA on the CPU by the expanded formula (B, Hq, Sq, v_head_dim), whatever the shape's form (a sparse
    case's keep-set ANDed with the mask)."""
    cpu = MlaInputs(*(t.detach().to("cpu", torch.float64) for t in (x.c, x.k_rope, x.q_nope, x.q_rope, x.w_uk,
                                                                     x.w_uv)))
    q, k, v = call_tensors(shape, cpu, torch.float64, form="expanded")
    return reference_attention(q, k, v, mask=shape.mask, sparse=sparse)


def check_mla(backend: str, shape: AttentionShape, device: torch.device | str = "cpu", seed: int = 0,
              ref: torch.Tensor | None = None) -> Check:
    """Run `backend` on the shape's form and compare the final output with the float64 expanded formula (`ref`
    when the caller has it). Raises Unsupported as the backend does."""
    x = make_mla_inputs(shape, device, seed)
    q, k, v = call_tensors(shape, x)
    with torch.no_grad():
        out = attention(q, k, v, backend=backend, mask=shape.mask)
    if tuple(out.shape) != shape.out_shape:
        return Check(False, float("inf"), *TOLERANCES[q.dtype])
    return compare_to_reference(finish(shape, out, x), reference_mla(shape, x) if ref is None else ref)
