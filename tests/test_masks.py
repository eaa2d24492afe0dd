import pytest
import torch

from bench.problem.columns import shape_from_fields
from bench.problem.masks import CAUSAL, NO_MASK, Mask, visible, visible_pairs


def test_causal_is_bottom_right_aligned():
    # 2 queries against 4 keys: the last query sees everything, the first all but the last key.
    expected = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(visible(2, 4, True, None), expected)


def test_window_sees_itself_and_w_minus_1_before():
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(visible(4, 4, True, 2), expected)


def test_decode_query_sees_whole_cache_under_causal():
    assert bool(visible(1, 9, True, None).all())
    assert int(visible(1, 9, True, 3).sum()) == 3


def test_no_mask_is_none():
    assert visible(3, 5, False, None) is None


@pytest.mark.parametrize("sq, skv, causal, window", [
    (7, 7, True, None), (7, 129, True, None), (1, 129, True, None), (129, 129, True, 16),
    (7, 129, True, 200), (5, 5, False, None), (64, 64, True, 1),
])
def test_visible_pairs_counts_exactly(sq, skv, causal, window):
    ok = visible(sq, skv, causal, window)
    expected = sq * skv if ok is None else int(ok.sum())
    assert visible_pairs(sq, skv, causal, window) == expected


def brute_force(mask: Mask, sq: int, skv: int) -> list[list[bool]]:
    """The masks' definition, pair by pair: query i at p = i + Skv - Sq, key j at j."""
    rows = []
    for i in range(sq):
        p = i + skv - sq
        row = []
        for j in range(skv):
            ok = j <= p if mask.causal else True
            if mask.window is not None:
                ok = ok and p - mask.window < j
            if mask.chunk is not None:
                ok = ok and p // mask.chunk == j // mask.chunk
            row.append(ok)
        rows.append(row)
    return rows


ONE_RULE_MASKS = [NO_MASK, CAUSAL, Mask(window=1), Mask(window=3), Mask(window=40), Mask(chunk=1), Mask(chunk=4),
                  Mask(chunk=5), Mask(chunk=40), Mask(window=3, chunk=4), Mask(window=6, chunk=4),
                  Mask(window=40, chunk=40)]
ONE_RULE_LENGTHS = [(1, 1), (1, 9), (5, 5), (7, 16), (16, 16), (13, 31), (9, 4), (12, 1), (30, 20)]


@pytest.mark.parametrize("mask", ONE_RULE_MASKS, ids=lambda m: m.label)
@pytest.mark.parametrize("sq, skv", ONE_RULE_LENGTHS)
def test_one_rule_matches_the_pairwise_definition(mask, sq, skv):
    # bounds, the boolean matrix and pairs all read Mask.span: each must say what the loop above says
    expected = brute_force(mask, sq, skv)
    p, lo, hi = mask.bounds(sq, skv)
    assert p.tolist() == [i + skv - sq for i in range(sq)]
    for i, row in enumerate(expected):
        assert [j for j, ok in enumerate(row) if ok] == list(range(lo[i], hi[i] + 1)), (i, lo[i], hi[i])
    ok = mask.visible(sq, skv)
    assert (ok is None) == (mask == NO_MASK)
    assert (torch.ones(sq, skv, dtype=torch.bool) if ok is None else ok).tolist() == expected
    assert mask.pairs(sq, skv) == sum(map(sum, expected))


def test_causal_square_pairs_formula():
    assert visible_pairs(1024, 1024, True, None) == 1024 * 1025 // 2


def test_flop_and_byte_formulas():
    from bench.counts.metrics import attention_bytes, attention_flops, kv_cache_bytes, score_matrix_bytes
    from bench.problem.shapes import AttentionShape

    s = AttentionShape(2, 1024, 1024, 8, 2, 64, "fp32")
    assert attention_flops(s) == 4 * 2 * 8 * 64 * 1024 * 1024
    c = AttentionShape(2, 1024, 1024, 8, 2, 64, "fp32", CAUSAL)
    assert attention_flops(c) == 4 * 2 * 8 * 64 * (1024 * 1025 // 2)
    assert attention_flops(c, "fwd+bwd") == int(3.5 * attention_flops(c))
    w = shape_from_fields(dict(batch=1, seq_q=8, seq_kv=8, n_heads=1, n_kv_heads=1, head_dim=1, dtype="fp32",
                               mask="window", window=3))
    assert attention_flops(w) == 4 * (1 + 2 + 3 * 6)  # rows 0 and 1 see 1 and 2 keys, the rest 3
    assert attention_bytes(AttentionShape(1, 16, 32, 8, 1, 64, "bf16")) == (2 * 8 * 16 * 64 + 2 * 32 * 64) * 2
    assert score_matrix_bytes(s) == 2 * 8 * 1024 * 1024 * 4
    # llama-3-8b: 32 layers x 8 KV heads x 128 x 2 bytes x 2 = 128 KiB per token
    assert kv_cache_bytes(32, 8, 128, tokens=1, dtype="bf16") == 128 * 1024
    assert kv_cache_bytes(32, 8, 128, tokens=32768, dtype="bf16", window=4096) == 4096 * 128 * 1024
