"""The vocabulary of a linear-attention call: its sizes, method and phase, validated once.

A linear-attention layer keeps, per sequence and value head, a state S of d_k x d_v instead of a KV cache. Its
queries and keys have `k_heads` heads, its values (and the state, the gate g and the step size beta) `v_heads`;
v_heads is a multiple of k_heads and value head j reads query/key head j // (v_heads / k_heads): consecutive value
heads share a key head, the grouping Qwen3-Next's gated DeltaNet uses (16 key heads, 32 value heads), the mirror
image of GQA's query groups. Tensors are laid out as transformers and flash-linear-attention take them:
q, k (B, T, k_heads, d_k), v (B, T, v_heads, d_v), g and beta (B, T, v_heads), the state (B, v_heads, d_k, d_v).

Methods (bench.linear.reference states each recurrence):
  gdn     gated DeltaNet (Yang et al., "Gated Delta Networks"), as Qwen3-Next runs it;
  linear  plain causal linear attention: no gate, no delta rule, no normalisation;
  mamba2  Mamba-2's SSD (Dao and Gu, "Transformers are SSMs"): q is C, k is B (n_groups heads of d_state = d_k), v is
          x (the value heads, of d_head = d_v), the state per value head d_state x d_head (transposed from
          transformers' d_head x d_state), g the log decay dt A and beta the step dt (bench.linear.inputs);
  kda     Kimi Delta Attention (Kimi Linear): gated DeltaNet with g per key channel, (B, T, v_heads, d_k).
Phases: a prefill of `seq` tokens, run in chunks of `chunk` tokens (64 by default, flash-linear-attention's chunk),
which must divide `seq` (the chunked FLOP count is of whole chunks, and padding a tail would time work no model
asks for); or one decode step after a context of `seq` tokens, which reads only the state (any `seq` goes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.problem.shapes import DTYPE_ATTRS, ShapeError

Method = Literal["gdn", "linear", "mamba2", "kda"]
Phase = Literal["prefill", "decode"]
METHODS: tuple[str, ...] = ("gdn", "linear", "mamba2", "kda")
PHASES: tuple[str, ...] = ("prefill", "decode")
DEFAULT_CHUNK = 64  # flash-linear-attention's chunk size, and transformers' default


@dataclass(frozen=True)
class LinearShape:
    """One linear-attention call: `batch` sequences of `seq` tokens (prefill) or one new token each after a context
    of `seq` (decode); the module docstring gives the layout and the head grouping."""

    batch: int
    k_heads: int  # query and key heads
    v_heads: int  # value heads: the state's, the gate's and beta's heads
    d_k: int
    d_v: int
    seq: int  # prefill: the tokens processed; decode: the context before the new token
    dtype: str = "fp32"
    chunk: int = DEFAULT_CHUNK
    method: Method = "gdn"
    phase: Phase = "prefill"

    def __post_init__(self) -> None:
        for name in ("batch", "k_heads", "v_heads", "d_k", "d_v", "seq", "chunk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ShapeError(f"{name}={value!r} must be a positive integer")
        if self.method not in METHODS:
            raise ShapeError(f"method={self.method!r} is unknown; expected one of {', '.join(METHODS)}")
        if self.phase not in PHASES:
            raise ShapeError(f"phase={self.phase!r} is unknown; expected one of {', '.join(PHASES)}")
        if self.dtype not in DTYPE_ATTRS:
            raise ShapeError(f"dtype={self.dtype!r} is unknown; expected one of {', '.join(DTYPE_ATTRS)}")
        if self.v_heads % self.k_heads:
            raise ShapeError(f"v_heads={self.v_heads} is not a multiple of k_heads={self.k_heads} (each key head "
                             "serves a whole group of value heads)")
        if self.phase == "prefill" and self.seq % self.chunk:
            raise ShapeError(f"chunk={self.chunk} does not divide seq={self.seq}: a chunk size that does not divide "
                             "the prefill length is refused")

    @property
    def group(self) -> int:
        """Value heads per key head."""
        return self.v_heads // self.k_heads

    @property
    def tokens(self) -> int:
        """The new tokens one call processes per sequence: seq for a prefill, 1 for a decode step."""
        return self.seq if self.phase == "prefill" else 1

    @property
    def state_shape(self) -> tuple[int, int, int, int]:
        """The recurrent state: (batch, v_heads, d_k, d_v)."""
        return (self.batch, self.v_heads, self.d_k, self.d_v)

    @property
    def label(self) -> str:
        """A short readable id: method, phase and sizes."""
        heads = f"{self.k_heads}k{self.v_heads}v"
        return (f"{self.method}-{self.phase} b{self.batch} {heads} dk{self.d_k} dv{self.d_v} s{self.seq} "
                f"c{self.chunk} {self.dtype}")
