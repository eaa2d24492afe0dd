"""The float64 oracle every backend is checked against before it is timed.

Tolerances, per dtype, on |out - ref| <= atol + rtol * |ref| elementwise. Inputs are standard normal,
so outputs are convex combinations of O(1) values. The bounds sit a few times above the error of a
correct kernel computing in that dtype (one rounding of the inputs plus accumulations in the score and
the PV product), and far below the O(1) error of a wrong mask, scale or head mapping:
  fp32: 2e-4 absolute / 2e-4 relative  (fp32 eps 1.2e-7; accumulation order differs by kernel)
  bf16: 3e-2 / 3e-2                    (bf16 eps 7.8e-3: the inputs alone are rounded by ~4e-3)
  fp16: 4e-3 / 4e-3                    (fp16 eps 9.8e-4)

A whole layer (W_Q, W_K, W_V, attention, W_O: bench.kinds.mha_layer) has its own reference (reference_layer) and bounds
(LAYER_TOLERANCES, LAYER_GRAD_TOLERANCES), with how they were chosen beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.backends import attention, variant_values
from bench.counts.metrics import layer_d_model
from bench.problem.keepset import KeepSet
from bench.problem.masks import Mask, grid
from bench.problem.scores import Score
from bench.problem.shapes import AttentionShape


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, n*hs) -> (B, n, T, hs). The transpose matters: viewing straight to (B, n, T, hs) mixes tokens."""
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)  # (B, n, T, hs)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, n, T, hs) -> (B, T, n*hs), the inverse of split_heads."""
    B, n, T, hs = x.shape
    return x.transpose(1, 2).reshape(B, T, n * hs)  # (B, T, C)


def make_layer_input(shape: AttentionShape, device: torch.device | str = "cpu", seed: int = 0,
                     requires_grad: bool = False) -> torch.Tensor:
    """Standard-normal x (B, S, d_model) for a layer-scope case, reproducible from `seed`."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape.batch, shape.seq_q, layer_d_model(shape), generator=gen, device=device,
                    dtype=shape.torch_dtype)
    return x.requires_grad_(requires_grad)


TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-4, 2e-4),
    torch.bfloat16: (3e-2, 3e-2),
    torch.float16: (4e-3, 4e-3),
    torch.float64: (1e-10, 1e-10),
}


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask | str | None = None,
                        score: Score | str | None = None, causal: bool = False, window: int | None = None,
                        chunk: int | None = None, softcap: float | None = None, alibi: bool = False,
                        sinks: torch.Tensor | None = None, sparse: KeepSet | None = None,
                        allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Float64 attention on the CPU, written independently of the backends' tricks; the mask and the score variant
    given as `bench.attention` takes them (whole, or by keywords), with the semantics bench.problem.masks and
    bench.problem.scores
    define; a sparse case's keep-set (bench.problem.keepset) ANDed with the mask: the dense formula under both.
    allowed: a boolean (Sq, Skv) the caller built itself (a draft tree's, walked from its parent list), ANDed in."""
    mask, score = variant_values(q, mask, score, causal=causal, window=window, chunk=chunk, softcap=softcap,
                                 alibi=alibi, sinks=sinks)
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    return _attention64(q, k, v, mask, score, sparse, None if allowed is None else allowed.cpu())


def _attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Mask, score: Score,
                 sparse: KeepSet | None = None, allowed: torch.Tensor | None = None) -> torch.Tensor:
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    # query head i = h * group + g reads KV head h = i // (Hq / Hkv); K and V are never expanded to Hq heads (a
    # 128-head MLA decode at 64k would need tens of GB in float64), only the scores are Hq wide
    qg = q.reshape(B, Hkv, group, Sq, D)
    scores = torch.einsum("bhgqd,bhkd->bhgqk", qg, k).reshape(B, Hq, Sq, Skv) / D**0.5  # (B, Hq, Sq, Skv)
    scores = score.apply(scores)  # softcap, then ALiBi (float64 here)
    ok = mask.visible(Sq, Skv)
    if sparse is not None:  # the keep-set, built independently of the mask (bench.problem.keepset), and the mask
        p, j = grid(Sq, Skv)
        kept = sparse.tokens.cpu() if sparse.indices is not None else sparse.allows(p, j).unsqueeze(0)
        ok = kept.unsqueeze(1) if ok is None else kept.unsqueeze(1) & ok  # (B|1, 1, Sq, Skv)
    if allowed is not None:
        ok = allowed if ok is None else allowed & ok
    if ok is not None:
        scores = scores.masked_fill(~ok, float("-inf"))
    if not score.sinks:
        probs = scores.softmax(-1)
    else:  # the sink's exp joins the denominator; the row's max includes it, for a stable exp
        sink = score.sink_logits.detach().to("cpu", torch.float64).view(1, Hq, 1, 1)
        top = torch.maximum(scores.amax(-1, keepdim=True), sink)
        e = (scores - top).exp()
        probs = e / ((sink - top).exp() + e.sum(-1, keepdim=True))
    probs = probs.reshape(B, Hkv, group, Sq, Skv)
    return torch.einsum("bhgqk,bhkd->bhgqd", probs, v).reshape(B, Hq, Sq, v.shape[-1])  # (B, Hq, Sq, D_v)


def case_variants(shape: AttentionShape, device: torch.device | str = "cpu") -> tuple[Mask, Score]:
    """A swept case's mask and score values, as `attention` and the reference take them: the score's sink logits
    seeded (bench.problem.scores.sink_logits), so the check and every backend see the same ones."""
    return shape.mask, shape.score.with_logits(shape.n_heads, device)


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


def compare_to_reference(out: torch.Tensor, ref: torch.Tensor,
                         tolerances: dict[torch.dtype, tuple[float, float]] | None = None) -> Check:
    """Elementwise |out - ref| <= atol + rtol * |ref| with the dtype's bounds (TOLERANCES unless given)."""
    atol, rtol = (TOLERANCES if tolerances is None else tolerances)[out.dtype]
    diff = (out.detach().to("cpu", torch.float64) - ref).abs()
    finite = bool(torch.isfinite(diff).all())
    ok = finite and bool((diff <= atol + rtol * ref.abs()).all())
    err = float(diff.max()) if finite else float("inf")
    return Check(ok, err, atol, rtol)


# Gradients are compared relative to the largest reference gradient (they are sums over a whole
# row or column of the score matrix, so their scale grows with the sequence length). Measured worst
# case in bf16 on CPU: 1e-2; fp32: 5e-7.
GRAD_TOLERANCES: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def check_gradients(backend: str, shape: AttentionShape, device: torch.device | str = "cpu", seed: int = 0,
                    sparse: KeepSet | None = None) -> Check:
    """Backward of `backend` against float64 autograd through the reference: dq, dk, dv (a sparse case's keep-set
    given to both)."""
    q, k, v = make_inputs(shape, device, seed, requires_grad=True)
    grad_out = torch.randn(shape.out_shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    mask, score = case_variants(shape, device)
    out = attention(q, k, v, backend=backend, mask=mask, score=score, sparse=sparse)
    grads = torch.autograd.grad(out, (q, k, v), grad_out.to(device, q.dtype))
    q64, k64, v64 = (t.detach().to("cpu", torch.float64).requires_grad_() for t in (q, k, v))
    ref_out = _attention64(q64, k64, v64, mask, score, sparse)
    refs = torch.autograd.grad(ref_out, (q64, k64, v64), grad_out)
    tol = GRAD_TOLERANCES[q.dtype]
    worst = 0.0
    for grad, ref in zip(grads, refs, strict=True):
        err = float((grad.to("cpu", torch.float64) - ref).abs().max() / max(1.0, float(ref.abs().max())))
        worst = max(worst, err if err == err else float("inf"))  # NaN counts as failure
    return Check(worst <= tol, worst, tol, 0.0)


def check_backend(backend: str, shape: AttentionShape, device: torch.device | str = "cpu",
                  seed: int = 0, sparse: KeepSet | None = None) -> Check:
    """Run `backend` on `shape` and compare with the float64 reference (a sparse case's keep-set given to both).
    Raises Unsupported as the backend does."""
    q, k, v = make_inputs(shape, device, seed)
    mask, score = case_variants(shape, device)
    out = attention(q, k, v, backend=backend, mask=mask, score=score, sparse=sparse)
    if out.shape != q.shape:
        return Check(False, float("inf"), *TOLERANCES[q.dtype])
    return compare_to_reference(out, reference_attention(q, k, v, mask=mask, score=score, sparse=sparse))


# --- the whole layer (scope="layer"): W_Q, W_K, W_V around the attention, W_O after it -----------------------


def _layer_params64(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().to("cpu", torch.float64) for name, p in layer.named_parameters()}


def _layer64(layer: torch.nn.Module, x: torch.Tensor, params: dict[str, torch.Tensor], causal: bool,
             window: int | None) -> torch.Tensor:
    """The layer's forward in float64 from `params` (named like layer.named_parameters()), attention by the
    reference: the layer's own code never runs, only its geometry (n_heads, n_kv_heads) is read."""
    def project(name: str, t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(t, params[f"{name}.weight"], params.get(f"{name}.bias"))

    q = split_heads(project("W_Q", x), layer.n_heads)  # (B, Hq, S, D)
    k = split_heads(project("W_K", x), layer.n_kv_heads)  # (B, Hkv, S, D)
    v = split_heads(project("W_V", x), layer.n_kv_heads)
    return project("W_O", merge_heads(_attention64(q, k, v, Mask(causal, window), Score())))  # (B, S, d_model)


def reference_layer(layer: torch.nn.Module, x: torch.Tensor, *, causal: bool = False,
                    window: int | None = None) -> torch.Tensor:
    """Float64 self-attention layer on the CPU: the same weights (as the layer holds them, already rounded to its
    dtype) and x, with the float64 reference attention in place of the layer's backend."""
    return _layer64(layer, x.detach().to("cpu", torch.float64), _layer_params64(layer), causal, window)


# A layer's check uses compare_to_reference's rule (|out - ref| <= atol + rtol * |ref|) with its own bounds.
# bench.kinds.mha_layer.make_layer draws N(0, 1/fan_in) weights, so Q, K, V have unit variance like attention's check
# inputs, and W_O keeps the output at the scale of attention's: the absolute part stays meaningful. What the
# projections add: Q, K and V are rounded to the dtype (attention's check gets them exact), attention's output is
# rounded again before W_O and the layer's output after it, and W_Q..W_O sum over d_model (4096 for Llama-3-8B)
# instead of D (fp32 accumulation in every CPU and CUDA kernel used here, so that part is small). Measured worst
# case (CPU; tiny to Llama-3-8B geometries, S 32-512, naive/sdpa-math/sdpa-flash; none, causal, window) against
# attention's own bounds: fp32 uses 1.4% of them, bf16 78%, fp16 91% (naive, which keeps its probabilities in the
# dtype, is the worst). So: attention's bounds for fp32 and twice them for bf16 and fp16, which leaves the same
# ~2x margin attention's bounds have. A missing or misplaced mask, a wrong scale or head mapping moves the output
# by O(its scale) and is still caught; in fp32 so is an attention 1% off.
LAYER_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-4, 2e-4),
    torch.bfloat16: (6e-2, 6e-2),
    torch.float16: (8e-3, 8e-3),
    torch.float64: (1e-10, 1e-10),
}


# The layer's gradients (x and the four weights) are compared as attention's are, each relative to its largest
# reference value; the weights' gradients sum over every token (B * S of them) on top of attention's sums. Measured
# worst case on the geometries above (S up to 1024 for Llama-3-8B's, 2048 for a 4-head one): fp32 6e-6, bf16 4.4e-2
# (naive, dW_K), fp16 4.8e-3: about 1.5x attention's bounds. The layer's are a bit over 2x that worst case; a broken
# backward is off by O(1).
LAYER_GRAD_TOLERANCES: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.bfloat16: 1e-1, torch.float16: 1e-2}


def check_layer_gradients(layer: torch.nn.Module, shape: AttentionShape, device: torch.device | str = "cpu",
                          seed: int = 0) -> Check:
    """Backward of the layer (its backend's attention inside) against float64 autograd through reference_layer:
    d x and d W for every weight, each relative to its largest reference value."""
    x = make_layer_input(shape, device, seed, requires_grad=True)
    params = dict(layer.named_parameters())
    out = layer(x, causal=shape.causal, window=shape.mask.window)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    grads = torch.autograd.grad(out, (x, *params.values()), grad_out.to(device, out.dtype))
    x64 = x.detach().to("cpu", torch.float64).requires_grad_()
    params64 = {name: p.requires_grad_() for name, p in _layer_params64(layer).items()}
    ref_out = _layer64(layer, x64, params64, shape.causal, shape.mask.window)
    refs = torch.autograd.grad(ref_out, (x64, *params64.values()), grad_out)
    tol = LAYER_GRAD_TOLERANCES[x.dtype]
    worst = 0.0
    for grad, ref in zip(grads, refs, strict=True):
        err = float((grad.to("cpu", torch.float64) - ref).abs().max() / max(1e-30, float(ref.abs().max())))
        worst = max(worst, err if err == err else float("inf"))  # NaN counts as failure
    return Check(worst <= tol, worst, tol, 0.0)
