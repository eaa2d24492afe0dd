"""Ragged and mixed batches with a contiguous cache: each backend in the layout its users give it, named by its
registry line (Backend.layouts, bench.backends.base.Layout):

  per-sequence    one call per sequence (nothing padded, one small score matrix each): naive
  nested          nested jagged tensors (torch's ragged layout; torch picks the kernel), where torch supports them: sdpa
  padded          a padded batch (B, H, longest, D) with a padding mask: padding tokens are computed and thrown away;
                  sdpa's forced kernels
  packed          every sequence packed into one (1, H, total, D) call under a document mask (block-sparse): flex;
                  in query blocks of one sequence's queries in a decode step (query_block)
  varlen          flash_attn_varlen_func on the packed (total, H, D) layout with cumulative sequence lengths (CUDA):
                  flash-attn
Mixed batches (prefill chunks beside decode steps) need each sequence's own query and key lengths, bottom-right
aligned: the MIXED_LAYOUTS (per-sequence, padded, packed, varlen) take them, nested tensors do not (their is_causal
is top-left aligned). Layouts are built once, untimed (a serving engine keeps its batch in its own layout); the
timed call is the attention call alone. Each returns (call, split): split(call()) is the list of per-sequence
outputs (1, Hq, q_len, D) that the check compares with the float64 reference.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench.backends import BACKENDS
from bench.backends.base import MIXED_LAYOUTS, RAGGED_LAYOUTS, Backend, Layout, Unsupported, bind
from bench.backends.flex import run_flex
from bench.backends.sdpa import run_sdpa
from bench.measure.rotation import Rotating
from bench.problem.masks import NO_MASK, Mask
from bench.problem.scores import NO_SCORE
from bench.problem.shapes import AttentionShape
from bench.serving.batch import Sequences, offsets, packed, unpacked
from bench.serving.workload import Workload

# (call, split): the call is Rotating, its cache (the K and V it reads, a paged pool and the index into it) apart as
# its cold inputs, so a decode step can be timed as a model's layer meets them (bench.measure.rotation)
Prepared = tuple[Rotating, Callable[[object], list[torch.Tensor]]]


Builder = Callable[[Backend, AttentionShape, Workload, Sequences], Prepared]


def ragged(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences) -> Prepared:
    """The timed call of `backend` on this batch and how to split its output; Unsupported when it cannot run it."""
    layout = backend.layout(RAGGED_LAYOUTS)
    if layout is None:
        raise Unsupported(f"{backend.name}: no serving layout (its registry line lists none of "
                          f"{', '.join(RAGGED_LAYOUTS)})")
    mixed = len(set(w.q_lens)) > 1 and any(q < k for q, k in zip(w.q_lens, w.kv_lens, strict=True))
    if mixed and layout not in MIXED_LAYOUTS:
        takers = ", ".join(b.name for b in BACKENDS.values() if b.layout(MIXED_LAYOUTS))
        raise Unsupported(f"{backend.name}: a mixed batch (prefill chunks and decode steps) needs per-sequence query "
                          f"and key lengths, each bottom-right aligned; only the {', '.join(MIXED_LAYOUTS)} layouts "
                          f"take that ({takers})")
    return RAGGED[layout](backend, shape, w, seqs)


def _per_sequence(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences) -> Prepared:
    fn = bind(backend.fn, shape.mask, NO_SCORE)  # serving batches take no score variant (bench.kinds.serving)
    b = w.batch

    def call(*kv):  # every sequence's K, then every sequence's V
        return [fn(q, k, v) for q, k, v in zip(seqs.q, kv[:b], kv[b:], strict=True)]
    return Rotating(call, (*seqs.k, *seqs.v)), lambda outs: outs


def masked(ok: torch.Tensor, pos_q: torch.Tensor, pos_k: torch.Tensor, mask: Mask) -> torch.Tensor:
    """`ok` where the case's mask also lets the query at position pos_q see the key at pos_k of its sequence
    (Mask.allows; no in-place ops: flex's mask_mod runs under vmap)."""
    return ok if mask == NO_MASK else ok & mask.allows(pos_q, pos_k)


def padding_mask(shape: AttentionShape, w: Workload, device: torch.device, kv_width: int | None = None
                 ) -> torch.Tensor:
    """(B, 1, longest q, kv_width) bool (kv_width: the longest context unless given): each sequence's own mask
    inside its lengths. A padding query row sees the first key only, so that no row is fully masked (kernels return
    NaN there); its output is discarded."""
    lq, lk = max(w.q_lens), kv_width or max(w.kv_lens)
    q_len = torch.tensor(w.q_lens, device=device).view(-1, 1, 1)  # (B, 1, 1)
    kv_len = torch.tensor(w.kv_lens, device=device).view(-1, 1, 1)
    a = torch.arange(lq, device=device).view(1, -1, 1)  # (1, lq, 1)
    j = torch.arange(lk, device=device).view(1, 1, -1)  # (1, 1, lk)
    ok = masked(j < kv_len, a + kv_len - q_len, j, shape.mask)  # (B, lq, lk)
    ok = ok | ((a >= q_len) & (j == 0))  # (B, lq, lk)
    return ok.unsqueeze(1)  # (B, 1, lq, lk)


def pad(parts: list[torch.Tensor], length: int) -> torch.Tensor:
    """Sequences (1, H, L_i, D) -> (B, H, length, D), zeros after each sequence."""
    out = parts[0].new_zeros((len(parts), parts[0].shape[1], length, parts[0].shape[3]))
    for i, p in enumerate(parts):
        out[i, :, :p.shape[2]] = p[0]
    return out


def _padded(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences) -> Prepared:
    q = pad(seqs.q, max(w.q_lens))  # (B, Hq, longest q, D)
    k, v = pad(seqs.k, max(w.kv_lens)), pad(seqs.v, max(w.kv_lens))  # (B, Hkv, longest kv, D)
    kwargs = {"attn_mask": padding_mask(shape, w, q.device), "enable_gqa": shape.n_kv_heads != shape.n_heads}

    def call(k, v):
        return run_sdpa(backend.name, q, k, v, kwargs)
    return Rotating(call, (k, v)), lambda out: [out[i:i + 1, :, :n] for i, n in enumerate(w.q_lens)]


def nested(parts: list[torch.Tensor]) -> torch.Tensor:
    """Sequences (1, H, L_i, D) -> a nested jagged tensor (B, H, j, D), from the packed values (no copy after)."""
    return jagged(packed(parts), [p.shape[2] for p in parts])


def jagged(values: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Packed values (T, H, D) of sequences of `lengths` -> a nested jagged tensor (B, H, j, D) over them (a view)."""
    njt = torch.nested.nested_tensor_from_jagged(values, offsets(lengths, values.device).long())  # (B, j, H, D)
    return njt.transpose(1, 2)


def nested_kwargs(backend: Backend, shape: AttentionShape, w: Workload) -> dict:
    """SDPA's arguments for nested jagged inputs, or Unsupported when the mask cannot be said with them."""
    if shape.mask.window is not None:
        raise Unsupported(f"{backend.name} on nested jagged tensors: no window mask (SDPA takes only is_causal "
                          "with them)")
    prefill = w.q_lens == w.kv_lens
    if shape.causal and not prefill and max(w.q_lens) > 1:
        raise Unsupported(f"{backend.name} on nested jagged tensors: is_causal is top-left aligned, and decoding "
                          "several queries against a longer cache needs bottom-right")
    # a single query sees its whole cache under a bottom-right causal mask: no mask then
    return {"is_causal": shape.causal and prefill, "enable_gqa": shape.n_kv_heads != shape.n_heads}


def split_nested(out: torch.Tensor) -> list[torch.Tensor]:
    """A nested (B, Hq, j, D) output -> sequences (1, Hq, L_i, D)."""
    return [t.transpose(0, 1).unsqueeze(0) for t in out.transpose(1, 2).unbind()]


def _nested(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences) -> Prepared:
    kwargs = nested_kwargs(backend, shape, w)
    q = nested(seqs.q)
    k_values, v_values = packed(seqs.k), packed(seqs.v)  # (T, Hkv, D): the cache, as nested tensors store it

    def views(k_values, v_values):
        return jagged(k_values, list(w.kv_lens)), jagged(v_values, list(w.kv_lens))
    probe_nested(backend, q, *views(k_values, v_values), kwargs)

    def call(k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)
    return Rotating(call, (k_values, v_values), views), split_nested


def probe_nested(backend: Backend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kwargs: dict) -> None:
    """One call, untimed: when torch refuses nested inputs it logs its reasons, which become the Unsupported's."""
    caught: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: caught.append(record.getMessage().strip())  # type: ignore[method-assign]
    log = logging.getLogger("torch.nested._internal.sdpa")
    log.addHandler(handler)
    try:
        F.scaled_dot_product_attention(q, k, v, **kwargs)
    except (RuntimeError, ValueError, NotImplementedError) as err:
        why = "; ".join(m for m in caught if m and not m.endswith("because:")) or str(err).splitlines()[0]
        raise Unsupported(f"{backend.name} on nested jagged tensors (torch {torch.__version__}): {why}") from None
    finally:
        log.removeHandler(handler)


def _positions(w: Workload, queries: bool, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per packed token: its sequence and its position in that sequence (queries sit at the end of it)."""
    seq, pos = [], []
    for i, (q_len, kv_len) in enumerate(zip(w.q_lens, w.kv_lens, strict=True)):
        n = q_len if queries else kv_len
        seq.append(torch.full((n,), i))
        pos.append(torch.arange(n) + (kv_len - q_len if queries else 0))
    return torch.cat(seq).to(device), torch.cat(pos).to(device)


FLEX_Q_BLOCK = 128  # flex's default rows per query block


def query_block(w: Workload) -> int:
    """Rows per query block of flex's packed and paged masks. When every sequence brings the same few queries (a
    decode step, speculative or not), one sequence's: a block spanning several sequences would be checked against
    every one of their keys, B times the work (B 4, 4,096 keys each, fp32, one core: 4.2-5.3 -> 2.1-2.9 ms). Else
    flex's 128: prefill sequences fill their own blocks but at the edges."""
    q_lens = set(w.q_lens)
    return q_lens.pop() if len(q_lens) == 1 and max(w.q_lens) < FLEX_Q_BLOCK else FLEX_Q_BLOCK


@functools.lru_cache(maxsize=8)
def document_mask(w: Workload, mask: Mask, device: str):
    """Flex's block mask for the packed batch: a query sees the keys of its own sequence that the mask allows.
    Cached, so the check and the timed call share one mask_mod (and one compiled kernel)."""
    from torch.nn.attention.flex_attention import create_block_mask

    seq_q, pos_q = _positions(w, True, device)
    seq_k, pos_k = _positions(w, False, device)

    def document(b, h, q_idx, kv_idx):
        return masked(seq_q[q_idx] == seq_k[kv_idx], pos_q[q_idx], pos_k[kv_idx], mask)

    return create_block_mask(document, None, None, len(seq_q), len(seq_k), device=device,
                             BLOCK_SIZE=(query_block(w), 128))


def _packed(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences) -> Prepared:
    block_mask = document_mask(w, shape.mask, str(seqs.device))
    # (1, H, total, D), contiguous: a strided view would be copied inside every timed call (a server keeps its
    # batch in its kernel's layout)
    q = packed(seqs.q).transpose(0, 1).unsqueeze(0).contiguous()  # (1, Hq, total q, D)
    k = packed(seqs.k).transpose(0, 1).unsqueeze(0).contiguous()  # (1, Hkv, total kv, D)
    v = packed(seqs.v).transpose(0, 1).unsqueeze(0).contiguous()
    key = ("document", w, shape.mask)

    def call(k, v):
        return run_flex(q, k, v, block_mask, key)
    return Rotating(call, (k, v)), lambda out: [t.contiguous() for t in torch.split(out, list(w.q_lens), dim=2)]


def flash_window(shape: AttentionShape) -> tuple[int, int]:
    """flash-attn's (left, right): a window of w is itself and the w-1 keys before it."""
    return (shape.mask.window - 1, 0) if shape.mask.window is not None else (-1, -1)


def flash_import(backend: Backend, name: str, head_dim: int):
    """A function of the flash_attn package, or Unsupported saying how to get it; checks the head dim as the dense
    backend does."""
    try:
        import flash_attn
    except ImportError as err:
        raise Unsupported(f"{backend.name}: package flash_attn not importable ({err}); pip install "
                          "'attnbench[flash]' on a CUDA machine") from None
    if head_dim > 256 or head_dim % 8:
        raise Unsupported(f"{backend.name}: head_dim must be a multiple of 8 up to 256, not {head_dim}")
    return getattr(flash_attn, name)


def _varlen(backend: Backend, shape: AttentionShape, w: Workload, seqs: Sequences) -> Prepared:
    varlen = flash_import(backend, "flash_attn_varlen_func", shape.head_dim)
    q, k, v = packed(seqs.q), packed(seqs.k), packed(seqs.v)  # (T, H, D)
    cu_q, cu_k = offsets(w.q_lens, q.device), offsets(w.kv_lens, q.device)
    # varlen's causal mask is bottom-right aligned per sequence (flash-attn >= 2.1), as a mixed batch needs
    kwargs = {"causal": shape.causal, "window_size": flash_window(shape)}

    def call(k, v):
        return varlen(q, k, v, cu_q, cu_k, max(w.q_lens), max(w.kv_lens), **kwargs)
    return Rotating(call, (k, v)), lambda out: unpacked(out, w.q_lens)



# The one place a ragged layout meets its builder: a backend's registry line names the layout, never this module.
RAGGED: dict[Layout, Builder] = {"per-sequence": _per_sequence, "nested": _nested, "padded": _padded,
                                 "packed": _packed, "varlen": _varlen}
