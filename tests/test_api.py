import pytest
import torch

import bench
from bench import ShapeError, Unsupported, attention


def qkv(B=1, Hq=4, Hkv=2, Sq=8, Skv=8, D=16):
    return torch.randn(B, Hq, Sq, D), torch.randn(B, Hkv, Skv, D), torch.randn(B, Hkv, Skv, D)


def test_unknown_backend_lists_known_ones():
    with pytest.raises(ValueError, match="unknown backend 'fast'; known: naive, sdpa, sdpa-math"):
        attention(*qkv(), backend="fast")


@pytest.mark.parametrize("make, message", [
    (lambda: (torch.randn(4, 8, 16), *qkv()[1:]), "q must be 4-D"),
    (lambda: (qkv()[0], torch.randn(1, 2, 8, 16), torch.randn(1, 2, 9, 16)), "must have the same shape"),
    (lambda: qkv(Hq=6, Hkv=4), "n_heads=6 is not divisible by n_kv_heads=4"),
    (lambda: (torch.randn(1, 4, 8, 32), *qkv()[1:]), "head_dim of q"),
    (lambda: (torch.randn(2, 4, 8, 16), *qkv()[1:]), "batch of q"),
    (lambda: (qkv()[0].double(), *qkv()[1:]), "dtypes differ"),
])
def test_bad_inputs_are_named(make, message):
    with pytest.raises(ShapeError, match=message):
        attention(*make(), backend="naive")


def test_causal_with_more_queries_than_keys_is_refused():
    with pytest.raises(ShapeError, match="seq_q=9 > seq_kv=8"):
        attention(*qkv(Sq=9), backend="naive", causal=True)


def test_window_must_be_positive():
    with pytest.raises(ShapeError, match="window=0"):
        attention(*qkv(), backend="naive", window=0)


def test_cuda_only_kernels_are_unsupported_on_cpu_with_reason():
    for name in ("sdpa-efficient", "sdpa-cudnn", "flash-attn"):
        with pytest.raises(Unsupported, match=name):
            attention(*qkv(), backend=name)


def test_public_names():
    assert set(bench.BACKENDS) == {"naive", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn",
                                   "flex", "flash-attn", "topk-gather", "hf-eager", "hf-sdpa", "hf-flex",
                                   "hf-gdn", "torch-linear", "fla-gdn", "hf-mamba2", "hf-kda", "cascade-naive",
                                   "cascade-sdpa", "cascade-flex", "flashinfer-cascade"}
