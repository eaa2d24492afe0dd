"""Score variants: what happens to s = QK^T / sqrt(D) before the softmax, shared by every backend and the reference.

With off = Skv - Sq (bench.masks), in this order:
  softcap X:  s <- X * tanh(s / X)                       (Gemma-2's attn_logit_softcapping), before the mask
  ALiBi:      s_hij <- s_hij - m_h * |i + off - j|        (flash-attn's alibi_slopes convention; under a causal
              mask the same softmax as BLOOM's, which adds m_h * j: softmax ignores a per-row constant)
  sinks:      p_hij = exp(s_hij) / (exp(sigma_h) + sum_j exp(s_hij)), one logit sigma_h per query head (gpt-oss):
              the sink takes probability mass and contributes no value
The `score` axis holds one of them per case ("none", "softcap:50", "alibi", "sinks"); chunked local attention is a
mask (bench.masks).
"""

from __future__ import annotations

import math

import torch

from bench.errors import InputError

SCORE_KINDS: tuple[str, ...] = ("none", "softcap", "alibi", "sinks")
# the variant names a backend's `variants` trait lists (bench.backends.base.Backend); "mla": it takes a V whose head
# dim differs from Q/K's (MLA's expanded prefill, D_v = v_head_dim) and a V that is a view of K (MLA's absorbed
# decode: V = the first kv_lora_rank columns of the one latent cache, bench.mla)
VARIANTS: tuple[str, ...] = ("softcap", "alibi", "sinks", "chunk", "mla")
SINK_SEED = 1234  # sink logits of a swept case: seeded, so the check and every backend see the same ones


class ScoreError(InputError):
    """An unknown or malformed score variant."""


def parse_score(text: str) -> tuple[str, float | None]:
    """'none' | 'alibi' | 'sinks' | 'softcap:50' -> (kind, cap)."""
    kind, _, arg = text.strip().partition(":")
    if kind == "softcap":
        try:
            cap = float(arg)
        except ValueError:
            raise ScoreError(f"score {text!r}: softcap needs a positive number, e.g. softcap:50") from None
        if not cap > 0 or not math.isfinite(cap):
            raise ScoreError(f"score {text!r}: the cap must be a positive number")
        return kind, cap
    if kind in ("none", "alibi", "sinks") and not arg:
        return kind, None
    raise ScoreError(f"unknown score {text!r}; expected none, softcap:<X>, alibi or sinks")


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
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n_heads, generator=gen, dtype=torch.float32).to(device)


def variants_used(chunk: int | None, softcap: float | None, alibi: bool, sinks: object,
                  mla: bool = False) -> tuple[str, ...]:
    """The VARIANTS a call asks for, in VARIANTS' order (mla: its V's head dim differs from its K's)."""
    used = {"softcap": softcap is not None, "alibi": bool(alibi), "sinks": sinks is not None,
            "chunk": chunk is not None, "mla": mla}
    return tuple(name for name in VARIANTS if used[name])


def alibi_bias(n_heads: int, seq_q: int, seq_kv: int, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(Hq, Sq, Skv) additive bias -m_h * |i + off - j|."""
    off = seq_kv - seq_q
    i = torch.arange(seq_q, device=device).unsqueeze(1)
    j = torch.arange(seq_kv, device=device).unsqueeze(0)
    dist = (i + off - j).abs().to(dtype)  # (Sq, Skv)
    slopes = torch.tensor(alibi_slopes(n_heads), device=device, dtype=dtype)
    return -slopes.view(-1, 1, 1) * dist


def softmax_with_sinks(scores: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax over the last dim of (B, Hq, Sq, Skv) scores, with one extra sink logit per head in the denominator
    (it takes mass and holds no value): the sink column is appended, softmaxed with the rest, and dropped."""
    if sinks is None:
        return torch.softmax(scores, dim=-1)
    B, H, Sq, _ = scores.shape
    col = sinks.to(scores.dtype).view(1, H, 1, 1).expand(B, H, Sq, 1)
    return torch.softmax(torch.cat([scores, col], dim=-1), dim=-1)[..., :-1]
