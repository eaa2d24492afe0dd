"""The score variant: what happens to s = QK^T / sqrt(D) before the softmax, as one value (`Score`) that every backend
and the reference receive whole.

With off = Skv - Sq (bench.problem.masks), in this order:
  softcap X:  s <- X * tanh(s / X)                       (Gemma-2's attn_logit_softcapping), before the mask
  ALiBi:      s_hij <- s_hij - m_h * |i + off - j|        (flash-attn's alibi_slopes convention; under a causal
              mask the same softmax as BLOOM's, which adds m_h * j: softmax ignores a per-row constant)
  sinks:      p_hij = exp(s_hij) / (exp(sigma_h) + sum_j exp(s_hij)), one logit sigma_h per query head (gpt-oss):
              the sink takes probability mass and contributes no value
The `score` axis holds one of them per case ("none", "softcap:50", "alibi", "sinks"); a call may combine them.
Chunked local attention is a mask (bench.problem.masks).

A new score variant is a field here (its step in `score_mod` or `softmax`, `label`/`parse`, and its name in
SCORE_VARIANTS), plus the backends that run it: naive and the float64 reference apply `score_mod`, flex takes it as
its score_mod. Nothing here imports torch at module level.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.errors import InputError
from bench.problem.masks import MASK_VARIANTS

if TYPE_CHECKING:
    import torch

SCORE_KINDS: tuple[str, ...] = ("none", "softcap", "alibi", "sinks")
# the variant names a backend's `variants` trait lists (bench.backends.base.Backend); "mla": it takes a V whose head
# dim differs from Q/K's (MLA's expanded prefill, D_v = v_head_dim) and a V that is a view of K (MLA's absorbed
# decode: V = the first kv_lora_rank columns of the one latent cache, bench.kinds.mla_calls)
SCORE_VARIANTS: tuple[str, ...] = ("softcap", "alibi", "sinks")  # Score's fields, each opt-in
OPT_IN_VARIANTS: tuple[str, ...] = (*SCORE_VARIANTS, *MASK_VARIANTS, "mla")
SINK_SEED = 1234  # sink logits of a swept case: seeded, so the check and every backend see the same ones


class ScoreError(InputError):
    """An unknown or malformed score variant."""


@dataclass(frozen=True)
class Score:
    """none: Score(); Score(softcap=50.0); Score(alibi=True); Score(sinks=True) with seeded logits, or
    Score(sinks=True, sink_logits=t) with t a (Hq,) tensor. A backend gets it with its sink logits in place
    (`with_logits`)."""

    softcap: float | None = None
    alibi: bool = False
    sinks: bool = False
    # (Hq,) sink logits; None until bound (`with_logits`). Not part of the value's identity (eq, hash, label).
    sink_logits: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.softcap is not None:
            if isinstance(self.softcap, bool) or not isinstance(self.softcap, (int, float)) \
                    or not 0 < self.softcap < math.inf:
                raise ScoreError(f"softcap={self.softcap!r} must be a positive number")
            object.__setattr__(self, "softcap", float(self.softcap))
        if self.sink_logits is not None:
            object.__setattr__(self, "sinks", True)

    @classmethod
    def parse(cls, text: str) -> Score:
        """'none' | 'softcap:50' | 'alibi' | 'sinks', or several joined by '+' (softcap:30+sinks)."""
        fields: dict[str, Any] = {}
        for part in text.strip().split("+"):
            kind, _, arg = part.strip().partition(":")
            if kind == "softcap":
                try:
                    cap = float(arg)
                except ValueError:
                    raise ScoreError(f"score {text!r}: softcap needs a positive number, e.g. softcap:50") from None
                if not cap > 0 or not math.isfinite(cap):
                    raise ScoreError(f"score {text!r}: the cap must be a positive number")
                fields["softcap"] = cap
            elif kind in ("alibi", "sinks") and not arg:
                fields[kind] = True
            elif kind != "none" or arg or "+" in text:
                raise ScoreError(f"unknown score {text!r}; expected none, softcap:<X>, alibi or sinks")
        return cls(**fields)

    @property
    def label(self) -> str:
        """The text `parse` reads back: none, softcap:50, alibi, sinks."""
        parts = ([] if self.softcap is None else [f"softcap:{self.softcap:g}"]) + ["alibi"] * self.alibi \
            + ["sinks"] * self.sinks
        return "+".join(parts) or "none"

    @property
    def variants(self) -> tuple[str, ...]:
        """The variant names (OPT_IN_VARIANTS) a backend must list to run this score."""
        return tuple(name for name in SCORE_VARIANTS if getattr(self, name) not in (None, False))

    def with_logits(self, n_heads: int, device: torch.device | str = "cpu") -> Score:
        """This score with its sink logits in place: the given ones, else the seeded ones (sink_logits); itself
        without sinks."""
        if not self.sinks or self.sink_logits is not None:
            return self
        return dataclasses.replace(self, sink_logits=sink_logits(n_heads, device))

    def score_mod(self, n_heads: int, device: torch.device | str = "cpu",
                  dtype: torch.dtype | None = None) -> Callable[[Any, Any, Any, Any], Any] | None:
        """mod(s, h, q_pos, k_pos) -> s with the score steps before the mask (softcap, then ALiBi), on tensors that
        broadcast (h, q_pos and k_pos index the head, the aligned query position i + off and the key), or flex's
        scalars inside a score_mod; None when the score has none. Sinks act in the softmax (`softmax`)."""
        if self.softcap is None and not self.alibi:
            return None
        import torch

        cap = self.softcap
        slopes = torch.tensor(alibi_slopes(n_heads), device=device, dtype=dtype or torch.float32) \
            if self.alibi else None

        def mod(s: Any, h: Any, q_pos: Any, k_pos: Any) -> Any:
            if cap is not None:  # Gemma-2: before the mask and the bias
                s = cap * torch.tanh(s / cap)
            if slopes is not None:
                s = s - slopes[h] * (q_pos - k_pos).abs()
            return s
        return mod

    def apply(self, scores: torch.Tensor) -> torch.Tensor:
        """`score_mod` on a whole (B, Hq, Sq, Skv) score matrix, in its dtype."""
        B, H, Sq, Skv = scores.shape
        mod = self.score_mod(H, scores.device, scores.dtype)
        if mod is None:
            return scores
        import torch

        h = torch.arange(H, device=scores.device).view(H, 1, 1)
        q_pos = torch.arange(Sq, device=scores.device).view(Sq, 1) + (Skv - Sq)
        k_pos = torch.arange(Skv, device=scores.device).view(1, Skv)
        return mod(scores, h, q_pos, k_pos)  # integer positions: |i + off - j| exact, rounded once by the product

    def softmax(self, scores: torch.Tensor) -> torch.Tensor:
        """softmax over the last dim of (B, Hq, Sq, Skv) masked scores, with the sink logits (if any) in the
        denominator: the sink takes mass and holds no value."""
        return softmax_with_sinks(scores, self.sink_logits if self.sinks else None)


NO_SCORE = Score()


def parse_score(text: str) -> tuple[str, float | None]:
    """'none' | 'alibi' | 'sinks' | 'softcap:50' -> (kind, cap): one term of Score.parse."""
    score = Score.parse(text)
    if len(score.variants) > 1:
        raise ScoreError(f"score {text!r}: one variant per case; expected none, softcap:<X>, alibi or sinks")
    return (score.variants or ("none",))[0], score.softcap


def alibi_slopes(n_heads: int) -> list[float]:
    """The ALiBi paper's head slopes: 2^(-8h/n) for h = 1..n when n is a power of two; otherwise the slopes of the
    largest power of two n' below n, then every other slope of 2n' for the remaining n - n' heads (its rule)."""
    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (h + 1) for h in range(n)]

    if n_heads <= 0:
        raise ScoreError(f"n_heads={n_heads} must be positive")
    lower = 2 ** int(math.floor(math.log2(n_heads)))
    if lower == n_heads:
        return power_of_two(n_heads)
    return power_of_two(lower) + power_of_two(2 * lower)[0::2][: n_heads - lower]


def sink_logits(n_heads: int, device: torch.device | str = "cpu", seed: int = SINK_SEED) -> torch.Tensor:
    """(Hq,) float32 sink logits for a swept case: N(0, 1), reproducible from the seed (learned ones are O(1))."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n_heads, generator=gen, dtype=torch.float32).to(device)


def variants_used(mask: Any, score: Score, mla: bool = False) -> tuple[str, ...]:
    """The OPT_IN_VARIANTS a call asks for (a Mask's and a Score's, and mla: its V's head dim differs from its K's), in
    OPT_IN_VARIANTS' order."""
    used = {*mask.variants, *score.variants, *(("mla",) if mla else ())}
    return tuple(name for name in OPT_IN_VARIANTS if name in used)


def alibi_bias(n_heads: int, seq_q: int, seq_kv: int, device: torch.device | str = "cpu",
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """(Hq, Sq, Skv) additive bias -m_h * |i + off - j| (float32 unless dtype says otherwise)."""
    import torch

    dtype = dtype or torch.float32
    off = seq_kv - seq_q
    i = torch.arange(seq_q, device=device).unsqueeze(1)
    j = torch.arange(seq_kv, device=device).unsqueeze(0)
    dist = (i + off - j).abs().to(dtype)  # (Sq, Skv)
    slopes = torch.tensor(alibi_slopes(n_heads), device=device, dtype=dtype)
    return -slopes.view(-1, 1, 1) * dist


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax over the last dim of (B, Hq, Sq, Skv) scores, with one extra sink logit per head in the denominator
    (it takes mass and holds no value): the sink column is appended, softmaxed with the rest, and dropped."""
    import torch

    if sinks is None:
        return torch.softmax(scores, dim=-1)
    B, H, Sq, _ = scores.shape
    col = sinks.to(scores.dtype).view(1, H, 1, 1).expand(B, H, Sq, 1)
    return torch.softmax(torch.cat([scores, col], dim=-1), dim=-1)[..., :-1]
