"""The linear-attention backends' registry entries (bench.kinds.linear times them): each names the implementations of
bench.linear.backends it runs, a chunked prefill and a recurrent decode step, and lists its methods in its `linear`
trait, so a sweep offers it the linear cases of those methods alone and never a softmax case (dense=False).

  hf-gdn        transformers' torch paths of Qwen3-Next's gated DeltaNet (torch_chunk_gated_delta_rule for a
                prefill, torch_recurrent_gated_delta_rule for a decode step), called unwrapped
  torch-linear  plain causal linear attention: the textbook chunk form and its recurrence, in torch
  fla-gdn       flash-linear-attention's Triton kernels (chunk_gated_delta_rule, fused_recurrent_gated_delta_rule):
                CUDA only, and Unsupported with one line where fla is not installed
  hf-mamba2     transformers' torch paths of Mamba-2's SSD (mamba2_chunk_scan, mamba2_selective_state_update)
  hf-kda        transformers' torch paths of Kimi Delta Attention (chunk_kimi_delta_attention,
                recurrent_kimi_delta_attention); both called unwrapped (bench.linear.hf_ssm)

Their `fn` is never a softmax call: bench.attention refuses them before calling it (sparsity_reason), and the fn
itself raises Unsupported with the same line should anything reach it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.backends.base import Backend, Unsupported

if TYPE_CHECKING:
    import torch

# backend -> (its prefill implementation, its decode implementation), names of bench.linear.backends.IMPLEMENTATIONS
LINEAR_IMPLEMENTATIONS: dict[str, tuple[str, str]] = {
    "hf-gdn": ("hf-gdn-chunk", "hf-gdn-recurrent"),
    "torch-linear": ("torch-linear-chunk", "torch-linear-recurrent"),
    "fla-gdn": ("fla-gdn-chunk", "fla-gdn-recurrent"),
    "hf-mamba2": ("hf-mamba2-chunk", "hf-mamba2-recurrent"),
    "hf-kda": ("hf-kda-chunk", "hf-kda-recurrent"),
}


def linear_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Any, score: Any) -> torch.Tensor:
    """A linear backend's softmax entry: always Unsupported (its cases are bench run --linear's)."""
    raise Unsupported("a linear-attention backend runs linear cases only (bench run --linear), not softmax attention")


LINEAR_BACKENDS: tuple[Backend, ...] = (
    Backend("hf-gdn", linear_only, "gated DeltaNet through transformers' torch paths (Qwen3-Next's chunked prefill "
            "and recurrent decode)", "tiled", "#6b6ecf", "x", backward=False, dense=False, linear=("gdn",),
            imports=("transformers.models.qwen3_next.modeling_qwen3_next",)),
    Backend("torch-linear", linear_only, "plain causal linear attention in torch (textbook chunk form, recurrent "
            "decode)", "tiled", "#b5cf6b", "2", backward=False, dense=False, linear=("linear",)),
    Backend("fla-gdn", linear_only, "gated DeltaNet through flash-linear-attention's Triton kernels (CUDA, the fla "
            "package)", "tiled", "#e7969c", "|", devices=("cuda",), backward=False, dense=False, linear=("gdn",)),
    Backend("hf-mamba2", linear_only, "Mamba-2's SSD scan through transformers' torch paths (mamba2_chunk_scan "
            "prefill, mamba2_selective_state_update decode)", "tiled", "#e6550d", "X", backward=False, dense=False,
            linear=("mamba2",), imports=("transformers.models.mamba2.modeling_mamba2",)),
    Backend("hf-kda", linear_only, "Kimi Delta Attention through transformers' torch paths (chunked prefill and "
            "recurrent decode)", "tiled", "#ce6dbd", "H", backward=False, dense=False, linear=("kda",),
            imports=("transformers.models.kimi_linear.modeling_kimi_linear",)),
)
