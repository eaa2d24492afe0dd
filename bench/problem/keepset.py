"""A case's keep-set in tensors (`KeepSet`): what a sparse backend and the float64 reference receive beside the mask.

The forms a backend may read (all of the same keep-set, built once per inputs):
  tokens   bool (1 or B, Sq, Skv): True where query i keeps key j, the mask already ANDed in (1 for a static
           sparsity, whose keep-set is the same for every sequence; B for topk, selected per sequence)
  blocks   block:B:D only: bool (Skv/B, Skv/B), row r = the query positions rB .. rB + B - 1 (aligned as the mask
           aligns them, bench.problem.masks), column c = keys cB .. cB + B - 1; True where the block is kept
  indices  topk only: int64 (B, Sq, K), the keys each query keeps, ascending, -1 where it sees fewer than K keys;
           the same keys for all of its heads
  tree     tree only: bool (Sq, Sq), row i = the draft tokens query i sees (itself and its ancestors), each row its
           parent's row and itself, built down the parent list
`allows(q_pos, k_pos, ...)` is the one definition: the boolean `tokens`, FlexAttention's mask_mod and a user kernel's
reading of it agree by construction. Sparsity semantics: bench.problem.sparsity.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.problem.masks import Mask, grid
from bench.problem.sparsity import Sparsity, block_table

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, eq=False)
class KeepSet:
    """The keep-set of one call: its sparsity and mask, its lengths, and (topk) the indices the indexer picked."""

    sparsity: Sparsity
    mask: Mask
    seq_q: int
    seq_kv: int
    device: Any = "cpu"
    indices: Any = None  # topk: (B, Sq, K) int64, -1 padded
    # what a backend derives from it once (FlexAttention's BlockMask, its build seconds, the pairs it executes):
    # one keep-set is one call's inputs, so it is built on its first call and reused by every later one
    derived: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.sparsity.kind == "topk" and self.indices is None:
            raise ValueError("a topk keep-set needs the indices its indexer picked (KeepSet.from_indices)")
        if self.sparsity.kind != "topk" and self.indices is not None:
            raise ValueError(f"sparsity {self.sparsity.label} is static: it takes no indices")

    @classmethod
    def static(cls, sparsity: Sparsity, mask: Mask, seq_q: int, seq_kv: int,
               device: torch.device | str = "cpu") -> KeepSet:
        """The keep-set of a static sparsity (block, docs, global): a function of the lengths alone."""
        sparsity.check(seq_q, seq_kv)
        return cls(sparsity, mask, seq_q, seq_kv, device)

    @classmethod
    def from_indices(cls, sparsity: Sparsity, mask: Mask, indices: torch.Tensor, seq_kv: int) -> KeepSet:
        """A topk keep-set from the (B, Sq, K) key indices each query keeps (-1: none), e.g.
        bench.problem.indexer.select's."""
        if indices.dim() != 3 or indices.shape[-1] != sparsity.k:
            raise ValueError(f"topk indices must be (B, Sq, K={sparsity.k}), not {tuple(indices.shape)}")
        return cls(sparsity, mask, indices.shape[1], seq_kv, indices.device, indices)

    @property
    def offset(self) -> int:
        return self.seq_kv - self.seq_q

    @functools.cached_property
    def blocks(self) -> torch.Tensor | None:
        """block:B:D's (Skv/B, Skv/B) kept-block table; None for the other kinds."""
        if self.sparsity.kind != "block":
            return None
        import torch

        table = block_table(self.sparsity, self.mask, self.seq_kv)
        out = torch.zeros(len(table), len(table), dtype=torch.bool)
        for r, kept in enumerate(table):
            out[r, list(kept)] = True
        return out.to(self.device)

    @functools.cached_property
    def tree(self) -> torch.Tensor | None:
        """tree's (Sq, Sq) table of the draft tokens each query sees; None for the other kinds."""
        if self.sparsity.kind != "tree":
            return None
        import torch

        parents = self.sparsity.parents
        out = torch.zeros(len(parents), len(parents), dtype=torch.bool)  # type: ignore[arg-type]
        for i, parent in enumerate(parents):  # type: ignore[arg-type]
            if parent >= 0:  # a parent comes before its child: its row is complete
                out[i] = out[parent]
            out[i, i] = True
        return out.to(self.device)

    @functools.cached_property
    def tokens(self) -> torch.Tensor:
        """bool (1 or B, Sq, Skv): the pairs kept, the mask ANDed in."""
        import torch

        p, j = grid(self.seq_q, self.seq_kv, self.device)  # (Sq, 1) aligned positions, (1, Skv) keys
        visible = self.mask.allows(p, j)
        if self.sparsity.kind != "topk":
            return (self.allows(p, j) & visible).expand(self.seq_q, self.seq_kv).unsqueeze(0)
        idx = self.indices
        keep = torch.zeros(idx.shape[0], self.seq_q, self.seq_kv + 1, dtype=torch.bool, device=self.device)
        keep.scatter_(2, torch.where(idx < 0, self.seq_kv, idx), True)  # -1 lands in the extra column, dropped
        return keep[..., :self.seq_kv] & visible

    def allows(self, q_pos: Any, k_pos: Any, b: Any = 0, q_idx: Any = None, table: Any = None) -> Any:
        """Whether the sparsity keeps key k_pos for the query at aligned position q_pos (the mask not included):
        tensors that broadcast, or FlexAttention's index scalars. `table` stands in for the kind's lookup table
        (block: `blocks`; topk: `tokens`, read at [b, q_idx, k_pos]) when a caller keeps its own copy."""
        sp = self.sparsity
        if sp.kind == "docs":
            length, last = self.seq_kv // sp.docs, sp.docs - 1  # type: ignore[operator]
            return (q_pos // length).clamp(max=last) == (k_pos // length).clamp(max=last)
        if sp.kind == "global":
            return (k_pos < sp.global_tokens) | (q_pos < sp.global_tokens) | ((q_pos - k_pos).abs() < sp.window)
        if sp.kind == "block":
            table = self.blocks if table is None else table
            return table[q_pos // sp.block, k_pos // sp.block]
        if sp.kind == "topk":
            table = self.tokens if table is None else table
            return table[b, q_pos - self.offset if q_idx is None else q_idx, k_pos]
        if sp.kind == "tree":  # the cache, and the draft tokens on the query's path
            table = self.tree if table is None else table
            return (k_pos < self.offset) | table[q_pos - self.offset, (k_pos - self.offset).clamp(min=0)]
        return k_pos >= 0  # none: every key
