"""transformers' torch paths of Mamba-2's SSD scan and Kimi Delta Attention, in bench.linear.backends' signature:
fn(q, k, v, g, beta, *, state=None, chunk=64, **params) -> (o in v's dtype, the final state (B, v_heads, d_k, d_v)
float32). torch and transformers are imported on the first call.

  hf-mamba2-chunk      transformers.models.mamba2's mamba2_chunk_scan (Mamba2Mixer's chunked prefill), q = C, k = B,
                       v = x, beta = dt, params A and D; dt is passed as the step itself (no dt_bias, no softplus,
                       the default dt_limit (0, inf) clamps nothing), B and C at their n_groups heads (it repeats
                       them to the heads inside the call, as the mixer relies on)
  hf-mamba2-recurrent  mamba2_selective_state_update (the mixer's decode step), called as Mamba2Mixer calls it: dt
                       expanded over d_head, A over (d_head, d_state), D over d_head (views, no copies); it updates
                       the state it is given in place and returns y, so the step returns that state
  hf-kda-chunk         transformers.models.kimi_linear's chunk_kimi_delta_attention (use_qk_l2norm_in_kernel=True,
                       as KimiLinearDeltaAttention calls it)
  hf-kda-recurrent     recurrent_kimi_delta_attention, likewise

Layout. transformers keeps a Mamba-2 state as (B, H, d_head, d_state) = h; every method here keeps S = h^T
(B, H, d_state, d_head) (bench.linear.shape): the wrappers pass and return transposed views, which cost no copy.
Kimi's functions take q, k and v at the same heads; where a shape groups value heads over fewer key heads, q and k
are expanded to the value heads (repeat_interleave) inside the call, as the hf-gdn and fla wrappers do. The
functions are called unwrapped (inspect.unwrap): transformers decorates them to call a hub kernel (mamba_ssm's, fla's)
where one is installed, which would time that kernel under transformers' name.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.backends.base import Unsupported

if TYPE_CHECKING:
    import torch

_MODULES = {"mamba2": "transformers.models.mamba2.modeling_mamba2",
            "kda": "transformers.models.kimi_linear.modeling_kimi_linear"}


def _hf(model: str, name: str) -> Callable[..., Any]:
    try:
        module = importlib.import_module(_MODULES[model])
    except ImportError as err:
        raise Unsupported(f"transformers with {model} (>= 5.24, the hf extra) is not importable: {err}") from None
    return inspect.unwrap(getattr(module, name))  # the torch path, never a hub kernel it may be routed to


def expanded_qk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k repeated to v's heads, for kernels that take one head count (each q/k head serves a group of v's)."""
    group = v.shape[2] // k.shape[2]
    if group == 1:
        return q, k
    return q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)


def hf_mamba2_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                    state: torch.Tensor | None = None, chunk: int = 64, A: torch.Tensor, D: torch.Tensor,
                    **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-2's SSD prefill through transformers' mamba2_chunk_scan (module docstring); g is not read."""
    fn = _hf("mamba2", "mamba2_chunk_scan")
    initial = None if state is None else state.transpose(-1, -2)  # S (d_state x d_head) -> h (d_head x d_state)
    y, h = fn(v, beta, A, k, q, chunk_size=chunk, D=D, initial_states=initial, return_final_states=True)
    return y.to(v.dtype), h.transpose(-1, -2)


def hf_mamba2_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                        state: torch.Tensor | None = None, chunk: int = 64, A: torch.Tensor, D: torch.Tensor,
                        **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Mamba-2 token by token (a decode step at T = 1) through mamba2_selective_state_update, which updates `state`
    in place (module docstring); g and `chunk` are not read."""
    import torch

    fn = _hf("mamba2", "mamba2_selective_state_update")
    b, t, heads, d_head = v.shape
    d_state = k.shape[-1]
    if state is None:
        state = torch.zeros(b, heads, d_state, d_head, device=v.device)
    h = state.transpose(-1, -2)  # (B, H, d_head, d_state), a view: the update lands in `state`
    a = A[:, None, None].expand(-1, d_head, d_state)
    d = D[:, None].expand(-1, d_head)
    outputs = []
    for i in range(t):
        dt = beta[:, i, :, None].expand(-1, -1, d_head)
        outputs.append(fn(h, v[:, i], dt, a, k[:, i], q[:, i], d))  # (B, H, d_head)
    return torch.stack(outputs, dim=1).to(v.dtype), state


def hf_kda_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                 state: torch.Tensor | None = None, chunk: int = 64, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Kimi Delta Attention prefill through transformers' chunk_kimi_delta_attention (its torch path, unwrapped)."""
    fn = _hf("kda", "chunk_kimi_delta_attention")
    q, k = expanded_qk(q, k, v)
    return fn(q, k, v, g=g, beta=beta, chunk_size=chunk, initial_state=state, output_final_state=True,
              use_qk_l2norm_in_kernel=True)


def hf_kda_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                     state: torch.Tensor | None = None, chunk: int = 64, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Kimi Delta Attention token by token (a decode step at T = 1) through recurrent_kimi_delta_attention."""
    fn = _hf("kda", "recurrent_kimi_delta_attention")
    q, k = expanded_qk(q, k, v)
    return fn(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
