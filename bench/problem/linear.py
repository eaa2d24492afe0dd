"""The linear-attention field of a shape (`Linear`): which recurrence replaces softmax attention, and the chunk its
prefill runs in, as one value a case carries (the `linear` column; bench.linear holds the algorithms).

  none       softmax attention: every other kind of case (its case ids carry no linear field)
  gdn[:C]    gated DeltaNet (Qwen3-Next's), its prefill in chunks of C tokens (C: 64, fla's chunk, when left out)
  linear[:C] plain causal linear attention (no gate, no delta rule), likewise
  mamba2[:C] Mamba-2's SSD scan (scalar decay per head, B/C shared by a group of heads, a D skip), likewise
  kda[:C]    Kimi Delta Attention (gated DeltaNet with a per-channel decay), likewise
C is a positive power of two. A linear shape's heads map onto bench.linear.shape.LinearShape as value heads =
n_heads (the output's heads) and query/key heads = n_kv_heads (Qwen3-Next's grouping: fewer q/k heads than value
heads), d_k = d_v = head_dim. Its prefill (seq_q == seq_kv) runs the chunked form over seq_q tokens, so C must
divide seq_q; its decode (seq_q = 1) is one recurrent step from a state, whose cost does not depend on seq_kv (it
only names the context the state summarises). The mask is causal; no score variant, sparsity, MLA, layer scope or
serving batch goes with it (bench.problem.shapes refuses each). Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.errors import InputError

# bench.linear.shape.METHODS; what a backend's `linear` lists
LINEAR_METHODS: tuple[str, ...] = ("gdn", "linear", "mamba2", "kda")
DEFAULT_LINEAR_CHUNK = 64  # flash-linear-attention's chunk size


class LinearError(InputError):
    """An unknown or malformed linear method, or a chunk the case's lengths cannot take."""


@dataclass(frozen=True)
class Linear:
    """A linear method and its chunk, or none (method None)."""

    method: str | None = None
    chunk: int = DEFAULT_LINEAR_CHUNK

    @classmethod
    def parse(cls, text: str) -> Linear:
        """'none' | 'gdn' | 'gdn:64' | 'linear:32'; LinearError names the rule a bad value breaks."""
        text = text.strip()
        if text in ("none", ""):
            return NO_LINEAR
        method, _, chunk_text = text.partition(":")
        if method not in LINEAR_METHODS:
            raise LinearError(f"linear {text!r}: unknown method {method!r}; expected none or one of "
                              f"{', '.join(LINEAR_METHODS)}, each as METHOD[:CHUNK]")
        if not chunk_text:
            return cls(method)
        try:
            chunk = int(chunk_text)
        except ValueError:
            raise LinearError(f"linear {text!r}: chunk {chunk_text!r} is not an integer") from None
        if chunk <= 0 or chunk & (chunk - 1):
            raise LinearError(f"linear {text!r}: chunk {chunk} is not a positive power of two")
        return cls(method, chunk)

    @property
    def label(self) -> str:
        """What case ids and the `linear` column hold: none, or METHOD:CHUNK."""
        return "none" if self.method is None else f"{self.method}:{self.chunk}"

    def check(self, seq_q: int, seq_kv: int) -> None:
        """A prefill (seq_q == seq_kv) needs the chunk to divide its length; a decode step is one token."""
        if self.method is None:
            return
        if seq_q == seq_kv and seq_q % self.chunk:
            raise LinearError(f"linear {self.label}: chunk {self.chunk} does not divide the prefill length {seq_q}")
        if seq_q != seq_kv and seq_q != 1:
            raise LinearError(f"linear {self.label}: a decode step is one token (seq_q=1), not seq_q={seq_q}")


NO_LINEAR = Linear()
