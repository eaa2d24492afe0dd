"""The sparsity: which (query, key) pairs a sparse attention keeps, as one value (`Sparsity`) that a case carries and
every backend and the reference receive whole, with its keep-set in tensors (bench.problem.keepset.KeepSet).

A sparsity is an explicit keep-set ANDed with the case's mask (bench.problem.masks): the float64 reference is the dense
reference under that combined mask, and every backend is handed the same keep-set. Positions are the mask's
(bench.problem.masks): query i at its aligned position p, key j at j.
  none               every pair the mask leaves: today's dense case (its case ids carry no sparsity)
  block:B:D          the keys, and the query positions, are cut into blocks of B from position 0; in each row of
                     query blocks, D x n (rounded half up, at least one) of the n key blocks the mask leaves visible
                     are kept: always the diagonal block (the query's own: under a causal mask it holds the query
                     itself) and the rest drawn with a fixed seed from (Skv, B, D, the mask) alone, so every backend,
                     the check and a decode step at the same context see the same blocks. D may be a fraction (1/8).
  docs:N             N packed documents of equal length L = Skv // N (the last takes the remainder): query p sees key j
                     iff both lie in one document (varlen training batches, as a mask)
  global:G+window:W  G global tokens and a band: key j is kept iff j < G (every query sees the globals), p < G (a
                     global query sees every key) or |p - j| < W (under a causal mask: itself and the W - 1 keys before
                     it, as the mask's window); Longformer's and BigBird's shape
  topk:K[:HxD]       token selection (DeepSeek-V3.2's sparse attention, DSA): an indexer of H heads of dim D
                     (bench.problem.indexer) scores every key the mask leaves and each query keeps its K best (all of
                     them
                     where fewer are visible), the same keys for all its heads. Without HxD: H = max(1, Hq // 4) and
                     D = max(16, head_dim // 2), which keeps DSA's ratio of indexer to attention FLOPs per pair (1/16)
  tree               a speculative-decoding draft's tree (bench.problem.draft): each of the Sq draft tokens keeps the
                     cache (the keys before the draft) and its own path to a root; never parsed from text (--draft
                     sweeps drafts, bench.kinds.draft), its `parents` set by the draft
A sparsity fixes an attended budget while the length varies (`budget`): a density (block D, docs 1/N) or tokens per
query (global G + W under a causal mask, topk K). Nothing here imports torch or numpy: plans read it.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass
from fractions import Fraction

from bench.errors import InputError, positive_int
from bench.problem.masks import Mask

# what a backend's `sparsity` trait lists (tree: a draft tree's keep-set, bench.kinds.draft)
SPARSITY_KINDS: tuple[str, ...] = ("block", "docs", "global", "topk", "tree")
SPARSITY_SEED = 4321  # the block kind's draw: one seed, so the check and every backend see the same blocks
DSA_FLOP_RATIO = 16  # DeepSeek-V3.2: attention's FLOPs per (query, key) pair are about 16x its indexer's


class SparsityError(InputError):
    """An unknown or malformed sparsity, or one the case's lengths cannot take."""


def _int(text: str, what: str, spec: str) -> int:
    return positive_int(text, what, f"sparsity {spec!r}", SparsityError)


def _density(text: str, spec: str) -> float:
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise SparsityError(f"sparsity {spec!r}: density {text!r} is not a number (e.g. 0.25 or 1/4)") from None
    if not 0 < value <= 1:
        raise SparsityError(f"sparsity {spec!r}: density {value:g} is outside (0, 1]")
    return value


@dataclass(frozen=True)
class Sparsity:
    """none: Sparsity(); Sparsity("block", block=128, density=0.25); Sparsity("docs", docs=8);
    Sparsity("global", global_tokens=64, window=256); Sparsity("topk", k=2048[, index_heads=64, index_dim=128])."""

    kind: str = "none"
    block: int | None = None
    density: float | None = None
    docs: int | None = None
    global_tokens: int | None = None
    window: int | None = None
    k: int | None = None
    index_heads: int | None = None  # topk: the indexer's heads and head dim (None: the defaults above)
    index_dim: int | None = None
    parents: tuple[int, ...] | None = None  # tree: the draft's parent list (bench.problem.draft)

    def __post_init__(self) -> None:
        need = {"none": (), "block": ("block", "density"), "docs": ("docs",), "global": ("global_tokens", "window"),
                "topk": ("k",), "tree": ("parents",)}
        if self.kind not in need:
            raise SparsityError(f"unknown sparsity kind {self.kind!r}; expected none, {', '.join(SPARSITY_KINDS)}")
        allowed = set(need[self.kind]) | ({"index_heads", "index_dim"} if self.kind == "topk" else set())
        for name in ("block", "density", "docs", "global_tokens", "window", "k", "index_heads", "index_dim",
                     "parents"):
            value = getattr(self, name)
            if name in need[self.kind] and value is None:
                raise SparsityError(f"sparsity {self.kind} needs {name}")
            if value is not None and name not in allowed:
                raise SparsityError(f"sparsity {self.kind} takes no {name}")
        if (self.index_heads is None) != (self.index_dim is None):
            raise SparsityError("a top-K indexer needs both its heads and its head dim (topk:K:HxD), or neither")
        if self.density is not None and not 0 < self.density <= 1:
            raise SparsityError(f"sparsity {self.kind}: density {self.density:g} is outside (0, 1]")

    @classmethod
    def parse(cls, text: str) -> Sparsity:
        """'none' | 'block:128:0.25' (or block:128:1/4) | 'docs:8' | 'global:64+window:256' | 'topk:2048' |
        'topk:2048:64x128'."""
        spec = text.strip()
        kind, _, rest = spec.partition(":")
        parts = rest.split(":") if rest else []
        if kind == "none" and not rest:
            return cls()
        if kind == "block" and len(parts) == 2:
            return cls("block", block=_int(parts[0], "block size", spec), density=_density(parts[1], spec))
        if kind == "docs" and len(parts) == 1:
            return cls("docs", docs=_int(parts[0], "document count", spec))
        if kind == "global" and len(parts) == 2 and parts[0].count("+") == 1 and parts[0].endswith("+window"):
            tokens = parts[0].removesuffix("+window")
            return cls("global", global_tokens=_int(tokens, "global token count", spec),
                       window=_int(parts[1], "window", spec))
        if kind == "tree":
            raise SparsityError(f"sparsity {spec!r}: a draft tree is swept by --draft (bench.problem.draft), not "
                                "--sparsity")
        if kind == "topk" and len(parts) in (1, 2):
            k = _int(parts[0], "K", spec)
            if len(parts) == 1:
                return cls("topk", k=k)
            heads, x, dim = parts[1].partition("x")
            if not x:
                raise SparsityError(f"sparsity {spec!r}: the indexer is HEADSxDIM, e.g. topk:{k}:64x128")
            return cls("topk", k=k, index_heads=_int(heads, "indexer heads", spec),
                       index_dim=_int(dim, "indexer head dim", spec))
        raise SparsityError(f"unknown sparsity {text!r}; expected none, block:B:D, docs:N, global:G+window:W or "
                            "topk:K[:HxD]")

    @property
    def label(self) -> str:
        """The text `parse` reads back (the case id's and the results' sparsity)."""
        if self.kind == "block":
            short = f"{self.density:g}"  # 0.125; a density that :g would round (1/3) keeps all its digits
            return f"block:{self.block}:{short if float(short) == self.density else repr(self.density)}"
        if self.kind == "docs":
            return f"docs:{self.docs}"
        if self.kind == "global":
            return f"global:{self.global_tokens}+window:{self.window}"
        if self.kind == "topk":
            return f"topk:{self.k}" + (f":{self.index_heads}x{self.index_dim}" if self.index_heads else "")
        if self.kind == "tree":
            return f"tree:{len(self.parents)}"  # type: ignore[arg-type]
        return "none"

    @property
    def sparse(self) -> bool:
        return self.kind != "none"

    @property
    def static(self) -> bool:
        """Whether the keep-set follows from the lengths alone (topk's follows from the inputs, through the indexer:
        a model selects afresh on every forward)."""
        return self.kind != "topk"

    def check(self, seq_q: int, seq_kv: int) -> None:
        """SparsityError when a case of these lengths cannot take this sparsity (one line, naming both)."""
        where = f"sparsity {self.label} at seq_q={seq_q}, seq_kv={seq_kv}"
        if self.kind == "block" and seq_kv % self.block:  # type: ignore[operator]
            raise SparsityError(f"{where}: block size {self.block} does not divide seq_kv={seq_kv} (the keys are cut "
                                "into whole blocks)")
        if self.kind == "docs" and self.docs > seq_kv:  # type: ignore[operator]
            raise SparsityError(f"{where}: {self.docs} documents do not fit in {seq_kv} tokens")
        if self.kind == "global" and self.global_tokens >= seq_kv:  # type: ignore[operator]
            raise SparsityError(f"{where}: {self.global_tokens} global tokens leave no other key (every key would "
                                "be global: the dense case)")
        if self.kind == "topk" and self.k > seq_kv:  # type: ignore[operator]
            raise SparsityError(f"{where}: K={self.k} exceeds the {seq_kv} keys there are to select from")
        if self.kind == "tree" and not len(self.parents) == seq_q < seq_kv:  # type: ignore[arg-type]
            raise SparsityError(f"{where}: a draft of {len(self.parents)} tokens needs seq_q = {len(self.parents)} "  # type: ignore[arg-type]
                                "and at least one cached key (seq_kv > seq_q)")

    def shorter(self, case_kv: int, seq_kv: int) -> Sparsity:
        """This sparsity for a check shape of seq_kv keys cut from a case of case_kv (as
        bench.problem.masks.Mask.shorter):
        what really cuts the case's keys cuts the shorter ones too, and the check's lengths can take it."""
        def cut(size: int, floor: int = 1) -> int:
            return min(size, seq_kv) if size >= case_kv else min(size, max(floor, seq_kv // 4))

        if self.kind == "block":
            block = min(self.block, max(1, seq_kv // 4))  # type: ignore[type-var]
            while seq_kv % block:
                block -= 1
            return dataclasses.replace(self, block=block)
        if self.kind == "docs":
            return dataclasses.replace(self, docs=min(self.docs, seq_kv))  # type: ignore[type-var]
        if self.kind == "global":
            return dataclasses.replace(self, global_tokens=min(cut(self.global_tokens), seq_kv - 1),  # type: ignore[arg-type]
                                       window=cut(self.window))  # type: ignore[arg-type]
        if self.kind == "topk":
            return dataclasses.replace(self, k=cut(self.k))  # type: ignore[arg-type]
        return self

    def indexer_dims(self, n_heads: int, head_dim: int) -> tuple[int, int]:
        """topk: the indexer's (heads, head dim): as given, else DSA's proportion (module docstring)."""
        if self.index_heads is not None:
            return self.index_heads, self.index_dim  # type: ignore[return-value]
        return max(1, n_heads // 4), max(16, head_dim // 2)

    @property
    def budget(self) -> tuple[str, float] | None:
        """The attended budget this value fixes: ('density', D) or ('tokens', tokens per query); None for none."""
        if self.kind == "block":
            return "density", float(self.density)  # type: ignore[arg-type]
        if self.kind == "docs":
            return "density", 1 / self.docs  # type: ignore[operator]
        if self.kind == "global":
            return "tokens", float(self.global_tokens + self.window)  # type: ignore[operator]
        if self.kind == "topk":
            return "tokens", float(self.k)  # type: ignore[arg-type]
        return None

    @property
    def budget_label(self) -> str:
        """'density 1/4' or '512 tokens per query' (the figures' panels; one budget, several methods)."""
        budget = self.budget
        if budget is None:
            return "dense"
        unit, value = budget
        if unit == "density":
            return f"density {fraction_label(value)}"
        return f"{int(value)} tokens per query"


NO_SPARSITY = Sparsity()


@functools.lru_cache(maxsize=64)
def block_table(sparsity: Sparsity, mask: Mask, seq_kv: int) -> tuple[tuple[int, ...], ...]:
    """block:B:D's kept key blocks of each row of query blocks (row r holds positions rB .. rB + B - 1), sorted: the
    diagonal block and round(D x n) - 1 more of the n blocks the mask leaves that row, drawn with a seed of
    (SPARSITY_SEED, Skv, B, D, mask, r) alone."""
    import numpy as np

    B, D = sparsity.block, sparsity.density
    assert B is not None and D is not None, "a block sparsity"
    rows = seq_kv // B
    starts = np.arange(rows, dtype=np.int64) * B
    _, lo, hi = mask.bounds(seq_kv, seq_kv)  # a row's candidates: from its first query's lo to its last's hi
    table = []
    for r in range(rows):
        first, last = int(lo[starts[r]]) // B, int(hi[starts[r] + B - 1]) // B
        others = [j for j in range(first, last + 1) if j != r]
        n_keep = max(1, int(D * (len(others) + 1) + 0.5))
        rng = random.Random(f"{SPARSITY_SEED}:{seq_kv}:{B}:{D!r}:{mask.label}:{r}")
        table.append(tuple(sorted([r, *rng.sample(others, min(len(others), n_keep - 1))])))
    return tuple(table)


def fraction_label(value: float) -> str:
    """0.125 -> '1/8', 0.0781 -> '0.078': a density as people write it."""
    frac = Fraction(value).limit_denominator(1024)
    if frac.numerator == 1 and abs(float(frac) - value) < 1e-9:
        return f"1/{frac.denominator}"
    return f"{value:.2g}"
