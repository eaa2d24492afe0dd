"""A serving batch's tensors, one sequence at a time, and its float64 check sequence by sequence.

Sequence i has q_i (1, Hq, q_lens[i], D) and k_i, v_i (1, Hkv, kv_lens[i], D), standard normal from a seed. Every
backend's layout (packed, padded, nested, paged) is built from these, so the reference of sequence i is the dense
float64 attention of (q_i, k_i, v_i) with the case's mask, bottom-right aligned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.problem.shapes import AttentionShape
from bench.reference import TOLERANCES, Check, compare_to_reference, reference_attention
from bench.serving.workload import Workload


@dataclass(frozen=True)
class Sequences:
    q: list[torch.Tensor]  # each (1, Hq, q_len, D)
    k: list[torch.Tensor]  # each (1, Hkv, kv_len, D)
    v: list[torch.Tensor]

    @property
    def device(self) -> torch.device:
        return self.q[0].device


def make_sequences(shape: AttentionShape, w: Workload, device: str, seed: int) -> Sequences:
    gen = torch.Generator(device=device).manual_seed(seed)

    def draw(heads: int, length: int) -> torch.Tensor:
        return torch.randn((1, heads, length, shape.head_dim), generator=gen, device=device, dtype=shape.torch_dtype)

    q, k, v = [], [], []
    for q_len, kv_len in zip(w.q_lens, w.kv_lens, strict=True):
        q.append(draw(shape.n_heads, q_len))
        k.append(draw(shape.n_kv_heads, kv_len))
        v.append(draw(shape.n_kv_heads, kv_len))
    return Sequences(q, k, v)


def references(shape: AttentionShape, seqs: Sequences) -> list[torch.Tensor]:
    """The float64 reference of every sequence on its own."""
    return [reference_attention(q, k, v, mask=shape.mask)
            for q, k, v in zip(seqs.q, seqs.k, seqs.v, strict=True)]


def check_sequences(outs: list[torch.Tensor], refs: list[torch.Tensor]) -> Check:
    """Every sequence's output against its reference: ok only if all are; the error is the largest."""
    worst: Check | None = None
    for out, ref in zip(outs, refs, strict=True):
        if out.shape != ref.shape:
            return Check(False, float("inf"), *TOLERANCES[out.dtype])
        one = compare_to_reference(out, ref)
        if not one.ok:
            return one
        if worst is None or one.max_abs_err > worst.max_abs_err:
            worst = one
    assert worst is not None
    return worst


def offsets(lengths: tuple[int, ...] | list[int], device: torch.device | str) -> torch.Tensor:
    """Cumulative lengths (0, l0, l0 + l1, ...) as int32, the packed layout's sequence boundaries."""
    out = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    out[1:] = torch.cumsum(torch.tensor(lengths), 0)
    return out.to(device)


def packed(parts: list[torch.Tensor]) -> torch.Tensor:
    """Sequences (1, H, L_i, D) -> one packed (sum L_i, H, D), the varlen layout."""
    return torch.cat([p[0].transpose(0, 1) for p in parts], dim=0).contiguous()  # (T, H, D)


def unpacked(out: torch.Tensor, lengths: tuple[int, ...]) -> list[torch.Tensor]:
    """A packed (T, H, D) output back to sequences (1, H, L_i, D)."""
    return [part.transpose(0, 1).unsqueeze(0) for part in torch.split(out, list(lengths), dim=0)]
