"""Linear-attention and state-space layers: what one keeps per sequence instead of a KV cache. Pure Python.

A hybrid model mixes attention layers (each caching K and V per token) with linear layers that keep a fixed state
per sequence, the same size at any context. Each linear layer keeps two tensors, shaped as transformers' own classes
keep them (the config fields they come from: bench.models.config_linear):

- gated DeltaNet (Qwen3-Next, Qwen3.5; kind "deltanet"): a recurrent state of linear_num_value_heads x
  linear_key_head_dim x linear_value_head_dim (transformers repeats the key heads up to the value heads, so the value
  heads count), and the short convolution's state over q, k and v: 2 x linear_num_key_heads x linear_key_head_dim +
  linear_num_value_heads x linear_value_head_dim channels;
- Kimi Delta Attention (Kimi Linear; kind "kda"): linear_num_heads x head_dim x head_dim, and 3 x heads x head_dim
  convolution channels;
- Mamba-2 (Bamba, GraniteMoeHybrid; kind "mamba2"): mamba_n_heads x mamba_d_head x mamba_d_state, and
  mamba_expand x hidden_size + 2 x mamba_n_groups x mamba_d_state convolution channels;
- Mamba (Jamba; kind "mamba"): (mamba_expand x hidden_size) x mamba_d_state, and mamba_expand x hidden_size
  convolution channels.

Elements. The recurrent state is fp32: transformers' reference kernels compute the recurrence in fp32 and keep the
result (Kimi's casts it to fp32 explicitly). The convolution state is in the model's dtype (the config's torch_dtype,
the dtype the layer's activations have); neither follows `bench kv --dtype`, which sets the KV cache's element.

Convolution columns. A causal convolution of kernel K reads the K - 1 inputs before the current one, so its state is
(K - 1) x channels elements per layer; that is what is counted here. transformers allocates K columns (one that
the next step never reads), so its conv state is K / (K - 1) times this one: the test comparing the two says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

LinearKind = Literal["deltanet", "kda", "mamba2", "mamba"]
LINEAR_KINDS: tuple[LinearKind, ...] = ("deltanet", "kda", "mamba2", "mamba")
LINEAR_NAMES: dict[str, str] = {"deltanet": "gated DeltaNet", "kda": "Kimi Delta Attention", "mamba2": "Mamba-2",
                                "mamba": "Mamba"}
STATE_DTYPE = "fp32"  # the recurrent state, at any model dtype (see above)


@dataclass(frozen=True)
class LinearState:
    """What one linear layer keeps per sequence: a recurrent state of `state_shape` and a short convolution's state
    of conv_channels x (conv_kernel - 1)."""

    kind: LinearKind
    state_shape: tuple[int, ...]  # deltanet/kda: (heads, d_k, d_v); mamba2: (heads, head_dim, d_state)
    conv_channels: int
    conv_kernel: int
    # the transformers config fields it was read from, with their values (a twin of the model is built from them)
    fields: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        values = (*self.state_shape, self.conv_channels, self.conv_kernel)
        if self.kind not in LINEAR_KINDS or not self.state_shape or any(
                not isinstance(v, int) or isinstance(v, bool) or v <= 0 for v in values):
            raise ValueError(f"a linear state needs a known kind and positive sizes, got {self!r}")

    @property
    def name(self) -> str:
        return LINEAR_NAMES[self.kind]

    @property
    def state_elements(self) -> int:
        n = 1
        for dim in self.state_shape:
            n *= dim
        return n

    @property
    def conv_tokens(self) -> int:
        """The past inputs the convolution reads: kernel - 1."""
        return self.conv_kernel - 1

    @property
    def conv_elements(self) -> int:
        return self.conv_channels * self.conv_tokens


@dataclass(frozen=True)
class StateGroup:
    """The linear layers of one model and what each keeps per sequence, at any context."""

    kind: LinearKind
    layers: int
    state: LinearState
    state_dtype: str  # the recurrent state's element: fp32
    conv_dtype: str  # the convolution state's: the model's dtype
    state_bytes: int  # one layer's recurrent state, one sequence
    conv_bytes: int  # one layer's convolution state, one sequence

    @property
    def layer_bytes(self) -> int:
        return self.state_bytes + self.conv_bytes

    @property
    def bytes_per_sequence(self) -> int:
        """All layers of the group, one sequence."""
        return self.layers * self.layer_bytes

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.state.name, "layers": self.layers,
                "state_shape": list(self.state.state_shape), "state_dtype": self.state_dtype,
                "conv_channels": self.state.conv_channels, "conv_kernel": self.state.conv_kernel,
                "conv_tokens": self.state.conv_tokens, "conv_dtype": self.conv_dtype, "state_bytes": self.state_bytes,
                "conv_bytes": self.conv_bytes, "bytes_per_sequence": self.bytes_per_sequence}
