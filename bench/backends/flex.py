"""FlexAttention, compiled: block masks for causal, window and chunk, GQA native; softcap and ALiBi as score_mods,
sinks as one extra key (K = V = 0) whose score the score_mod sets to sigma_h: exact (it takes mass, adds no value).
This torch's flex_attention has no sink argument, and its compiled CPU kernel refuses return_lse, so the
log-sum-exp renormalisation attention-gym uses is not open here; the K/V copy with the extra key is in the timed call.

A sparse case's keep-set (bench.problem.keepset.KeepSet) becomes a BlockMask of FLEX_BLOCK blocks, built on the
keep-set's
first call and kept in it (`derived`: the BlockMask, its build seconds apart from the kernel's, the pairs its blocks
cover); its mask_mod is the mask's `allows` ANDed with the keep-set's, reading the block table, topk's token table
or a draft tree's table from one buffer per shape, so a new keep-set of the same shape reuses the compiled kernel.

torch.compile caches one graph per shape/dtype; the first call for a shape compiles (tens of seconds
on CPU), so callers must warm up before timing and report that first call apart.
"""

from __future__ import annotations

import functools
import time
import warnings

import torch

from bench.backends.base import Unsupported
from bench.counts.pairs import FLEX_BLOCK
from bench.problem.keepset import KeepSet
from bench.problem.masks import Mask
from bench.problem.scores import Score


def raise_recompile_limits() -> None:
    """Past the recompile limit dynamo silently runs eager flex, which materialises the whole score matrix (and on
    CPU, for a single query over keys short of a block, returns wrong values): a sweep touches many shapes, so the
    limit is raised and hitting it made an error instead."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 512)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4096)
    dynamo_config.fail_on_recompile_limit_hit = True


@functools.cache
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention

    raise_recompile_limits()
    return torch.compile(flex_attention, dynamic=False)  # one specialised kernel per shape


@functools.lru_cache(maxsize=64)
def _block_mask(seq_q: int, seq_kv: int, mask: Mask, device: str, sink: bool = False):
    """The block mask of `mask` (its `allows`, bottom-right aligned), with a sink key at index seq_kv that every
    query sees when `sink`. Even without a mask a (full) block mask: with block_mask=None compiled flex on CPU keeps
    O(S^2) intermediates alive, which is not what FlexAttention users pay."""
    from torch.nn.attention.flex_attention import create_block_mask

    off = seq_kv - seq_q

    def mask_mod(b, h, q_idx, kv_idx):
        return mask.allows(q_idx + off, kv_idx)

    if not sink:
        return create_block_mask(mask_mod, None, None, seq_q, seq_kv, device=device)

    def with_sink(b, h, q_idx, kv_idx):  # key seq_kv is the sink: every query sees it
        return mask_mod(b, h, q_idx, kv_idx) | (kv_idx == seq_kv)
    return create_block_mask(with_sink, None, None, seq_q, seq_kv + 1, device=device)


@functools.lru_cache(maxsize=64)
def _score_mod(score: Score, n_heads: int, off: int, device: str, sink_at: int | None = None):
    """(score_mod or None, the sink buffer or None) for the score's steps (softcap, ALiBi: Score.score_mod) and/or
    a sink key at index sink_at: one function per setting, so compiled graphs are reused; the sink logits are copied
    into the one captured buffer."""
    steps = score.score_mod(n_heads, device)
    if steps is None and sink_at is None:
        return None, None
    sink_buf = torch.zeros(n_heads, device=device, dtype=torch.float32) if sink_at is not None else None

    def mod(s, b, h, q_idx, kv_idx):
        if steps is not None:
            s = steps(s, h, q_idx + off, kv_idx)
        if sink_buf is not None:
            s = torch.where(kv_idx == sink_at, sink_buf[h].to(s.dtype), s)
        return s
    return mod, sink_buf


def flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Mask, score: Score,
                   sparse: KeepSet | None = None) -> torch.Tensor:
    Sq, Skv = q.shape[2], k.shape[2]
    if sparse is not None:  # a sparse call takes no score variant (bench.backends.attention)
        return run_flex(q, k, v, sparse_block_mask(sparse), (mask, sparse.sparsity))
    sink = score.sinks
    block_mask = _block_mask(Sq, Skv, mask, str(q.device), sink)
    score_mod, sink_buf = _score_mod(score, q.shape[1], Skv - Sq, str(q.device), Skv if sink else None)
    if sink:
        sink_buf.copy_(score.sink_logits)
        zero = k.new_zeros(k.shape[0], k.shape[1], 1, k.shape[3])
        k, v = torch.cat([k, zero], dim=2), torch.cat([v, zero], dim=2)  # (B, Hkv, Skv + 1, D): the sink key
    return run_flex(q, k, v, block_mask, (mask, score), score_mod)


def run_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask, mask_key: object,
             score_mod=None) -> torch.Tensor:
    """Compiled flex_attention under `block_mask` (GQA native). mask_key names the mask's structure: the first call
    of each (shapes, mask_key) is watched for torch's silent fallback to eager flex, later ones run bare."""
    gqa = k.shape[1] != q.shape[1]
    key = (q.shape, k.shape, q.dtype, str(q.device), q.requires_grad, mask_key)
    if key in _COMPILED_OK:  # checked once per shape below: keep the warnings machinery off the timed path
        return _compiled()(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = _compiled()(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)
        except (NotImplementedError, AssertionError) as err:
            raise Unsupported(f"flex: {str(err).splitlines()[0]}") from None
    if any("without torch.compile" in str(w.message) for w in caught):
        raise RuntimeError("flex: torch fell back to eager (unfused) flex_attention; refusing to report it")
    _COMPILED_OK.add(key)
    return out


_COMPILED_OK: set[tuple] = set()  # shapes whose call ran the compiled kernel (no eager fallback warning)


def sparse_block_mask(keep: KeepSet):
    """The keep-set's BlockMask, built on its first call (seconds and covered pairs kept in keep.derived); its table
    copied into the shape's buffer whenever another keep-set of the shape used it last."""
    mask_mod, buffer, table = _sparse_mask_mod(keep.sparsity, keep.mask, keep.seq_q, keep.seq_kv, str(keep.device),
                                               _table_shape(keep))
    if buffer is not None and _BUFFER_OWNER.get(id(buffer)) is not keep:
        buffer.copy_(table(keep))
        _BUFFER_OWNER[id(buffer)] = keep
    if "block_mask" in keep.derived:
        return keep.derived["block_mask"]
    from torch.nn.attention.flex_attention import create_block_mask

    sync = torch.cuda.synchronize if keep.device != "cpu" and torch.device(keep.device).type == "cuda" else None
    batch = None if keep.indices is None else keep.indices.shape[0]
    t0 = time.perf_counter()
    block_mask = create_block_mask(mask_mod, batch, None, keep.seq_q, keep.seq_kv, device=str(keep.device),
                                   BLOCK_SIZE=FLEX_BLOCK)
    if sync:
        sync()
    keep.derived.update(block_mask=block_mask, build_s=time.perf_counter() - t0,
                        pairs_per_sequence=_covered_pairs(block_mask, keep.seq_q, keep.seq_kv))
    return block_mask


TABLED = ("block", "topk", "tree")  # the sparsity kinds whose rule reads a table (the others: their lengths alone)


def _table_shape(keep: KeepSet) -> tuple[int, ...] | None:
    return tuple(_table(keep).shape) if keep.sparsity.kind in TABLED else None


def _table(keep: KeepSet) -> torch.Tensor:
    if keep.sparsity.kind == "block":
        return keep.blocks
    return keep.tree if keep.sparsity.kind == "tree" else keep.tokens


@functools.lru_cache(maxsize=64)
def _sparse_mask_mod(sparsity, mask: Mask, seq_q: int, seq_kv: int, device: str, table_shape: tuple | None):
    """(mask_mod, its buffer or None, how to fill the buffer from a keep-set): one per shape and sparsity, so the
    compiled kernel sees one function; the kind's rule is KeepSet.allows, with the buffer as its table."""
    off = seq_kv - seq_q
    buffer = None if table_shape is None else torch.zeros(table_shape, dtype=torch.bool, device=device)
    rule = KeepSet(sparsity, mask, seq_q, seq_kv, device, indices=None if sparsity.kind != "topk" else
                   torch.zeros(1, seq_q, sparsity.k, dtype=torch.long))  # its rule only: never its own tables

    def mask_mod(b, h, q_idx, kv_idx):
        p = q_idx + off
        return mask.allows(p, kv_idx) & rule.allows(p, kv_idx, b, q_idx, table=buffer)
    return mask_mod, buffer, _table


def _covered_pairs(block_mask, seq_q: int, seq_kv: int) -> float:
    """Pairs per sequence (and head) the BlockMask's blocks cover, partial and full, each whole within the matrix."""
    dense = block_mask.to_dense()  # (B|1, H|1, n_q, n_kv) 0/1: partial and full blocks
    n_q, n_kv = dense.shape[-2:]
    q_len = (seq_q - torch.arange(n_q) * FLEX_BLOCK).clamp(max=FLEX_BLOCK)
    kv_len = (seq_kv - torch.arange(n_kv) * FLEX_BLOCK).clamp(max=FLEX_BLOCK)
    area = q_len.view(-1, 1) * kv_len.view(1, -1)
    return float((dense.cpu().to(torch.int64) * area).sum() / dense.shape[0])


_BUFFER_OWNER: dict[int, KeepSet] = {}  # a buffer's id -> the keep-set whose table it holds
