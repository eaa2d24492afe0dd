"""The inputs of a linear-attention call, drawn for a shape (bench.linear.shape.LinearShape), seeded.

q, k, v are standard normal in the shape's dtype. The gate g is in log space, g = log(alpha) with alpha uniform in
(0.9, 1), and is float32 at every dtype, as Qwen3-Next computes it (-exp(A_log) * softplus(a + dt_bias), in
float32); a decay that slow keeps a state across several chunks, so the inter-chunk path of a chunked kernel carries
real weight in a check (a trained model's faster decays only make the state forget sooner). beta = sigmoid(N(0, 1))
in the shape's dtype, in (0, 1). The plain linear method takes g and beta too and ignores them, so that every
implementation takes the same inputs.

A prefill starts from no state (None: zeros) unless one is given. A decode step's state is float32 (transformers
and flash-linear-attention keep it so at every dtype); drawn here as N(0, 1/d_k) when none is given: its values
do not change the step's time, and a check passes the state the reference reached after a prefix instead.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    g = torch.log(0.9 + 0.1 * torch.rand(b, t, shape.v_heads, generator=gen))
    beta = torch.sigmoid(normal(b, t, shape.v_heads))
    if state is None and shape.phase == "decode":
        state = normal(*shape.state_shape) * shape.d_k**-0.5
    if state is not None:
        state = state.to(device, torch.float32)
    q, k, v, beta = (x.to(device, dtype) for x in (q, k, v, beta))
    return LinearInputs(q, k, v, g.to(device), beta, state)
