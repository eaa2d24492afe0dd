"""The float64 oracle every backend is checked against before it is timed.

Tolerances, per dtype, on |out - ref| <= atol + rtol * |ref| elementwise. Inputs are standard normal,
so outputs are convex combinations of O(1) values. The bounds sit a few times above the error of a
correct kernel computing in that dtype (one rounding of the inputs plus accumulations in the score and
the PV product), and far below the O(1) error of a wrong mask, scale or head mapping:
  fp32: 2e-4 absolute / 2e-4 relative  (fp32 eps 1.2e-7; accumulation order differs by kernel)
  bf16: 3e-2 / 3e-2                    (bf16 eps 7.8e-3: the inputs alone are rounded by ~4e-3)
  fp16: 4e-3 / 4e-3                    (fp16 eps 9.8e-4)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.backends import attention
from bench.masks import visible
from bench.shapes import AttentionShape

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-4, 2e-4),
    torch.bfloat16: (3e-2, 3e-2),
    torch.float16: (4e-3, 4e-3),
    torch.float64: (1e-10, 1e-10),
}


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                        window: int | None = None) -> torch.Tensor:
    """Float64 attention on the CPU, written independently of the backends' tricks."""
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    return _attention64(q, k, v, causal, window)


def _attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, window: int | None) -> torch.Tensor:
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    kv_head = torch.arange(Hq) // group  # query head i reads KV head i // (Hq / Hkv)
    k, v = k[:, kv_head], v[:, kv_head]  # (B, Hq, Skv, D)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / D**0.5  # (B, Hq, Sq, Skv)
    ok = visible(Sq, Skv, causal or window is not None, window)
    if ok is not None:
        scores = scores.masked_fill(~ok, float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v)  # (B, Hq, Sq, D)


def make_inputs(shape: AttentionShape, device: torch.device | str = "cpu", seed: int = 0,
                requires_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Standard-normal q, k, v for `shape`, reproducible from `seed`, made on the device directly."""
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(shape.q_shape, generator=gen, device=device, dtype=shape.torch_dtype)
    k = torch.randn(shape.kv_shape, generator=gen, device=device, dtype=shape.torch_dtype)
    v = torch.randn(shape.kv_shape, generator=gen, device=device, dtype=shape.torch_dtype)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))  # type: ignore[return-value]


@dataclass(frozen=True)
class Check:
    ok: bool
    max_abs_err: float
    atol: float
    rtol: float

    def describe(self) -> str:
        verdict = "within" if self.ok else "exceeds"
        return f"max |err| {self.max_abs_err:.3g} {verdict} tolerance (atol {self.atol:g}, rtol {self.rtol:g})"


def compare_to_reference(out: torch.Tensor, ref: torch.Tensor) -> Check:
    atol, rtol = TOLERANCES[out.dtype]
    diff = (out.detach().to("cpu", torch.float64) - ref).abs()
    finite = bool(torch.isfinite(diff).all())
    ok = finite and bool((diff <= atol + rtol * ref.abs()).all())
    err = float(diff.max()) if finite else float("inf")
    return Check(ok, err, atol, rtol)


# Gradients are compared relative to the largest reference gradient (they are sums over a whole
# row or column of the score matrix, so their scale grows with the sequence length). Measured worst
# case in bf16 on CPU: 1e-2; fp32: 5e-7.
GRAD_TOLERANCES: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def check_gradients(backend: str, shape: AttentionShape, device: torch.device | str = "cpu", seed: int = 0) -> Check:
    """Backward of `backend` against float64 autograd through the reference: dq, dk, dv."""
    q, k, v = make_inputs(shape, device, seed, requires_grad=True)
    grad_out = torch.randn(shape.q_shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    out = attention(q, k, v, backend=backend, causal=shape.causal, window=shape.window)
    grads = torch.autograd.grad(out, (q, k, v), grad_out.to(device, q.dtype))
    q64, k64, v64 = (t.detach().to("cpu", torch.float64).requires_grad_() for t in (q, k, v))
    ref_out = _attention64(q64, k64, v64, shape.causal, shape.window)
    refs = torch.autograd.grad(ref_out, (q64, k64, v64), grad_out)
    tol = GRAD_TOLERANCES[q.dtype]
    worst = 0.0
    for grad, ref in zip(grads, refs, strict=True):
        err = float((grad.to("cpu", torch.float64) - ref).abs().max() / max(1.0, float(ref.abs().max())))
        worst = max(worst, err if err == err else float("inf"))  # NaN counts as failure
    return Check(worst <= tol, worst, tol, 0.0)


def check_backend(backend: str, shape: AttentionShape, device: torch.device | str = "cpu",
                  seed: int = 0) -> Check:
    """Run `backend` on `shape` and compare with the float64 reference. Raises Unsupported as the backend does."""
    q, k, v = make_inputs(shape, device, seed)
    out = attention(q, k, v, backend=backend, causal=shape.causal, window=shape.window)
    if out.shape != q.shape:
        return Check(False, float("inf"), *TOLERANCES[q.dtype])
    return compare_to_reference(out, reference_attention(q, k, v, causal=shape.causal, window=shape.window))
