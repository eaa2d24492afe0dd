import pytest
import torch

from bench.masks import visible, visible_pairs


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


def test_causal_square_pairs_formula():
    assert visible_pairs(1024, 1024, True, None) == 1024 * 1025 // 2
