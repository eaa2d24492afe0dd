"""The mask: which keys each query sees, as one value (`Mask`) that every backend and the reference receive whole.

The rule, stated once here and read everywhere else: with off = Skv - Sq (bottom-right alignment, as flash-attn >= 2.1
and decoding need), query i sits at position p = i + off and key j at position j, and sees the keys lo <= j <= hi:
  causal:     hi = p                   (no key after itself)
  window(w):  lo = p - w + 1           (itself and the w-1 keys before it)
  chunk(C):   lo = floor(p / C) * C    (Llama-4's chunked local attention: the keys are cut into blocks of C from key 0,
                                        a query sees its own block up to itself)
and the sequence's ends bound the rest: lo >= 0, hi <= Skv - 1 (no mask: every key). A window or a chunk implies
causal; combined, the later lo wins. A query with lo > hi sees nothing (p < 0, when Sq > Skv).
`Mask.span` is the rule at any positions (ints, numpy arrays, tensors, flex's index scalars); `Mask.bounds` is it over a
case's queries, the arrays (p, lo, hi) the pair counts (`Mask.pairs`, bench.counts.pairs) sum and intersect;
`Mask.allows` compares a key with the span, and the boolean matrix (`Mask.visible`), flex's mask_mod and the serving
layouts' masks are built from it.

A new mask variant is a field here (its term in `span`, `shorter`, `kind`, `label`/`parse`, and its name in
MASK_VARIANTS when backends opt in to it), plus the backends that run it: naive, flex (its mask_mod is `allows`),
SDPA (a boolean mask) and the float64 reference build it from `allows` already, and a shape holds the Mask whole
(bench.problem.shapes; a record's `mask` column is its label). Nothing here imports torch or numpy at module level.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import torch


# the masks a backend opts in to by naming them in its `variants` trait (bench.problem.scores.OPT_IN_VARIANTS); causal
# and window are every backend's contract
MASK_VARIANTS: tuple[str, ...] = ("chunk",)


class MaskError(InputError):
    """An unknown or malformed mask."""


def _size(name: str, value: object) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise MaskError(f"{name}={value!r} must be a positive integer")


@dataclass(frozen=True)
class Mask:
    """none: Mask(); causal: Mask(causal=True); window w: Mask(window=w); chunk C: Mask(chunk=C)."""

    causal: bool = False
    window: int | None = None  # sliding window in keys, itself included
    chunk: int | None = None  # chunked local attention: block size in keys

    def __post_init__(self) -> None:
        _size("window", self.window)
        _size("chunk", self.chunk)
        if self.window is not None or self.chunk is not None:  # a window or a chunk implies causal
            object.__setattr__(self, "causal", True)

    @classmethod
    def parse(cls, text: str) -> Mask:
        """'none' | 'causal' | 'window:256' | 'chunk:8192', or several joined by '+' (window:256+chunk:64)."""
        fields: dict[str, Any] = {}
        for part in text.strip().split("+"):
            kind, _, size = part.strip().partition(":")
            if kind in ("window", "chunk"):
                if not size:
                    raise MaskError(f"mask {kind!r} needs a size, e.g. {kind}:256")
                try:
                    fields[kind] = int(size)
                except ValueError:
                    raise MaskError(f"{kind} size {size!r} is not an integer") from None
            elif kind == "causal" and not size:
                fields["causal"] = True
            elif kind != "none" or size or "+" in text:
                raise MaskError(f"unknown mask {text!r}; expected none, causal, window:<size> or chunk:<size>")
        return cls(**fields)

    @property
    def kind(self) -> str:
        """none / causal / window / chunk: the one kind of a single-term mask."""
        return "chunk" if self.chunk is not None else "window" if self.window is not None else \
            "causal" if self.causal else "none"

    @property
    def label(self) -> str:
        """The text `parse` reads back: none, causal, window:256, chunk:8192 (the case id's and results' mask)."""
        parts = [f"window:{self.window}"] * (self.window is not None) \
            + [f"chunk:{self.chunk}"] * (self.chunk is not None)
        return "+".join(parts) or ("causal" if self.causal else "none")

    @property
    def variants(self) -> tuple[str, ...]:
        """The variant names (MASK_VARIANTS) a backend must list to run this mask: causal and window are every
        backend's contract, a chunk is opt-in."""
        return tuple(name for name in MASK_VARIANTS if getattr(self, name) is not None)

    def span(self, p: Any) -> tuple[Any, Any]:
        """The rule (module docstring): (lo, hi), the first and last key the query at aligned position p sees, before
        the sequence's ends cut them; None where the mask sets no bound. p: an int, a numpy array or a tensor."""
        hi = p if self.causal else None
        lo = None
        if self.window is not None:
            lo = p - self.window + 1
        if self.chunk is not None:
            start = p // self.chunk * self.chunk
            lo = start if lo is None else _later(lo, start)
        return lo, hi

    def bounds(self, seq_q: int, seq_kv: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(p, lo, hi), int64 arrays over the queries: each one's aligned position and the keys [lo, hi] it sees, cut
        to the keys there are (lo > hi: none)."""
        import numpy as np

        p = np.arange(seq_q, dtype=np.int64) + (seq_kv - seq_q)
        lo, hi = self.span(p)
        lo = np.zeros(seq_q, dtype=np.int64) if lo is None else np.maximum(lo, 0)
        hi = np.full(seq_q, seq_kv - 1, dtype=np.int64) if hi is None else np.minimum(hi, seq_kv - 1)
        return p, lo, hi

    def allows(self, q_pos: Any, k_pos: Any) -> Any:
        """Whether the query at aligned position q_pos (i + off) sees the key at k_pos: k_pos within `span(q_pos)`.
        Ints or tensors (broadcast), or flex's index scalars inside a mask_mod (no in-place ops: it runs under vmap)."""
        lo, hi = self.span(q_pos)
        ok = (k_pos >= 0) if hi is None else (k_pos <= hi)  # no mask: every key there is
        return ok if lo is None else ok & (k_pos >= lo)

    def visible(self, seq_q: int, seq_kv: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
        """Boolean (Sq, Skv) matrix, True where query i may attend to key j; None when nothing is masked."""
        if self == NO_MASK:
            return None
        return self.allows(*grid(seq_q, seq_kv, device))

    def pairs(self, seq_q: int, seq_kv: int) -> int:
        """Exact number of (query, key) pairs that are not masked out: the lengths of `bounds`' intervals, summed."""
        import numpy as np

        _, lo, hi = self.bounds(seq_q, seq_kv)
        return int(np.clip(hi - lo + 1, 0, None).sum())

    def shorter(self, case_kv: int, seq_kv: int) -> Mask:
        """This mask for a check shape of seq_kv keys cut from a case of case_kv: a window or chunk that really cuts
        the case's keys must cut the shorter ones too, or the check could not tell it from plain causal."""
        def cut(size: int | None) -> int | None:
            if size is None:
                return None
            return min(size, seq_kv) if size >= case_kv else min(size, max(1, seq_kv // 2))
        return dataclasses.replace(self, window=cut(self.window), chunk=cut(self.chunk))


NO_MASK = Mask()
CAUSAL = Mask(causal=True)


def _later(a: Any, b: Any) -> Any:
    """max(a, b) by arithmetic, so one expression serves ints, numpy arrays and tensors (flex's vmap included)."""
    return a + (b - a) * (b > a)


def grid(seq_q: int, seq_kv: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(p, j): the queries' aligned positions as an (Sq, 1) tensor and the keys' as a (1, Skv) one, which `allows`
    and a keep-set's `allows` broadcast to the (Sq, Skv) matrix."""
    import torch

    p = torch.arange(seq_q, device=device).view(-1, 1) + (seq_kv - seq_q)
    return p, torch.arange(seq_kv, device=device).view(1, -1)


def visible(seq_q: int, seq_kv: int, causal: bool, window: int | None, device: torch.device | str = "cpu",
            chunk: int | None = None) -> torch.Tensor | None:
    """Mask(causal, window, chunk).visible(seq_q, seq_kv, device), by its keywords."""
    return Mask(causal, window, chunk).visible(seq_q, seq_kv, device)


def visible_pairs(seq_q: int, seq_kv: int, causal: bool, window: int | None, chunk: int | None = None) -> int:
    """Mask(causal, window, chunk).pairs(seq_q, seq_kv), by its keywords."""
    return Mask(causal, window, chunk).pairs(seq_q, seq_kv)
