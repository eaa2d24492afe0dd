"""The cascade backends' registry entries (bench.kinds.prefix times them): each runs a shared-prefix batch by the
cascade split of bench.prefix.cascade (the prefix attended once for the batch, each suffix apart, merged by
log-sum-exp) and says so in its `cascade` trait, so a sweep offers it the shared-prefix cases alone (dense=False);
plain attention over the same cases is the dense backends' (naive, sdpa, sdpa-flash, flex, ...).

  cascade-naive       both parts by the textbook formula on grouped rows, its own float32 log-sum-exp
  cascade-sdpa        both parts by torch's CPU flash kernel, which returns its log-sum-exp (CPU only)
  cascade-flex        both parts by compiled FlexAttention with return_aux=AuxRequest(lse=True): torch 2.13 compiles
                      that on CUDA only (Unsupported, in torch's words, on a CPU)
  flashinfer-cascade  FlashInfer's MultiLevelCascadeAttentionWrapper: CUDA only, and Unsupported with one line where
                      FlashInfer is not installed (and, where it is, until its paged inputs are wired in)

Their `fn` is never a plain attention call: bench.attention refuses them before calling it (sparsity_reason), and
the fn itself raises Unsupported with the same line should anything reach it. CASCADE_IMPLEMENTATIONS names each
one's function ("module:function", imported on a case's first call: it imports torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.backends.base import Backend, Unsupported

if TYPE_CHECKING:
    import torch

CASCADE_IMPLEMENTATIONS: dict[str, str] = {
    "cascade-naive": "bench.prefix.cascade:cascade_naive",
    "cascade-sdpa": "bench.prefix.cascade:cascade_sdpa",
    "cascade-flex": "bench.prefix.cascade:cascade_flex",
    "flashinfer-cascade": "bench.prefix.cascade:flashinfer_cascade",
}


def cascade_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: Any, score: Any) -> torch.Tensor:
    """A cascade backend's plain entry: always Unsupported (its cases are bench run --prefix's)."""
    raise Unsupported("a cascade backend runs shared-prefix batches only (bench run --prefix), not one attention call")


CASCADE_BACKENDS: tuple[Backend, ...] = (
    Backend("cascade-naive", cascade_only, "cascade attention of a shared-prefix batch: the textbook formula for the "
            "prefix (once) and each suffix, merged by log-sum-exp", "materialising", "#a55194", "<", backward=False,
            dense=False, cascade=True),
    Backend("cascade-sdpa", cascade_only, "cascade attention through torch's CPU flash kernel (its log-sum-exp), "
            "prefix once, suffixes apart", "tiled", "#5254a3", ">", devices=("cpu",), backward=False, dense=False,
            cascade=True),
    Backend("cascade-flex", cascade_only, "cascade attention through compiled FlexAttention (return_aux lse), prefix "
            "once, suffixes apart", "tiled", "#8ca252", "d", compiles=True, backward=False, dense=False,
            cascade=True),
    Backend("flashinfer-cascade", cascade_only, "FlashInfer's MultiLevelCascadeAttentionWrapper (CUDA, the "
            "flashinfer package)", "tiled", "#d6616b", "8", devices=("cuda",), dtypes=("bf16", "fp16"),
            backward=False, dense=False, cascade=True),
)
