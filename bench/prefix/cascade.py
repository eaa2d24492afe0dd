"""A shared-prefix case's tensors and its two methods: plain attention over every request's whole context, and
cascade attention, which attends the prefix once for the whole batch and each suffix apart, then merges.

Inputs (seeded, standard normal): q (B, Hq, Sq, D); the prefix's K/V once, (1, Hkv, P, D); each request's suffix
K/V, (B, Hkv, L, D). Plain attention reads the whole context (B, Hkv, P + L, D) that `Inputs.whole` builds, the
prefix copied into every request's cache as a plain KV cache holds it; its call is a dense backend on that shape.

Cascade, per KV head (query head h reads KV head h // G, G = Hq / Hkv):
  prefix part  every request's queries together, B * Sq rows, over the P prefix keys with no mask (every query of a
               suffix sees the whole prefix): one call whose K/V is read once;
  suffix part  each request's Sq queries over its own L keys under the shape's mask, bottom-right aligned within the
               suffix (query i sees suffix key j iff j <= i + L - Sq: the whole context's causal mask, less the prefix);
  merge        per query row and head, o = (e^{l1} o1 + e^{l2} o2) / (e^{l1} + e^{l2}), l the part's natural-log
               log-sum-exp of its scaled scores, computed as o2 + sigmoid(l1 - l2) (o1 - o2) in float32 (the same
               value; no exponential can overflow), then rounded to q's dtype.
A part is `part(q, k, v, mask) -> (o, lse)` with q (N, Hq, R, D), k and v (N, Hkv, S, D), lse (N, Hq, R) float32:
  naive  the textbook formula on grouped rows (the G query heads of a KV head as G * R rows of one matmul, K never
         repeated), its log-sum-exp computed in float32;
  sdpa   torch's CPU flash kernel (aten._scaled_dot_product_flash_attention_for_cpu, the kernel SDPA's flash backend
         runs on a CPU), which returns the log-sum-exp: grouped rows, the mask as an additive one; CPU only (torch
         exposes no such op for CUDA's kernels with GQA and a bottom-right mask);
  flex   compiled FlexAttention with return_aux=AuxRequest(lse=True) (return_lse is deprecated in torch 2.13), GQA
         native, block masks from bench.backends.flex; torch 2.13's compiled CPU kernel refuses the log-sum-exp, so
         on a CPU it is Unsupported with torch's words.
Scale 1/sqrt(D) everywhere.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.backends.base import Unsupported
from bench.problem.masks import NO_MASK, Mask
from bench.problem.shapes import AttentionShape

Part = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Mask], "tuple[torch.Tensor, torch.Tensor]"]


@dataclass(frozen=True)
class Inputs:
    """A shared-prefix batch's tensors (module docstring)."""

    q: torch.Tensor  # (B, Hq, Sq, D)
    k_prefix: torch.Tensor  # (1, Hkv, P, D)
    v_prefix: torch.Tensor
    k_suffix: torch.Tensor  # (B, Hkv, L, D)
    v_suffix: torch.Tensor

    def whole(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every request's whole context (B, Hkv, P + L, D), the prefix copied into each: plain attention's cache."""
        b = self.q.shape[0]
        k = torch.cat([self.k_prefix.expand(b, -1, -1, -1), self.k_suffix], dim=2)
        v = torch.cat([self.v_prefix.expand(b, -1, -1, -1), self.v_suffix], dim=2)
        return k, v


def make_inputs(shape: AttentionShape, device: str, seed: int) -> Inputs:
    assert shape.prefix is not None, "a shared-prefix shape"
    gen = torch.Generator(device=device).manual_seed(seed)
    b, hkv, d, p = shape.batch, shape.n_kv_heads, shape.head_dim, shape.prefix

    def draw(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=gen, device=device, dtype=shape.torch_dtype)
    return Inputs(draw(b, shape.n_heads, shape.seq_q, d), draw(1, hkv, p, d), draw(1, hkv, p, d),
                  draw(b, hkv, shape.seq_kv - p, d), draw(b, hkv, shape.seq_kv - p, d))


def merge(o1: torch.Tensor, l1: torch.Tensor, o2: torch.Tensor, l2: torch.Tensor) -> torch.Tensor:
    """The two parts' outputs (.., Dv) weighted by their log-sum-exps (..): o2 + sigmoid(l1 - l2) (o1 - o2)."""
    w = torch.sigmoid(l1.float() - l2.float()).unsqueeze(-1)  # e^{l1} / (e^{l1} + e^{l2})
    return (o2.float() + w * (o1.float() - o2.float())).to(o1.dtype)


def cascade(part: Part, x: Inputs, mask: Mask) -> torch.Tensor:
    """Cascade attention of the batch by `part` (module docstring): (B, Hq, Sq, Dv)."""
    b, hq, sq, d = x.q.shape
    rows = x.q.transpose(0, 1).reshape(1, hq, b * sq, d)  # every request's queries as one row block per head
    o1, l1 = part(rows, x.k_prefix, x.v_prefix, NO_MASK)  # the prefix, once for the batch
    o2, l2 = part(x.q, x.k_suffix, x.v_suffix, mask)  # each suffix apart
    o1 = o1.reshape(hq, b, sq, -1).transpose(0, 1)  # back to (B, Hq, Sq, Dv)
    l1 = l1.reshape(hq, b, sq).transpose(0, 1)
    return merge(o1, l1, o2, l2)


@functools.lru_cache(maxsize=8)
def _row_mask(mask: Mask, rows: int, keys: int, group: int, device: str, additive: torch.dtype | None = None
              ) -> torch.Tensor | None:
    """The mask of grouped rows (G * R, S): the R rows' bottom-right mask repeated for each of the G heads; None
    when every row sees every key. `additive`: as 0 / -inf in that dtype (SDPA's float mask)."""
    ok = mask.visible(rows, keys, device)
    if ok is None or bool(ok.all()):
        return None
    ok = ok.repeat(group, 1)
    return ok if additive is None else torch.zeros(ok.shape, dtype=additive, device=device).masked_fill(~ok, -torch.inf)


def _grouped(q: torch.Tensor, hkv: int) -> torch.Tensor:
    """(N, Hq, R, D) -> (N, Hkv, G * R, D): the G query heads of each KV head as rows (a view; row g * R + r)."""
    n, hq, r, d = q.shape
    return q.reshape(n, hkv, (hq // hkv) * r, d)


def naive_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Mask) -> tuple[torch.Tensor, torch.Tensor]:
    n, hq, r, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    scores = (_grouped(q, hkv) @ k.transpose(-2, -1)) * d**-0.5  # (N, Hkv, G * R, S)
    ok = _row_mask(mask, r, s, hq // hkv, str(q.device))
    if ok is not None:
        scores = scores.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(scores.float(), dim=-1)  # (N, Hkv, G * R), float32 whatever the dtype
    o = torch.exp(scores.float() - lse.unsqueeze(-1)).to(q.dtype) @ v  # (N, Hkv, G * R, Dv)
    return o.reshape(n, hq, r, -1), lse.reshape(n, hq, r)


def sdpa_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Mask) -> tuple[torch.Tensor, torch.Tensor]:
    n, hq, r, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    if q.device.type != "cpu":
        raise Unsupported("cascade-sdpa: torch's flash kernel returns its log-sum-exp through "
                          "aten._scaled_dot_product_flash_attention_for_cpu on a CPU alone; on CUDA run cascade-flex")
    bias = _row_mask(mask, r, s, hq // hkv, str(q.device), q.dtype)
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        _grouped(q, hkv), k, v, 0.0, False, attn_mask=bias, scale=d**-0.5)
    return o.reshape(n, hq, r, -1), lse.float().reshape(n, hq, r)


_FLEX_REFUSED: dict[str, str] = {}  # device type -> torch's refusal, so a refused compile is not tried per case


def flex_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Mask) -> tuple[torch.Tensor, torch.Tensor]:
    from torch.nn.attention.flex_attention import AuxRequest

    from bench.backends.flex import _block_mask, _compiled

    if q.device.type in _FLEX_REFUSED:
        raise Unsupported(_FLEX_REFUSED[q.device.type])
    block_mask = _block_mask(q.shape[2], k.shape[2], mask, str(q.device))
    gqa = k.shape[1] != q.shape[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            o, aux = _compiled()(q, k, v, block_mask=block_mask, enable_gqa=gqa, return_aux=AuxRequest(lse=True))
        except Exception as err:  # inductor wraps a lowering's refusal in its own error type
            if "not supported" not in str(err) and not isinstance(err, NotImplementedError):
                raise
            said = next((line.strip() for line in str(err).splitlines() if "not supported" in line), str(err))
            said = said.rpartition("Error: ")[2]  # torch's own sentence, not inductor's wrappers around it
            _FLEX_REFUSED[q.device.type] = f"cascade-flex: compiled flex_attention refuses the log-sum-exp here: {said}"
            raise Unsupported(_FLEX_REFUSED[q.device.type]) from None
    if any("without torch.compile" in str(w.message) for w in caught):
        raise RuntimeError("cascade-flex: torch fell back to eager (unfused) flex_attention; refusing to report it")
    return o, aux.lse.float()


def _method(part: Part) -> Callable[..., torch.Tensor]:
    def run(q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor, k_suffix: torch.Tensor,
            v_suffix: torch.Tensor, *, mask: Mask) -> torch.Tensor:
        return cascade(part, Inputs(q, k_prefix, v_prefix, k_suffix, v_suffix), mask)
    return run


cascade_naive = _method(naive_part)
cascade_sdpa = _method(sdpa_part)
cascade_flex = _method(flex_part)


def flashinfer_cascade(q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor, k_suffix: torch.Tensor,
                       v_suffix: torch.Tensor, *, mask: Mask) -> torch.Tensor:
    """FlashInfer's cascade (MultiLevelCascadeAttentionWrapper): not installed here, and not wired in where it is."""
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        raise Unsupported("flashinfer-cascade: FlashInfer is not installed (pip install flashinfer-python; it needs "
                          "CUDA)") from None
    raise Unsupported("flashinfer-cascade: FlashInfer is installed, but its MultiLevelCascadeAttentionWrapper (paged "
                      "KV, plan() before run()) is not wired in yet")
