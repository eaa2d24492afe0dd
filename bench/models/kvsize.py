"""KV cache sizes by the formula, with no torch: bytes per token and at context x batch, what fits in a memory
budget, and the parsing of the sizes users type (8k, 80GiB). `python -m bench kv` needs nothing else.

Per token and sequence a layer caches 2 (K and V) x Hkv x D x element size, or under MLA one latent of
kv_lora_rank + qk_rope_head_dim elements; a full layer holds every token of the context, a sliding layer
min(context, window); encoder-only models cache nothing (bench.models.config counts the layers). The real caches
that check this formula are bench.models.kvcache's.

A hybrid's linear layers (gated DeltaNet, Mamba, ...) cache no K or V: each keeps a fixed state per sequence
(bench.models.linear), `state_bytes` beside the KV bytes, the same at any context. Fitting a memory budget counts
both: the batch's states first, the KV cache in what is left.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from bench.errors import InputError
from bench.models.config import (
    DTYPE_BYTES,
    KVLayerGroup,
    ModelConfig,
    kv_cached_tokens,
    kv_layer_groups,
    kv_total_bytes,
    linear_state_bytes,
)


class SizeError(InputError):
    """A size that does not parse or is not positive; the message quotes it and says what is accepted."""


# ---------------------------------------------------------------------------------------------- parsing

_COUNT_RE = re.compile(r"^\s*([-+]?\d+(?:\.\d*)?|[-+]?\.\d+)\s*([a-z]?)\s*$", re.IGNORECASE)
_COUNT_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}  # token counts are powers of two in practice: 128k = 131072

_MEMORY_RE = re.compile(r"^\s*([-+]?\d+(?:\.\d*)?|[-+]?\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_MEMORY_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,  # SI, as disk and some GPU spec sheets count
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,  # binary, as torch.cuda and nvidia-smi count
}


def parse_count(text: str | int, name: str = "context") -> int:
    """'8192', '8k', '128k', '1m' -> a positive integer (k = 1024, m = 1024**2)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _check_positive(text, name, str(text))
    match = _COUNT_RE.match(str(text))
    if not match or match.group(2).lower() not in _COUNT_SUFFIX:
        raise SizeError(f"{name} {text!r} is not a count; expected e.g. 8192, 8k or 128k (k = 1024, m = 1024^2)")
    value = Fraction(match.group(1)) * _COUNT_SUFFIX[match.group(2).lower()]
    if value.denominator != 1:
        raise SizeError(f"{name} {text!r} is not a whole number of tokens")
    return _check_positive(int(value), name, text)


def parse_memory(text: str | int) -> int:
    """'80GiB', '80GB' (10^9), '512MiB', '1.5TiB' or plain bytes -> bytes, rounded down to a whole byte."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _check_positive(text, "memory", str(text))
    match = _MEMORY_RE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match and unit in ("k", "m", "g", "t"):
        raise SizeError(f"memory {text!r} is ambiguous; write {unit.upper()}iB (binary) or {unit.upper()}B (SI)")
    if not match or unit not in _MEMORY_UNITS:
        raise SizeError(f"memory {text!r} does not parse; expected e.g. 80GiB, 80GB, 512MiB, 1.5TiB or bytes")
    return _check_positive(int(Fraction(match.group(1)) * _MEMORY_UNITS[unit]), "memory", text)


def _check_positive(value: int, name: str, text: object) -> int:
    if value <= 0:
        raise SizeError(f"{name} {text!r} must be positive")
    return value


def check_dtype(name: str) -> str:
    if name not in DTYPE_BYTES:
        raise SizeError(f"dtype {name!r} is unknown; expected one of {', '.join(DTYPE_BYTES)}")
    return name


def format_bytes(n: int) -> str:
    """Binary units, at most two decimals: 131072 -> '128 KiB', 4718592 -> '4.5 MiB'."""
    units, value, i = ("B", "KiB", "MiB", "GiB", "TiB", "PiB"), float(n), 0
    while abs(value) >= 1024 and i < len(units) - 1:
        value, i = value / 1024, i + 1
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{text} {units[i]}"


# ----------------------------------------------------------------------------------------------- model

@dataclass(frozen=True)
class KVEstimate:
    """The formula's answer for one model at context x batch."""

    context: int  # tokens the user asked for
    tokens: int  # most tokens a layer holds: the context, or min(context, window) if every layer slides; 0 w/o cache
    batch: int
    dtype: str
    bytes_per_token: int  # one token of one sequence, all layers (K and V, or MLA's latent)
    total_bytes: int
    groups: tuple[KVLayerGroup, ...] = ()  # per layer kind (full, sliding): layers, heads or latent, bytes/token
    state_bytes: int = 0  # a hybrid's linear layers' fixed state, all sequences of the batch (0 otherwise)

    @property
    def cache_bytes(self) -> int:
        """The KV cache and the linear layers' state together: what the batch holds at this context."""
        return self.total_bytes + self.state_bytes


def estimate(model: ModelConfig, context: int, batch: int = 1, dtype: str | None = None) -> KVEstimate:
    """Bytes at context x batch; dtype (the KV cache's) defaults to the model's (its config's torch_dtype, else
    bf16); a hybrid's linear state keeps its own dtypes (bench.models.linear)."""
    context, batch = parse_count(context, "context"), parse_count(batch, "batch")
    dtype = check_dtype(dtype or model.dtype)
    groups = tuple(kv_layer_groups(model, dtype))
    return KVEstimate(context, kv_cached_tokens(model, context), batch, dtype, sum(g.bytes_per_token for g in groups),
                      sum(g.total_bytes(context, batch) for g in groups), groups, linear_state_bytes(model) * batch)


# ------------------------------------------------------------------------------------------------ fitting

def max_context(model: ModelConfig, batch: int, dtype: str, memory: int) -> int | None:
    """Largest context whose cache fits in `memory` at this batch (0: not even one token).

    None means any context fits: no cache at all, or only sliding layers whose full windows fit, since longer
    contexts overwrite the same window-sized buffers. A model with any full layer always has a limit. A hybrid's
    linear state (batch x its bytes per sequence) comes off the budget first; a model whose layers are all linear
    fits any context once that state fits, none otherwise.
    """
    groups = kv_layer_groups(model, check_dtype(dtype))
    memory -= batch * linear_state_bytes(model)
    if memory < 0:
        return 0
    if not groups:
        return None

    def total(context: int) -> int:
        return sum(g.total_bytes(context, batch) for g in groups)

    growing = sum(g.bytes_per_token for g in groups if g.window is None) * batch  # bytes per token past every window
    if growing == 0:  # every layer slides
        longest = max(g.window for g in groups)  # type: ignore[type-var]
        if total(longest) <= memory:
            return None
        hi = longest
    else:
        hi = memory // growing  # total(context) >= context x growing
    lo = 0  # total(0) = 0 fits; total is non-decreasing, so bisect for the last context that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if total(mid) <= memory else (lo, mid - 1)
    return lo


def max_batch(model: ModelConfig, context: int, dtype: str, memory: int) -> int | None:
    """Largest batch whose cache (with a hybrid's linear state) fits in `memory` at this context (0: not even one
    sequence); None without a cache."""
    per_sequence = kv_total_bytes(model, context, 1, check_dtype(dtype)) + linear_state_bytes(model)
    return None if per_sequence == 0 else memory // per_sequence
