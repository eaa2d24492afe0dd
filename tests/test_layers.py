import pytest
import torch
from torch import nn

from bench.kinds.mha_layer import MultiHeadAttention, parameter_count
from bench.problem.shapes import ShapeError
from bench.reference import merge_heads, split_heads


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_parameter_count_matches_torch_multihead_attention():
    ours = MultiHeadAttention(512, 8)
    assert n_params(ours) == n_params(nn.MultiheadAttention(512, 8)) == 1_050_624
    assert n_params(ours) != 1_049_600  # the tutorial's count forgets two of the four biases
    assert n_params(MultiHeadAttention(512, 8, bias=False)) == 4 * 512 * 512 == 1_048_576


@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1])
@pytest.mark.parametrize("bias", [True, False])
def test_gqa_mqa_parameter_counts(n_kv_heads, bias):
    d, h = 512, 8
    kv_dim = n_kv_heads * d // h
    formula = 2 * d * d + 2 * d * kv_dim + (2 * d + 2 * kv_dim if bias else 0)
    layer = MultiHeadAttention(d, h, n_kv_heads, bias=bias)
    assert n_params(layer) == formula == parameter_count(d, h, n_kv_heads, bias)


def copy_weights(ref: nn.MultiheadAttention, ours: MultiHeadAttention) -> None:
    """torch's packed in-projection and out-projection into our W_Q, W_K, W_V, W_O."""
    d = ref.embed_dim
    with torch.no_grad():
        for i, lin in enumerate([ours.W_Q, ours.W_K, ours.W_V]):
            lin.weight.copy_(ref.in_proj_weight[i * d:(i + 1) * d])
            lin.bias.copy_(ref.in_proj_bias[i * d:(i + 1) * d])
        ours.W_O.weight.copy_(ref.out_proj.weight)
        ours.W_O.bias.copy_(ref.out_proj.bias)


def test_matches_torch_multihead_attention_given_same_weights():
    torch.manual_seed(0)
    d, h = 512, 8
    ref = nn.MultiheadAttention(d, h, batch_first=True)
    ours = MultiHeadAttention(d, h, backend="naive")
    copy_weights(ref, ours)
    x = torch.randn(2, 10, d)
    expected, _ = ref(x, x, x, need_weights=False)
    assert torch.allclose(ours(x), expected, atol=1e-5)
    causal = torch.ones(10, 10, dtype=torch.bool).triu(1)  # True = masked, torch's convention
    expected_causal, _ = ref(x, x, x, attn_mask=causal, need_weights=False)
    assert torch.allclose(ours(x, causal=True), expected_causal, atol=1e-5)


@pytest.mark.parametrize("backend", ["naive", "sdpa", "sdpa-flash"])
def test_backends_agree_inside_the_layer(backend):
    torch.manual_seed(0)
    layer = MultiHeadAttention(256, 8, 2, backend="naive")
    x = torch.randn(2, 33, 256)
    expected = layer(x, causal=True)
    layer.backend = backend
    assert torch.allclose(layer(x, causal=True), expected, atol=1e-5)


def test_split_merge_round_trip():
    x = torch.randn(2, 5, 64)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 5, 16)
    assert torch.equal(merge_heads(heads), x)
    assert torch.equal(heads[:, 1, 3], x[:, 3, 16:32])  # head 1 of token 3 is that token's 2nd slice


def test_split_without_transpose_mixes_tokens():
    # Mark every feature with its token index: position t of every head must hold token t only.
    B, T, C, n = 1, 6, 32, 4
    token = torch.arange(T, dtype=torch.float32).view(1, T, 1).expand(B, T, C)
    right = split_heads(token, n)  # (B, n, T, hs)
    wrong = token.reshape(B, n, T, C // n)  # the tutorials' warning: view straight into heads
    position = torch.arange(T, dtype=torch.float32).view(1, 1, T, 1)
    assert torch.equal(right, position.expand_as(right))
    strays = (wrong != position).any(-1)  # (B, n, T): positions holding another token's features
    assert strays.sum() > T  # most positions of most heads read the wrong token


def test_bad_geometry_is_refused():
    with pytest.raises(ShapeError, match="d_model=896 is not divisible by n_heads=13"):
        MultiHeadAttention(896, 13)
    with pytest.raises(ShapeError, match="n_heads=14 is not divisible by n_kv_heads=3"):
        MultiHeadAttention(896, 14, 3)
    with pytest.raises(ValueError, match="unknown backend"):
        MultiHeadAttention(512, 8, backend="nope")


def test_head_dim_apart_from_d_model():
    """Qwen3-style: d_model 256, 8 query heads and 2 KV heads of 64, so Hq * D = 512 != d_model."""
    torch.manual_seed(0)
    d, h, kv, hd = 256, 8, 2, 64
    layer = MultiHeadAttention(d, h, kv, head_dim=hd, backend="naive")
    assert (layer.W_Q.weight.shape, layer.W_K.weight.shape, layer.W_V.weight.shape, layer.W_O.weight.shape) == (
        (h * hd, d), (kv * hd, d), (kv * hd, d), (d, h * hd))
    assert n_params(layer) == parameter_count(d, h, kv, head_dim=hd) == 2 * d * (h + kv) * hd + (h + kv + kv) * hd + d
    assert n_params(MultiHeadAttention(d, h, kv, head_dim=hd, bias=False)) == parameter_count(d, h, kv, False, hd)
    # the same computation written out: project, split (B, H, S, D), torch's SDPA with GQA, merge, project back
    x = torch.randn(2, 11, d)
    q = layer.W_Q(x).view(2, 11, h, hd).transpose(1, 2)
    k = layer.W_K(x).view(2, 11, kv, hd).transpose(1, 2)
    v = layer.W_V(x).view(2, 11, kv, hd).transpose(1, 2)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = layer.W_O(y.transpose(1, 2).reshape(2, 11, h * hd))
    out = layer(x, causal=True)
    assert out.shape == (2, 11, d)
    assert torch.allclose(out, expected, atol=1e-5)
    # the default is still the tutorials' d_model / n_heads
    assert MultiHeadAttention(d, h, kv).head_dim == d // h == 32
    with pytest.raises(ShapeError, match="head_dim=0"):
        MultiHeadAttention(d, h, kv, head_dim=0)
