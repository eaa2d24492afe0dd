"""The timed implementations of linear attention: each takes the same inputs and returns (o, the final state).

Signature: fn(q, k, v, g, beta, *, state=None, chunk=64) -> (o, state), with q, k (B, T, k_heads, d_k), v (B, T,
v_heads, d_v), g and beta (B, T, v_heads), state (B, v_heads, d_k, d_v) float32 or None for zeros (layout and head
grouping: bench.linear.shape; inputs: bench.linear.inputs). o is in v's dtype, the state float32. A prefill
implementation runs T tokens in chunks of `chunk` (which divides T); a decode implementation runs the recurrence
token by token (T = 1 for a decode step) and ignores `chunk`. The plain linear method ignores g and beta. mamba2's
implementations also take their per-head params (A, D: bench.linear.inputs) as keywords.
torch and the libraries are imported on the first call, never at this module's import.

  hf-gdn-chunk      gated DeltaNet prefill: transformers' torch_chunk_gated_delta_rule (Qwen3-Next's torch path)
  hf-gdn-recurrent  gated DeltaNet decode: transformers' torch_recurrent_gated_delta_rule
  torch-linear-chunk      plain linear attention prefill, the textbook chunk form (below)
  torch-linear-recurrent  plain linear attention decode: S += k v^T, o = S^T q / sqrt(d_k)
  fla-gdn-chunk     flash-linear-attention's chunk_gated_delta_rule (Triton: a GPU; optional, `fla`)
  fla-gdn-recurrent flash-linear-attention's fused_recurrent_gated_delta_rule (same)

transformers' functions are called unwrapped (inspect.unwrap): transformers decorates them so that they call fla
instead where fla is installed, which would time fla's kernel under transformers' name; the unwrapped function is
the torch path itself. Both run in float32 at any input dtype and expand q and k to the value heads
(repeat_interleave) inside the call, as Qwen3-Next does. fla's kernels get q and k expanded the same way (its
chunk_gated_delta_rule is documented for equal heads in q, k and v; only the fused recurrent one says it groups
value heads) and refuse a chunk other than 64 (fla's chunk size is fixed).

The textbook chunk form (torch-linear-chunk): per chunk c of C tokens, O_c = mask(Q_c K_c^T) V_c + Q_c S_{c-1} and
S_c = S_{c-1} + K_c^T V_c, with Q scaled by 1/sqrt(d_k) and mask the causal lower triangle (diagonal included).
Q_c K_c^T is computed once per key head and shared by its group of value heads (no gate or beta differs between
them), the intra-chunk terms of all chunks in one batched matmul, the state carried chunk to chunk. float32
throughout, like transformers' paths.

Mamba-2's SSD and Kimi Delta Attention (methods mamba2 and kda) are transformers' torch paths too, in
bench.linear.hf_ssm (hf-mamba2-chunk, hf-mamba2-recurrent, hf-kda-chunk, hf-kda-recurrent), each checked against its
own recurrence in bench.linear.reference; mamba2's per-head A and D come as keyword params (bench.linear.inputs),
which the other implementations never receive.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends.base import Unsupported
from bench.linear.hf_ssm import expanded_qk, hf_kda_chunk, hf_kda_recurrent, hf_mamba2_chunk, hf_mamba2_recurrent

if TYPE_CHECKING:
    import torch

FLA_CHUNK = 64  # fla's chunked kernels' fixed chunk size
_HF_MODULE = "transformers.models.qwen3_next.modeling_qwen3_next"
_FLA_MODULE = "fla.ops.gated_delta_rule"


def _hf(name: str) -> Callable[..., Any]:
    try:
        module = importlib.import_module(_HF_MODULE)
    except ImportError as err:
        raise Unsupported(f"transformers with Qwen3-Next (>= 5.24, the hf extra) is not importable: {err}") from None
    return inspect.unwrap(getattr(module, name))  # the torch path, never the fla kernel it may be routed to


def hf_gdn_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                 state: torch.Tensor | None = None, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated DeltaNet prefill through transformers' torch_chunk_gated_delta_rule (its torch path, unwrapped)."""
    fn = _hf("torch_chunk_gated_delta_rule")
    return fn(q, k, v, g=g, beta=beta, chunk_size=chunk, initial_state=state, output_final_state=True,
              use_qk_l2norm_in_kernel=True)


def hf_gdn_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                     state: torch.Tensor | None = None, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated DeltaNet token by token (a decode step at T = 1) through transformers' torch_recurrent_gated_delta_rule;
    `chunk` is ignored."""
    fn = _hf("torch_recurrent_gated_delta_rule")
    return fn(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)


def torch_linear_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                       state: torch.Tensor | None = None, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain causal linear attention in the textbook chunk form (module docstring); g and beta are ignored."""
    import torch

    b, t, k_heads, d_k = q.shape
    v_heads, d_v = v.shape[2], v.shape[3]
    if t % chunk:
        raise ValueError(f"chunk={chunk} does not divide the {t} tokens")
    group, n = v_heads // k_heads, t // chunk
    # (B, Hk, N, C, d_k) and (B, Hk, G, N, C, d_v): value head h = key head h // G, group member h % G
    qc = (q.float() * d_k**-0.5).transpose(1, 2).reshape(b, k_heads, n, chunk, d_k)
    kc = k.float().transpose(1, 2).reshape(b, k_heads, n, chunk, d_k)
    vc = v.float().transpose(1, 2).reshape(b, k_heads, group, n, chunk, d_v)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    scores = (qc @ kc.transpose(-1, -2)).masked_fill(~causal, 0.0)  # once per key head, shared by its group
    out = scores.unsqueeze(2) @ vc  # the intra-chunk terms of every chunk at once
    s = (torch.zeros(b, k_heads, group, d_k, d_v, device=q.device) if state is None
         else state.float().reshape(b, k_heads, group, d_k, d_v))
    kt = kc.transpose(-1, -2).unsqueeze(2)  # (B, Hk, 1, N, d_k, C)
    for i in range(n):
        out[:, :, :, i] += qc[:, :, None, i] @ s  # inter-chunk: what the chunks before left in the state
        s = s + kt[:, :, :, i] @ vc[:, :, :, i]
    o = out.reshape(b, v_heads, t, d_v).transpose(1, 2).to(v.dtype)
    return o, s.reshape(b, v_heads, d_k, d_v)


def torch_linear_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                           *, state: torch.Tensor | None = None,
                           chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain causal linear attention token by token (a decode step at T = 1): S += k v^T, o = S^T q / sqrt(d_k);
    g, beta and `chunk` are ignored."""
    import torch

    b, t, k_heads, d_k = q.shape
    v_heads, d_v = v.shape[2], v.shape[3]
    group = v_heads // k_heads
    s = (torch.zeros(b, k_heads, group, d_k, d_v, device=q.device) if state is None
         else state.float().reshape(b, k_heads, group, d_k, d_v))
    qs = (q.float() * d_k**-0.5).unsqueeze(-2).unsqueeze(2)  # (B, T, 1, Hk, 1, d_k): broadcast over the group
    ks = k.float().unsqueeze(-1).unsqueeze(2)  # (B, T, 1, Hk, d_k, 1)
    vs = v.float().reshape(b, t, k_heads, group, 1, d_v).transpose(2, 3)  # (B, T, G, Hk, 1, d_v)
    s = s.transpose(1, 2)  # (B, G, Hk, d_k, d_v), to line up with the token tensors' (G, Hk)
    outputs = []
    for i in range(t):
        s = s + ks[:, i] @ vs[:, i]
        outputs.append(qs[:, i] @ s)  # (B, G, Hk, 1, d_v)
    o = torch.stack(outputs, dim=1).squeeze(-2).transpose(2, 3).reshape(b, t, v_heads, d_v).to(v.dtype)
    return o, s.transpose(1, 2).reshape(b, v_heads, d_k, d_v)


def _fla(name: str, q: torch.Tensor) -> Callable[..., Any]:
    try:
        module = importlib.import_module(_FLA_MODULE)
    except ImportError as err:
        raise Unsupported(f"flash-linear-attention (fla) is not installed (pip install flash-linear-attention): "
                          f"{err}") from None
    if q.device.type == "cpu":
        raise Unsupported("fla's gated DeltaNet kernels are Triton kernels and need a GPU; the inputs are on the CPU")
    return getattr(module, name)


def fla_gdn_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                  state: torch.Tensor | None = None, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated DeltaNet prefill through fla's chunk_gated_delta_rule (chunk 64 only)."""
    fn = _fla("chunk_gated_delta_rule", q)
    if chunk != FLA_CHUNK:
        raise Unsupported(f"fla's chunk kernels use a fixed chunk of {FLA_CHUNK}, not {chunk}")
    q, k = expanded_qk(q, k, v)
    try:
        return fn(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True,
                  use_qk_l2norm_in_kernel=True)
    except AssertionError as err:  # some fla versions assert on a dtype they do not take (float32)
        raise Unsupported(f"fla chunk_gated_delta_rule refuses these inputs: {err}") from None


def fla_gdn_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, *,
                      state: torch.Tensor | None = None, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated DeltaNet token by token (a decode step at T = 1) through fla's fused_recurrent_gated_delta_rule."""
    fn = _fla("fused_recurrent_gated_delta_rule", q)
    q, k = expanded_qk(q, k, v)
    return fn(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)


LinearFn = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]


@dataclass(frozen=True)
class LinearImpl:
    """An implementation's entry: what it computes (method, phase) and where it runs."""

    name: str
    method: str  # bench.linear.shape.METHODS
    phase: str  # prefill (chunked) or decode (recurrent)
    fn: LinearFn
    summary: str
    devices: tuple[str, ...] = ("cpu", "cuda")


IMPLEMENTATIONS: tuple[LinearImpl, ...] = (
    LinearImpl("hf-gdn-chunk", "gdn", "prefill", hf_gdn_chunk, "transformers' torch_chunk_gated_delta_rule"),
    LinearImpl("hf-gdn-recurrent", "gdn", "decode", hf_gdn_recurrent,
               "transformers' torch_recurrent_gated_delta_rule"),
    LinearImpl("torch-linear-chunk", "linear", "prefill", torch_linear_chunk,
               "textbook chunked causal linear attention in torch"),
    LinearImpl("torch-linear-recurrent", "linear", "decode", torch_linear_recurrent,
               "causal linear attention's recurrence in torch"),
    LinearImpl("fla-gdn-chunk", "gdn", "prefill", fla_gdn_chunk, "flash-linear-attention's chunk_gated_delta_rule",
               ("cuda",)),
    LinearImpl("fla-gdn-recurrent", "gdn", "decode", fla_gdn_recurrent,
               "flash-linear-attention's fused_recurrent_gated_delta_rule", ("cuda",)),
    LinearImpl("hf-mamba2-chunk", "mamba2", "prefill", hf_mamba2_chunk, "transformers' mamba2_chunk_scan"),
    LinearImpl("hf-mamba2-recurrent", "mamba2", "decode", hf_mamba2_recurrent,
               "transformers' mamba2_selective_state_update"),
    LinearImpl("hf-kda-chunk", "kda", "prefill", hf_kda_chunk, "transformers' chunk_kimi_delta_attention"),
    LinearImpl("hf-kda-recurrent", "kda", "decode", hf_kda_recurrent, "transformers' recurrent_kimi_delta_attention"),
)


def implementations(method: str, phase: str) -> tuple[LinearImpl, ...]:
    """The implementations of `method` for `phase`."""
    return tuple(impl for impl in IMPLEMENTATIONS if impl.method == method and impl.phase == phase)
