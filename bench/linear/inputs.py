"""The inputs of a linear-attention call, drawn for a shape (bench.linear.shape.LinearShape), seeded.

q, k, v are standard normal in the shape's dtype. The gate g is in log space, g = log(alpha) with alpha uniform in
(0.9, 1), and is float32 at every dtype, as Qwen3-Next computes it (-exp(A_log) * softplus(a + dt_bias), in
float32); a decay that slow keeps a state across several chunks, so the inter-chunk path of a chunked kernel carries
real weight in a check (a trained model's faster decays only make the state forget sooner). beta = sigmoid(N(0, 1))
in the shape's dtype, in (0, 1). The plain linear method takes g and beta too and ignores them, so that every
implementation takes the same inputs.

kda draws g per key channel, (B, T, v_heads, d_k), each element as gdn's. mamba2 draws the step dt log-uniform in
(0.001, 0.1) and A per head uniform in (-16, -1) (Mamba-2's initialisation ranges: dt_min, dt_max and A_init_range),
both float32, and carries them as g = dt * A (the log decay, <= 0, computed in float32 as transformers computes it)
and beta = dt (the step that scales the written x B^T), with `params` A (v_heads,) and D (v_heads,), the skip,
uniform in (0.5, 1.5) (Mamba-2 initialises it to ones; drawn so that a head's D read from another head shows). q, k, v
are C, B and x (bench.linear.shape). A method's params reach every call as keyword arguments (`params`), {} for the
others.

A prefill starts from no state (None: zeros) unless one is given. A decode step's state is float32 (transformers
and flash-linear-attention keep it so at every dtype); drawn here as N(0, 1/d_k) when none is given: its values
do not change the step's time, and a check passes the state the reference reached after a prefix instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.linear.shape import LinearShape
from bench.problem.shapes import DTYPE_ATTRS

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LinearInputs:
    """One call's tensors (layout: bench.linear.shape); `state` is the state the call starts from, None for zeros."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    state: torch.Tensor | None = None
    params: dict[str, torch.Tensor] = field(default_factory=dict)  # per-head constants (mamba2's A and D)

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        """(q, k, v, g, beta): the positional arguments every implementation takes."""
        return (self.q, self.k, self.v, self.g, self.beta)


def torch_dtype(name: str) -> torch.dtype:
    """'fp32' | 'bf16' | 'fp16' -> the torch dtype."""
    import torch

    return getattr(torch, DTYPE_ATTRS[name])


def make_inputs(shape: LinearShape, device: str = "cpu", seed: int = 0,
                state: torch.Tensor | None = None) -> LinearInputs:
    """The inputs of one call of `shape` (shape.tokens new tokens per sequence), on `device`; a decode step gets
    `state` (cast to float32 on `device`) or a drawn one, a prefill gets `state` as given (None: from zeros)."""
    import torch

    gen = torch.Generator().manual_seed(seed)  # drawn on the CPU: the same values on every device
    dtype = torch_dtype(shape.dtype)
    b, t = shape.batch, shape.tokens

    def normal(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=gen)

    q = normal(b, t, shape.k_heads, shape.d_k)
    k = normal(b, t, shape.k_heads, shape.d_k)
    v = normal(b, t, shape.v_heads, shape.d_v)
    params: dict[str, torch.Tensor] = {}
    if shape.method == "mamba2":
        dt = torch.exp(math.log(1e-3) + math.log(100) * torch.rand(b, t, shape.v_heads, generator=gen))
        a = -1 - 15 * torch.rand(shape.v_heads, generator=gen)
        params = {"A": a.to(device), "D": (0.5 + torch.rand(shape.v_heads, generator=gen)).to(device)}
        g, beta = dt * a, dt
    else:
        gate = (b, t, shape.v_heads, shape.d_k) if shape.method == "kda" else (b, t, shape.v_heads)
        g = torch.log(0.9 + 0.1 * torch.rand(*gate, generator=gen))
        beta = torch.sigmoid(normal(b, t, shape.v_heads))
    if state is None and shape.phase == "decode":
        state = normal(*shape.state_shape) * shape.d_k**-0.5
    if state is not None:
        state = state.to(device, torch.float32)
    q, k, v = (x.to(device, dtype) for x in (q, k, v))
    beta = beta.to(device, torch.float32 if shape.method == "mamba2" else dtype)  # dt is float32, as g
    return LinearInputs(q, k, v, g.to(device), beta, state, params)
