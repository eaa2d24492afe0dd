"""Sparse attention: the sparsity's text (bench.problem.sparsity), its keep-set (bench.problem.keepset) against a
brute-force definition
written here from the docstrings, the counts (bench.counts.pairs), the top-K indexer (bench.problem.indexer), every
backend
against the float64 reference under a keep-set, which backends a sweep offers a sparse case, and whole cases through
the runner."""

from __future__ import annotations

import functools
import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.backends import BACKENDS, Backend, Unsupported, attention
from bench.backends.naive import naive_attention
from bench.counts.metrics import attention_flops, executed_flops, indexer_flops
from bench.counts.pairs import (
    FLEX_BLOCK,
    block_pairs,
    block_table,
    density,
    executed_pairs,
    kept_keys,
    kept_pairs,
    kept_per_row,
)
from bench.engine.runner import Runner
from bench.engine.sweeps import Case, Sweep, cases
from bench.errors import InputError
from bench.kinds.expansion import offered
from bench.kinds.sparse import sparsity_labels
from bench.problem.columns import shape_from_fields
from bench.problem.indexer import make_indexer_inputs, select
from bench.problem.keepset import KeepSet
from bench.problem.masks import Mask
from bench.problem.shapes import AttentionShape, ShapeError
from bench.problem.sparsity import Sparsity, SparsityError
from bench.reference import TOLERANCES, check_gradients, compare_to_reference, make_inputs, reference_attention
from bench.results.meta import Calibration

REPO = Path(__file__).resolve().parents[1]
CALIBRATION = Calibration.from_dict({"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10})
ATOL32, RTOL32 = TOLERANCES[torch.float32]


# --- independent definitions (from the docstrings of bench.problem.masks and bench.problem.sparsity), plain Python
# -----------------

def mask_sees(mask: str, p: int, j: int) -> bool:
    """bench.problem.masks: none, causal (j <= p), window:w (p - w < j <= p)."""
    if mask == "none":
        return True
    if mask == "causal":
        return j <= p
    kind, _, size = mask.partition(":")
    assert kind == "window", mask
    return p - int(size) < j <= p


def doc_of(x: int, n_docs: int, seq_kv: int) -> int:
    """N documents of L = Skv // N tokens from position 0, the last running to Skv (it takes the remainder)."""
    length = seq_kv // n_docs
    bounds = [(d * length, (d + 1) * length if d < n_docs - 1 else seq_kv) for d in range(n_docs)]
    return next(d for d, (start, end) in enumerate(bounds) if start <= x < end)


def brute_keep(text: str, mask: str, seq_q: int, seq_kv: int) -> list[list[bool]]:
    """Whether query i keeps key j: the sparsity's rule at the bottom-right aligned position p = i + Skv - Sq, ANDed
    with the mask. The block kind reads which blocks are kept from block_table (its rules are checked apart)."""
    sp = Sparsity.parse(text)
    table = block_table(sp, Mask.parse(mask), seq_kv) if sp.kind == "block" else None
    out = []
    for i in range(seq_q):
        p = i + seq_kv - seq_q
        row = []
        for j in range(seq_kv):
            if sp.kind == "none":
                keep = True
            elif sp.kind == "docs":
                keep = doc_of(p, sp.docs, seq_kv) == doc_of(j, sp.docs, seq_kv)
            elif sp.kind == "global":
                keep = j < sp.global_tokens or p < sp.global_tokens or abs(p - j) < sp.window
            else:
                keep = j // sp.block in table[p // sp.block]
            row.append(keep and mask_sees(mask, p, j))
        out.append(row)
    return out


def brute_block_pairs(tokens: torch.Tensor, block: int = FLEX_BLOCK) -> int:
    """Pairs of every (block x block) tile, clipped at the matrix's edges, that holds a kept pair."""
    seq_q, seq_kv = tokens.shape
    total = 0
    for a in range(0, seq_q, block):
        for c in range(0, seq_kv, block):
            tile = tokens[a:a + block, c:c + block]
            if bool(tile.any()):
                total += tile.shape[0] * tile.shape[1]
    return total


def shape_of(text: str, mask: str = "causal", seq_q: int = 64, seq_kv: int = 64, batch: int = 1, heads=(4, 1),
             head_dim: int = 16) -> AttentionShape:
    kind, _, size = mask.partition(":")
    return shape_from_fields(dict(batch=batch, seq_q=seq_q, seq_kv=seq_kv, n_heads=heads[0], n_kv_heads=heads[1],
                                  head_dim=head_dim, dtype="fp32", mask=kind, window=int(size) if size else None,
                                  sparsity=text))


def keep_for(shape: AttentionShape, seed: int = 0) -> KeepSet:
    """The shape's keep-set: static from its lengths, or topk's selected by the indexer on inputs of `seed`."""
    sp, mask = shape.sparsity, shape.mask
    if sp.static:
        return KeepSet.static(sp, mask, shape.seq_q, shape.seq_kv)
    return KeepSet.from_indices(sp, mask, select(make_indexer_inputs(shape, "cpu", seed), sp.k, mask), shape.seq_kv)


# --- 1. the text: parse, label, and what is refused -----------------------------------------------------------------

@pytest.mark.parametrize("text, label, value", [
    ("none", "none", Sparsity()),
    ("block:64:1/8", "block:64:0.125", Sparsity("block", block=64, density=0.125)),
    ("block:128:0.25", "block:128:0.25", Sparsity("block", block=128, density=0.25)),
    ("block:16:1", "block:16:1", Sparsity("block", block=16, density=1.0)),
    ("docs:8", "docs:8", Sparsity("docs", docs=8)),
    ("global:64+window:256", "global:64+window:256", Sparsity("global", global_tokens=64, window=256)),
    ("topk:2048", "topk:2048", Sparsity("topk", k=2048)),
    ("topk:2048:64x128", "topk:2048:64x128", Sparsity("topk", k=2048, index_heads=64, index_dim=128)),
    (" docs:3 ", "docs:3", Sparsity("docs", docs=3)),
])
def test_parse_and_label_round_trip(text, label, value):
    parsed = Sparsity.parse(text)
    assert parsed == value
    assert parsed.label == label
    assert Sparsity.parse(label) == parsed  # the label is the text parse reads back
    assert parsed.sparse == (value.kind != "none") and parsed.static == (value.kind != "topk")


def test_label_of_a_non_terminating_fraction_reads_back():
    value = Sparsity.parse("block:64:1/3")
    again = Sparsity.parse(value.label)
    assert again == value
    assert block_table(again, Mask(causal=True), 1024) == block_table(value, Mask(causal=True), 1024)


@pytest.mark.parametrize("text, budget, budget_label", [
    ("block:64:1/8", ("density", 0.125), "density 1/8"),
    ("docs:4", ("density", 0.25), "density 1/4"),
    ("global:64+window:256", ("tokens", 320.0), "320 tokens per query"),
    ("topk:512:4x32", ("tokens", 512.0), "512 tokens per query"),
    ("none", None, "dense"),
])
def test_budget(text, budget, budget_label):
    sp = Sparsity.parse(text)
    assert sp.budget == budget and sp.budget_label == budget_label


@pytest.mark.parametrize("text", [
    "", "dense", "none:1", "block", "block:16", "block:16:0.5:1", "block:0:0.5", "block:-16:0.5", "block:x:0.5",
    "block:16:0", "block:16:1.5", "block:16:-0.25", "block:16:1/0", "block:16:half", "docs", "docs:", "docs:0",
    "docs:x", "docs:2.5", "docs:1:2", "global:4:8", "global:4+window", "global:0+window:8", "global:x+window:8",
    "global:4+window:0", "topk", "topk:0", "topk:-3", "topk:8:2y16", "topk:8:0x16", "topk:8:2x0", "topk:8:2x",
    "topk:8:2x16:1", "sliding:4",
])
def test_malformed_text_is_refused_naming_it(text):
    with pytest.raises(SparsityError) as err:
        Sparsity.parse(text)
    assert repr(text) in str(err.value)
    assert isinstance(err.value, InputError)  # one line and exit 2 at the command line


@pytest.mark.parametrize("text", ["global:4+windowed:8", "global:4+junk+window:8"])
def test_malformed_global_text_is_refused(text):
    with pytest.raises(SparsityError):
        Sparsity.parse(text)


@pytest.mark.parametrize("fields, message", [
    (dict(kind="sliding"), "unknown sparsity kind 'sliding'"),
    (dict(kind="block", block=16), "needs density"),
    (dict(kind="docs", docs=2, k=3), "takes no k"),
    (dict(kind="none", docs=2), "takes no docs"),
    (dict(kind="topk", k=4, index_heads=2), "both its heads and its head dim"),
    (dict(kind="block", block=16, density=0.0), "outside (0, 1]"),
])
def test_inconsistent_value_is_refused(fields, message):
    with pytest.raises(SparsityError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Sparsity(**fields)


@pytest.mark.parametrize("text, fits, too_long", [
    ("block:64:0.5", 256, 320 + 32),  # 64 divides 256, not 352
    ("docs:256", 256, 255),
    ("global:255+window:8", 256, 255),  # 255 global tokens leave one other key at 256
    ("topk:256", 256, 255),
])
def test_check_against_lengths(text, fits, too_long):
    sp = Sparsity.parse(text)
    sp.check(fits, fits)  # the bound itself is fine
    sp.check(1, fits)
    with pytest.raises(SparsityError) as err:
        sp.check(1, too_long)
    assert sp.label in str(err.value) and f"seq_kv={too_long}" in str(err.value)


@pytest.mark.parametrize("fields, message", [
    (dict(sparsity="block:100:0.5"), "block size 100 does not divide seq_kv=256"),
    (dict(sparsity="topk:300"), "K=300 exceeds the 256 keys"),
    (dict(sparsity="docs:300"), "300 documents do not fit in 256 tokens"),
    (dict(sparsity="global:256+window:8"), "256 global tokens leave no other key"),
    (dict(sparsity="block:16:0.5", score="softcap:50"), "takes no score variant"),
    (dict(sparsity="block:16:0.5", scope="layer"), "scope='attention'"),
    (dict(sparsity="block:16:1/4"), "write it as 'block:16:0.25'"),  # a shape holds the label, as ids do
    (dict(sparsity="block:16"), "unknown sparsity 'block:16'"),
])
def test_shape_refuses_impossible_sparsity(fields, message):
    with pytest.raises(ShapeError, match=message.replace("(", r"\(")):
        shape_from_fields(dict(batch=1, seq_q=256, seq_kv=256, n_heads=4, n_kv_heads=1, head_dim=16, dtype="fp32",
                               mask="causal", **fields))


def test_shape_accepts_possible_sparsity():
    for text in ("block:16:0.25", "docs:256", "global:255+window:8", "topk:256", "topk:8:2x16"):
        s = shape_from_fields(dict(batch=1, seq_q=256, seq_kv=256, n_heads=4, n_kv_heads=1, head_dim=16, dtype="fp32",
                                   mask="causal", sparsity=text))
        assert s.sparsity == Sparsity.parse(text)
    assert shape_from_fields(dict(batch=1, seq_q=1, seq_kv=256, n_heads=4, n_kv_heads=1, head_dim=16, dtype="fp32",
                                  mask="causal", sparsity="topk:256")).sparsity.label == "topk:256"


def test_sweep_axis_writes_labels():
    assert sparsity_labels("none,block:128:1/4,topk:64:2x32") == ("none", "block:128:0.25", "topk:64:2x32")


def test_cli_refuses_a_block_size_that_does_not_divide_the_length():
    proc = subprocess.run([sys.executable, "-m", "bench", "run", "--sparsity", "block:100:0.5", "--seq", "256",
                           "--backend", "naive", "--plan"], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "block size 100" in proc.stderr and "Traceback" not in proc.stderr


# --- 2. the keep-set's tokens against the brute-force definition ---------------------------------------------------

LENGTHS = {"prefill": lambda kv: (kv, kv), "shorter-q": lambda kv: (23, kv), "decode": lambda kv: (1, kv)}
TOKEN_KINDS = [("none", 53), ("block:12:0.5", 60), ("block:10:0.4", 60), ("block:20:1", 60), ("docs:4", 53),
               ("docs:1", 53), ("global:3+window:5", 53), ("global:1+window:80", 53)]


def _token_params():
    for (text, kv), mask, phase in itertools.product(TOKEN_KINDS, ("none", "causal", "window:7"), LENGTHS):
        yield pytest.param(text, kv, mask, phase, id=f"{text}-{mask}-{phase}")


@pytest.mark.parametrize("text, seq_kv, mask, phase", list(_token_params()))
def test_tokens_equal_the_brute_force_definition(text, seq_kv, mask, phase):
    seq_q, seq_kv = LENGTHS[phase](seq_kv)
    keep = KeepSet.static(Sparsity.parse(text), Mask.parse(mask), seq_q, seq_kv)
    want = torch.tensor(brute_keep(text, mask, seq_q, seq_kv)).unsqueeze(0)
    assert keep.tokens.dtype == torch.bool
    assert keep.tokens.shape == want.shape == (1, seq_q, seq_kv)
    assert torch.equal(keep.tokens, want)
    assert bool(want[0].any(dim=1).all())  # every query keeps a key (its own block, document or band)


def test_docs_last_document_takes_the_remainder():
    # 53 keys in 4 documents of 13: the last runs from 39 to 52 (14 keys), one more than the others
    keep = KeepSet.static(Sparsity.parse("docs:4"), Mask(), 53, 53).tokens[0]
    assert keep[52].nonzero().flatten().tolist() == list(range(39, 53))
    assert keep[38].nonzero().flatten().tolist() == list(range(26, 39))


def test_topk_tokens_are_the_selected_indices_within_the_mask():
    shape = shape_of("topk:6", "causal", seq_q=12, seq_kv=20, batch=2)
    keep = keep_for(shape)
    idx = keep.indices
    assert idx.shape == (2, 12, 6) and idx.dtype == torch.int64
    want = torch.zeros(2, 12, 20, dtype=torch.bool)
    for b, i in itertools.product(range(2), range(12)):
        for j in idx[b, i].tolist():
            if j >= 0 and mask_sees("causal", i + 8, j):
                want[b, i, j] = True
    assert torch.equal(keep.tokens, want)
    assert not torch.equal(keep.tokens[0], keep.tokens[1])  # selected per sequence


def test_topk_keep_set_needs_its_indices():
    with pytest.raises(ValueError, match="needs the indices"):
        KeepSet(Sparsity.parse("topk:4"), Mask(causal=True), 8, 8)
    with pytest.raises(ValueError, match=r"\(B, Sq, K=4\)"):
        KeepSet.from_indices(Sparsity.parse("topk:4"), Mask(), torch.zeros(1, 8, 3, dtype=torch.long), 8)
    with pytest.raises(SparsityError, match="does not divide"):
        KeepSet.static(Sparsity.parse("block:16:0.5"), Mask(), 40, 40)


# --- 3. block_table's rules ---------------------------------------------------------------------------------------

def candidate_blocks(mask: str, seq_kv: int, block: int, row: int) -> list[int]:
    """The key blocks holding a key that some query of row `row` (positions row*B .. row*B + B - 1) may see."""
    queries = range(row * block, (row + 1) * block)
    return [c for c in range(seq_kv // block)
            if any(mask_sees(mask, p, j) for p in queries for j in range(c * block, (c + 1) * block))]


@pytest.mark.parametrize("seq_kv, block, dens", [(64, 16, 0.5), (96, 16, 0.25), (160, 32, 0.4), (120, 8, 1 / 8),
                                                 (96, 32, 1.0), (80, 16, 0.01)])
@pytest.mark.parametrize("mask", ["none", "causal", "window:40"])
def test_block_table_rules(seq_kv, block, dens, mask):
    sp = Sparsity("block", block=block, density=dens)
    table = block_table(sp, Mask.parse(mask), seq_kv)
    assert len(table) == seq_kv // block
    for r, kept in enumerate(table):
        n = len(candidate_blocks(mask, seq_kv, block, r))
        assert r in kept  # the diagonal block, always
        assert list(kept) == sorted(set(kept))
        assert set(kept) <= set(candidate_blocks(mask, seq_kv, block, r))  # only blocks the mask leaves the row
        # round(D x n), half up (0.5 of 5 candidates keeps 3), and at least one
        assert len(kept) == max(1, math.floor(dens * n + 0.5)), (r, n, kept)
    keep = KeepSet.static(sp, Mask.parse(mask), seq_kv, seq_kv)
    assert keep.blocks.shape == (len(table), len(table))
    assert [tuple(row.nonzero().flatten().tolist()) for row in keep.blocks] == list(table)


def test_block_table_is_deterministic_and_drawn():
    sp, mask = Sparsity.parse("block:16:0.25"), Mask(causal=True)
    first = block_table(sp, mask, 512)
    block_table.cache_clear()  # drawn again, not read back from the cache
    assert block_table(sp, mask, 512) == first
    assert torch.equal(KeepSet.static(sp, mask, 512, 512).blocks, KeepSet.static(sp, mask, 512, 512).blocks)
    # drawn, not the leading or trailing blocks: some row keeps others than the diagonal and its neighbours
    assert any(set(kept) - {0, r - 1, r} for r, kept in enumerate(first))
    assert block_table(sp, Mask(), 512) != first  # the mask is part of the draw


@pytest.mark.parametrize("mask", ["none", "causal", "window:40"])
@pytest.mark.parametrize("seq_kv", [96, 160])
def test_decode_keeps_the_blocks_of_the_prefills_last_rows(mask, seq_kv):
    sp, m = Sparsity.parse("block:16:0.4"), Mask.parse(mask)
    prefill = KeepSet.static(sp, m, seq_kv, seq_kv).tokens[0]
    for seq_q in (1, 4, 23):
        step = KeepSet.static(sp, m, seq_q, seq_kv)
        assert torch.equal(step.tokens[0], prefill[-seq_q:])
        assert torch.equal(step.blocks, KeepSet.static(sp, m, seq_kv, seq_kv).blocks)


# --- 4. the counts against the tokens ------------------------------------------------------------------------------

COUNT_KINDS = ["block:64:0.5", "block:32:0.3", "docs:3", "global:7+window:50", "global:1+window:500"]
COUNT_LENGTHS = [(320, 320), (100, 320), (1, 320), (384, 384), (130, 384)]


@pytest.mark.parametrize("seq_q, seq_kv", COUNT_LENGTHS)
@pytest.mark.parametrize("mask", ["none", "causal", "window:100"])
@pytest.mark.parametrize("text", COUNT_KINDS)
def test_counts_equal_the_tokens(text, mask, seq_q, seq_kv):
    sp, m = Sparsity.parse(text), Mask.parse(mask)
    tokens = KeepSet.static(sp, m, seq_q, seq_kv).tokens[0]
    assert kept_per_row(sp, m, seq_q, seq_kv).tolist() == tokens.sum(dim=1).tolist()
    assert kept_pairs(sp, m, seq_q, seq_kv) == int(tokens.sum())
    assert kept_keys(sp, m, seq_q, seq_kv) == int(tokens.any(dim=0).sum())
    assert block_pairs(sp, m, seq_q, seq_kv) == brute_block_pairs(tokens)
    assert density(sp, m, seq_q, seq_kv) == pytest.approx(int(tokens.sum()) / m.pairs(seq_q, seq_kv))
    assert executed_pairs(sp, m, seq_q, seq_kv, "all") == seq_q * seq_kv
    assert executed_pairs(sp, m, seq_q, seq_kv, "causal") == seq_q * seq_kv  # a boolean mask: every pair
    assert executed_pairs(sp, m, seq_q, seq_kv, "blocks") == brute_block_pairs(tokens)
    assert executed_pairs(sp, m, seq_q, seq_kv, "selected") == int(tokens.sum())


def test_block_pairs_by_hand():
    # causal prefill at 320: 3 x 3 tiles of 128 (the last 64 wide); the three above the diagonal hold nothing
    sp, m = Sparsity.parse("block:64:1"), Mask(causal=True)
    assert block_pairs(sp, m, 320, 320) == 128 * 128 * 3 + 128 * 64 + 64 * 128 + 64 * 64
    assert block_pairs(Sparsity(), Mask(), 1, 320) == 320


@pytest.mark.parametrize("mask, seq_q, seq_kv", [("causal", 320, 320), ("causal", 100, 320), ("none", 1, 320),
                                                 ("window:20", 130, 384)])
def test_topk_counts(mask, seq_q, seq_kv):
    k = 24
    shape = shape_of(f"topk:{k}", mask, seq_q, seq_kv, batch=2)
    sp, m = shape.sparsity, shape.mask
    tokens = keep_for(shape).tokens
    for b in range(2):
        assert kept_per_row(sp, m, seq_q, seq_kv).tolist() == tokens[b].sum(dim=1).tolist()
        assert kept_pairs(sp, m, seq_q, seq_kv) == int(tokens[b].sum())
        assert kept_keys(sp, m, seq_q, seq_kv) >= int(tokens[b].any(dim=0).sum())  # an upper bound
        assert block_pairs(sp, m, seq_q, seq_kv) >= brute_block_pairs(tokens[b])  # the mask's blocks: a bound
    assert kept_keys(sp, m, seq_q, seq_kv) <= seq_q * k
    assert executed_pairs(sp, m, seq_q, seq_kv, "selected") == seq_q * k  # the padding slots included
    assert executed_pairs(sp, m, seq_q, seq_kv, "all") == seq_q * seq_kv


def test_dense_executed_pairs():
    m = Mask(causal=True)
    assert executed_pairs(Sparsity(), m, 64, 64, "causal") == m.pairs(64, 64) == 64 * 65 // 2
    assert executed_pairs(Sparsity(), Mask(window=8), 64, 64, "causal") == 64 * 64  # a window: a boolean mask
    assert executed_pairs(Sparsity(), Mask(window=8), 64, 64, "visible") == Mask(window=8).pairs(64, 64)
    assert executed_pairs(Sparsity(), m, 64, 64, None) is None


# --- 5. the indexer ------------------------------------------------------------------------------------------------

def brute_scores(x, mask: str) -> list[list[dict[int, float]]]:
    """Per sequence and query: {visible key: sum_h w[h] * relu(q[h] . key)}, in float64, by loops."""
    B, H, Sq, _ = x.q.shape
    Skv = x.k.shape[1]
    q, keys, w = x.q.double(), x.k.double(), x.w.double()
    return [[{s: sum(float(w[b, h, t]) * max(0.0, float(q[b, h, t] @ keys[b, s])) for h in range(H))
              for s in range(Skv) if mask_sees(mask, t + Skv - Sq, s)} for t in range(Sq)] for b in range(B)]


@pytest.mark.parametrize("text, mask, seq_q, seq_kv", [("topk:8", "causal", 20, 20), ("topk:8", "causal", 9, 30),
                                                       ("topk:8", "causal", 1, 30), ("topk:8", "none", 12, 25),
                                                       ("topk:6:3x8", "window:4", 10, 16)])
def test_indexer_select_equals_brute_force(text, mask, seq_q, seq_kv):
    shape = shape_of(text, mask, seq_q, seq_kv, batch=2, heads=(8, 2))
    k = shape.sparsity.k
    x = make_indexer_inputs(shape, "cpu", seed=3)
    picked = select(x, k, shape.mask)
    assert picked.shape == (2, seq_q, k) and picked.dtype == torch.int64
    for b, rows in enumerate(brute_scores(x, mask)):
        for t, scores in enumerate(rows):
            row = picked[b, t].tolist()
            pad = k - min(k, len(scores))  # fewer visible keys than K: exactly K - visible slots of -1, first
            assert row[:pad] == [-1] * pad and -1 not in row[pad:], (b, t, row)
            keys = row[pad:]
            assert keys == sorted(set(keys)) and set(keys) <= set(scores)  # ascending, distinct, visible
            # the K best by torch.topk; compared by score, as ReLU leaves ties at 0 that either key may break
            best = torch.tensor(list(scores.values()), dtype=torch.float64).topk(len(keys)).values
            got = torch.tensor(sorted((scores[j] for j in keys), reverse=True), dtype=torch.float64)
            assert torch.allclose(got, best, rtol=1e-5, atol=1e-5), (b, t, row)


def test_indexer_dims_follow_dsa_or_the_text():
    assert make_indexer_inputs(shape_of("topk:8", heads=(8, 2), head_dim=64), "cpu").q.shape == (1, 2, 64, 32)
    assert make_indexer_inputs(shape_of("topk:8", heads=(4, 1), head_dim=16), "cpu").q.shape == (1, 1, 64, 16)
    x = make_indexer_inputs(shape_of("topk:8:3x8"), "cpu")
    assert x.q.shape == (1, 3, 64, 8) and x.k.shape == (1, 64, 8) and x.w.shape == (1, 3, 64)


def test_indexer_is_reproducible_from_its_seed():
    shape = shape_of("topk:8", "causal", 32, 32, batch=2)
    a = select(make_indexer_inputs(shape, "cpu", seed=5), 8, shape.mask)
    b = select(make_indexer_inputs(shape, "cpu", seed=5), 8, shape.mask)
    assert torch.equal(a, b)
    assert not torch.equal(a, select(make_indexer_inputs(shape, "cpu", seed=6), 8, shape.mask))


# --- 6. backends against the reference under a keep-set -------------------------------------------------------------

# (sparsity, Skv): the block kind needs B | Skv, the others take an odd length
BACKEND_KINDS = [("block:12:0.5", 48), ("docs:3", 53), ("global:3+window:6", 53), ("topk:8", 53)]
BACKEND_LENGTHS = {"prefill": lambda kv: (kv, kv), "shorter-q": lambda kv: (20, kv), "decode": lambda kv: (1, kv)}
HEADS = {"gqa": (6, 2), "mqa": (4, 1)}


@functools.cache
def sparse_case(text: str, seq_kv: int, heads: str, mask: str, phase: str):
    """(q, k, v, keep-set, float64 sparse reference, float64 dense reference): one per case, shared by the backends."""
    seq_q, seq_kv = BACKEND_LENGTHS[phase](seq_kv)
    shape = shape_of(text, mask, seq_q, seq_kv, batch=2, heads=HEADS[heads])
    q, k, v = make_inputs(shape, "cpu", seed=1)
    keep = keep_for(shape, seed=1)
    m = shape.mask
    return q, k, v, keep, reference_attention(q, k, v, mask=m, sparse=keep), reference_attention(q, k, v, mask=m)


def _backend_params():
    for backend, (text, kv), heads, mask, phase in itertools.product(
            ("naive", "sdpa", "sdpa-math", "sdpa-flash", "topk-gather"), BACKEND_KINDS, HEADS, ("none", "causal"),
            BACKEND_LENGTHS):
        if backend == "topk-gather" and not text.startswith("topk"):
            continue
        yield pytest.param(backend, text, kv, heads, mask, phase, id=f"{backend}-{text}-{heads}-{mask}-{phase}")


@pytest.mark.parametrize("backend, text, seq_kv, heads, mask, phase", list(_backend_params()))
def test_backend_matches_reference_under_keep_set(backend, text, seq_kv, heads, mask, phase):
    q, k, v, keep, ref, _ = sparse_case(text, seq_kv, heads, mask, phase)
    with torch.no_grad():
        out = attention(q, k, v, backend=backend, mask=Mask.parse(mask), sparse=keep)
    assert out.shape == q.shape and out.dtype == q.dtype
    check = compare_to_reference(out, ref)
    assert check.ok, check.describe()


@pytest.mark.parametrize("text, seq_kv", BACKEND_KINDS)
@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("phase", list(BACKEND_LENGTHS))
def test_the_check_would_catch_a_backend_ignoring_the_keep_set(text, seq_kv, mask, phase):
    q, k, v, _, sparse_ref, dense_ref = sparse_case(text, seq_kv, "gqa", mask, phase)
    assert float((sparse_ref - dense_ref).abs().max()) > 100 * (ATOL32 + RTOL32)
    with torch.no_grad():  # a backend handed the keep-set that computes the dense case fails the check
        ignoring = attention(q, k, v, backend="naive", mask=Mask.parse(mask))
    assert compare_to_reference(ignoring, dense_ref).ok
    assert not compare_to_reference(ignoring, sparse_ref).ok


def test_topk_gather_takes_topk_only():
    shape = shape_of("block:16:0.5", "causal", 64, 64, heads=(4, 1))
    q, k, v = make_inputs(shape, "cpu")
    with pytest.raises(Unsupported, match="takes no block sparsity"):
        attention(q, k, v, backend="topk-gather", mask="causal", sparse=keep_for(shape))
    with pytest.raises(Unsupported, match="runs sparse attention only"):
        attention(q, k, v, backend="topk-gather", mask="causal")


def test_keep_set_must_fit_the_call():
    shape = shape_of("block:16:0.5", "causal", 64, 64, heads=(4, 1))
    q, k, v = make_inputs(shape, "cpu")
    with pytest.raises(ShapeError, match="the keep-set is for"):
        attention(q, k, v, backend="naive", mask="none", sparse=keep_for(shape))
    with pytest.raises(ShapeError, match="takes no score variant"):
        attention(q, k, v, backend="naive", mask="causal", score="softcap:50", sparse=keep_for(shape))


def test_gradients_under_a_block_keep_set():
    shape = shape_of("block:12:0.5", "causal", 48, 48, heads=(6, 2))
    keep = keep_for(shape)
    check = check_gradients("naive", shape, "cpu", sparse=keep)
    assert check.ok, check.describe()


@pytest.mark.slow
@pytest.mark.parametrize("text", ["block:32:0.5", "topk:16"])
def test_flex_matches_reference_under_keep_set(text):
    shape = shape_of(text, "causal", 256, 256, heads=(4, 1))
    q, k, v = make_inputs(shape, "cpu", seed=1)
    keep = keep_for(shape, seed=1)
    with torch.no_grad():
        out = attention(q, k, v, backend="flex", mask="causal", sparse=keep)
    check = compare_to_reference(out, reference_attention(q, k, v, mask="causal", sparse=keep))
    assert check.ok, check.describe()
    # the BlockMask's blocks are those holding a kept pair (128 x 128, whole): what executed FLOPs count
    assert "block_mask" in keep.derived and keep.derived["build_s"] > 0
    assert keep.derived["pairs_per_sequence"] == brute_block_pairs(keep.tokens[0])
    if shape.sparsity.static:
        assert keep.derived["pairs_per_sequence"] == block_pairs(shape.sparsity, shape.mask, 256, 256)


# --- 7. which backends a sweep offers a sparse case ----------------------------------------------------------------

def test_a_backend_declaring_no_sparsity_is_offered_dense_cases_only(monkeypatch):
    monkeypatch.setitem(BACKENDS, "no-sparsity", Backend("no-sparsity", naive_attention, "test backend",
                                                         "materialising", "#000000", "o", sparsity=()))
    sweep = Sweep(backends=("naive", "no-sparsity"), heads=(4,), kv_heads=(1,), seqs=(64,), masks=("causal",),
                  phases=("prefill", "decode"), decode_kv=(64,), sparsities=("none", "block:16:0.5"))
    swept = cases(sweep, "cpu")
    mine = [c for c in swept if c.backend == "no-sparsity"]
    naive = [c for c in swept if c.backend == "naive"]
    assert {c.shape.sparsity.label for c in naive} == {"none", "block:16:0.5"}  # the sweep has sparse cases
    assert mine and {c.shape.sparsity.label for c in mine} == {"none"}
    assert {c.shape for c in mine} == {c.shape for c in naive if not c.shape.sparsity.sparse}
    assert not offered("no-sparsity", shape_of("block:16:0.5"))


def test_a_sparse_only_backend_is_offered_its_kind_only():
    sweep = Sweep(backends=("topk-gather", "sdpa"), heads=(4,), kv_heads=(1,), seqs=(64,), masks=("causal",),
                  sparsities=("none", "block:16:0.5", "topk:8"))
    by_backend = {b: {c.shape.sparsity.label for c in cases(sweep, "cpu") if c.backend == b}
                  for b in ("topk-gather", "sdpa")}
    assert by_backend == {"topk-gather": {"topk:8"}, "sdpa": {"none", "block:16:0.5", "topk:8"}}
    assert [c.kind for c in cases(sweep, "cpu") if c.backend == "topk-gather"] == ["sparse"]


# --- 8. whole cases through the runner -----------------------------------------------------------------------------

def run_case(backend: str, shape: AttentionShape) -> dict:
    return Runner(calibration=CALIBRATION, case_budget_s=0.05).run(Case(backend, shape, "prefill", "fwd", "cpu")).record


def test_runner_topk_case():
    B, Hq, D, S, K = 1, 4, 16, 64, 8
    shape = shape_from_fields(dict(batch=B, seq_q=S, seq_kv=S, n_heads=Hq, n_kv_heads=1, head_dim=D, dtype="fp32",
                                   mask="causal", sparsity=f"topk:{K}"))
    r = run_case("sdpa", shape)
    assert r.status == "ok", r.reason
    kept = sum(min(K, i + 1) for i in range(S))  # causal: query i sees i + 1 keys and keeps K of them
    assert r.useful_flops == r.flops == 2 * B * Hq * (2 * D) * kept == attention_flops(shape)
    # the indexer: H = max(1, Hq // 4) heads of dim max(16, D // 2), every visible pair scored
    assert r.indexer_flops == indexer_flops(shape) == 2 * B * 1 * 16 * (S * (S + 1) // 2)
    # sdpa is handed the keep-set as a boolean mask: it computes every pair
    assert r.executed_flops == 2 * B * Hq * (2 * D) * S * S + r.indexer_flops
    assert r.executed_flops == executed_flops(shape, "fwd", BACKENDS["sdpa"].executes)
    assert r.density == pytest.approx(kept / (S * (S + 1) // 2)) and r.density < 1
    assert r.indexer_s > 0
    assert r.total_s == pytest.approx(r.median_s + r.indexer_s)
    assert r.block_mask_build_s is None
    assert r.max_abs_err <= 2e-4


def test_runner_block_case():
    B, Hq, D, S = 1, 4, 16, 64
    shape = shape_from_fields(dict(batch=B, seq_q=S, seq_kv=S, n_heads=Hq, n_kv_heads=1, head_dim=D, dtype="fp32",
                                   mask="causal", sparsity="block:16:0.5"))
    r = run_case("sdpa", shape)
    assert r.status == "ok", r.reason
    kept = int(torch.tensor(brute_keep("block:16:0.5", "causal", S, S)).sum())
    assert r.useful_flops == r.flops == 2 * B * Hq * (2 * D) * kept
    assert r.executed_flops == 2 * B * Hq * (2 * D) * S * S
    assert r.density == pytest.approx(kept / (S * (S + 1) // 2)) and r.density < 1
    assert r.indexer_s is None and r.indexer_flops is None and r.block_mask_build_s is None
    assert r.total_s == r.median_s
    assert r.max_abs_err <= 2e-4


USER_KERNEL = '''
import torch
import bench


@bench.backend(name="mine", memory="materialising", devices=("cpu",), dtypes=("fp32",),
               sparsity=("block", "topk", "tree"), executes="all")
def attn(q, k, v, *, causal, window, sparse=None):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    i = torch.arange(q.shape[2])[:, None] + (k.shape[2] - q.shape[2])
    j = torch.arange(k.shape[2])[None, :]
    ok = (j <= i) if causal else torch.ones_like(j <= i)
    if window is not None:
        ok = ok & (j > i - window)
    if sparse is not None and KEEP:
        ok = ok & sparse.tokens[:, None]
    return s.masked_fill(~ok, float("-inf")).softmax(-1) @ v
'''


@pytest.mark.parametrize("keeps", [True, False])
def test_a_kernel_of_ones_own_declares_its_sparsities_and_bench_check_runs_them(tmp_path, monkeypatch, keeps):
    """Its declared kinds get groups (and the keep-set as sparse=; a draft tree's too); one that ignores the keep-set
    fails just those."""
    from bench.backends import outside
    from bench.conformance import check

    (tmp_path / f"sparse_user_{keeps}.py").write_text(USER_KERNEL.replace("KEEP", str(keeps)))
    monkeypatch.syspath_prepend(str(tmp_path))
    outside.forget()
    rows = check(f"sparse_user_{keeps}:attn", dtypes=("fp32",))
    sparse = {r.group.sparsity: r.status for r in rows if r.group.sparsity != "none" and r.group.pass_ == "fwd"}
    assert set(sparse) == {"block", "topk", "tree"}  # not docs, not global: it declares neither
    dense = [r for r in rows if r.group.sparsity == "none"]
    assert dense and all(r.status == "pass" for r in dense)
    assert set(sparse.values()) == ({"pass"} if keeps else {"fail"})
