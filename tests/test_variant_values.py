"""Masks and score variants as values (bench.problem.masks.Mask, bench.problem.scores.Score): parse and label, the
shape's columns
and case ids unchanged, one value per call, and kernels written to the keyword signature (causal, window and the
variant keywords) still checked and timed, through the adapter."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from bench.backends import attention
from bench.backends.outside import forget
from bench.cli import main
from bench.engine.runner import Runner
from bench.engine.sweeps import Case
from bench.errors import InputError
from bench.problem.columns import shape_fields, shape_from_fields
from bench.problem.masks import CAUSAL, NO_MASK, Mask
from bench.problem.scores import NO_SCORE, Score, sink_logits
from bench.problem.shapes import AttentionShape, ShapeError
from bench.reference import reference_attention
from bench.results.meta import Calibration

CALIBRATION = Calibration.from_dict({"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10})

# Kernels of one's own, written by hand (none of bench's helpers): two to the keyword signature README.md documents,
# one to the values, and one that records the keywords it was given.
KERNELS = textwrap.dedent('''
    import math

    import torch

    import bench

    SEEN = []


    def _attend(q, k, v, causal, window, chunk=None, softcap=None, alibi=False, sinks=None):
        B, Hq, Sq, D = q.shape
        Hkv, Skv = k.shape[1], k.shape[2]
        idx = torch.arange(Hq) // (Hq // Hkv)
        k, v = k[:, idx], v[:, idx]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Sq)[:, None] + (Skv - Sq)
        j = torch.arange(Skv)[None, :]
        if alibi:  # Hq a power of two: slopes 2^(-8h/Hq), h = 1..Hq
            slopes = torch.tensor([2 ** (-8 * (h + 1) / Hq) for h in range(Hq)], dtype=s.dtype)
            s = s - slopes[:, None, None] * (i - j).abs()
        ok = torch.ones(Sq, Skv, dtype=torch.bool)
        if causal:
            ok &= j <= i
        if window is not None:
            ok &= j > i - window
        if chunk is not None:
            ok &= i // chunk == j // chunk
        s = s.masked_fill(~ok, float("-inf"))
        if sinks is not None:
            col = sinks.to(s.dtype).view(1, Hq, 1, 1).expand(B, Hq, Sq, 1)
            return torch.cat([s, col], -1).softmax(-1)[..., :-1] @ v
        return s.softmax(-1) @ v


    @bench.backend(devices=("cpu",), dtypes=("fp32",))
    def plain(q, k, v, *, causal, window):
        return _attend(q, k, v, causal, window)


    @bench.backend(devices=("cpu",), dtypes=("fp32",), variants=("softcap", "alibi", "sinks", "chunk"))
    def every(q, k, v, *, causal, window, chunk=None, softcap=None, alibi=False, sinks=None):
        return _attend(q, k, v, causal, window, chunk, softcap, alibi, sinks)


    @bench.backend(devices=("cpu",), dtypes=("fp32",), variants=("softcap",))
    def values(q, k, v, *, mask, score):
        return _attend(q, k, v, mask.causal, mask.window, mask.chunk, score.softcap)


    @bench.backend(variants=("softcap", "alibi", "sinks", "chunk"))
    def spy(q, k, v, *, causal, window, **variants):
        SEEN.append({"causal": causal, "window": window, **variants})
        return _attend(q, k, v, causal, window, **variants)
''')


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    (tmp_path / "kw_kernels.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    forget()
    yield sys.modules.get("kw_kernels")
    forget()
    sys.modules.pop("kw_kernels", None)


def shape(mask: str = "causal", score: str = "none", seq_q: int = 24, seq_kv: int = 24) -> AttentionShape:
    return shape_from_fields(dict(batch=2, seq_q=seq_q, seq_kv=seq_kv, n_heads=4, n_kv_heads=2, head_dim=16,
                                  dtype="fp32", mask=mask, score=score))


def run_case(backend: str, s: AttentionShape) -> dict:
    return Runner(CALIBRATION, case_budget_s=0.02).run(Case(backend, s, "prefill", "fwd", "cpu")).record


# --- the values ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["none", "causal", "window:256", "chunk:8192", "window:3+chunk:8"])
def test_mask_parse_and_label_round_trip(text):
    assert Mask.parse(text).label == text
    assert Mask.parse(text) == Mask.parse(text) and hash(Mask.parse(text)) == hash(Mask.parse(text))


@pytest.mark.parametrize("text", ["none", "softcap:50", "softcap:2.5", "alibi", "sinks", "softcap:30+alibi+sinks"])
def test_score_parse_and_label_round_trip(text):
    assert Score.parse(text).label == text


@pytest.mark.parametrize("text", ["window", "window:0", "chunk:x", "sliding:3", "causal:2", "none+causal"])
def test_bad_masks_are_input_errors(text):
    with pytest.raises(InputError):
        Mask.parse(text)


@pytest.mark.parametrize("text", ["softcap", "softcap:-1", "softcap:inf", "alibi:2", "bias", "none+sinks"])
def test_bad_scores_are_input_errors(text):
    with pytest.raises(InputError):
        Score.parse(text)


def test_a_window_or_a_chunk_implies_causal_and_only_a_chunk_needs_a_trait():
    assert Mask(window=4).causal and Mask(chunk=8).causal and Mask(window=4) == Mask(causal=True, window=4)
    assert NO_MASK.variants == () and Mask(window=4).variants == () and Mask(chunk=8).variants == ("chunk",)
    assert Score(softcap=30, alibi=True, sinks=True).variants == ("softcap", "alibi", "sinks")


@pytest.mark.parametrize("mask", ["none", "causal", "window:5", "chunk:4", "window:3+chunk:4"])
@pytest.mark.parametrize("sq, skv", [(9, 9), (3, 11), (1, 7)])
def test_pairs_count_what_visible_shows(mask, sq, skv):
    m = Mask.parse(mask)
    ok = m.visible(sq, skv)
    assert m.pairs(sq, skv) == (sq * skv if ok is None else int(ok.sum()))


def test_the_shape_keeps_its_columns_and_gives_its_values():
    s = shape("window:256", "softcap:50", seq_q=512, seq_kv=512)
    assert (s.mask.kind, s.mask.window, s.mask.chunk, s.score.label) == ("window", 256, None, "softcap:50")
    assert shape_fields(s)["mask"] == "window:256" and shape_fields(s)["score"] == "softcap:50"
    assert shape_fields(s)["window"] == 256 and shape_from_fields(shape_fields(s)) == s
    assert s.mask == Mask(window=256) and s.score == Score(softcap=50.0)
    c = shape("chunk:8", "sinks")
    assert shape_fields(c)["mask"] == "chunk:8" and c.mask == Mask(chunk=8) and c.score.sinks
    case = Case("naive", c, "prefill", "fwd", "cpu")
    assert case.id == "naive/gqa/b2-hq4-hkv2-q24-kv24-d16-score=sinks/fp32/chunk:8/prefill/fwd/cpu"


# --- one value per call -------------------------------------------------------------------------------------------

def test_attention_takes_the_values_their_text_or_the_keywords_alike():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, 12, 8, generator=g) for n in (4, 2, 2))
    by_keywords = attention(q, k, v, backend="naive", window=5, softcap=2.0)
    assert torch.equal(attention(q, k, v, backend="naive", mask=Mask(window=5), score=Score(softcap=2.0)), by_keywords)
    assert torch.equal(attention(q, k, v, backend="naive", mask="window:5", score="softcap:2"), by_keywords)
    seeded = attention(q, k, v, backend="naive", mask=CAUSAL, score="sinks")  # sinks by text: the seeded logits
    assert torch.equal(seeded, attention(q, k, v, backend="naive", causal=True, sinks=sink_logits(4)))
    with pytest.raises(ShapeError, match="not both"):
        attention(q, k, v, backend="naive", mask="causal", window=5)
    with pytest.raises(ShapeError, match="not both"):
        attention(q, k, v, backend="naive", score=NO_SCORE, alibi=True)
    with pytest.raises(ShapeError, match=r"\(4,\) tensor"):
        attention(q, k, v, backend="naive", score=Score(sinks=True, sink_logits=torch.zeros(3)))


# --- kernels written to the keyword signature -----------------------------------------------------------------------

def test_a_keyword_kernel_passes_bench_check(kernels, capsys):
    assert main(["check", "kw_kernels:plain", "--dtype", "fp32", "--device", "cpu", "--variant", "gqa"]) == 0
    assert "fail" not in capsys.readouterr().out.replace("failed", "")
    assert main(["check", "kw_kernels:values", "--dtype", "fp32", "--device", "cpu", "--variant", "mqa"]) == 0


@pytest.mark.parametrize("mask, score", [("causal", "none"), ("window:5", "none"), ("none", "none"),
                                         ("chunk:8", "none"), ("causal", "softcap:2"), ("causal", "alibi"),
                                         ("causal", "sinks")])
def test_a_keyword_kernel_runs_every_variant_it_declares_through_the_engine(kernels, mask, score):
    record = run_case("kw_kernels:every", shape(mask, score))
    assert record.status == "ok", record.reason


def test_a_keyword_kernel_is_refused_a_variant_it_does_not_declare(kernels):
    record = run_case("kw_kernels:plain", shape("causal", "alibi"))
    assert record.status == "unsupported" and "it does not take alibi" in record.reason
    assert run_case("kw_kernels:plain", shape("window:5")).status == "ok"


def test_the_adapter_gives_the_old_keywords_and_only_those_asked_for(kernels):
    import kw_kernels

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, n, 10, 8, generator=g) for n in (4, 2, 2))
    attention(q, k, v, backend="kw_kernels:spy", window=3)
    attention(q, k, v, backend="kw_kernels:spy", mask="chunk:4", score="sinks")
    attention(q, k, v, backend="kw_kernels:spy", score=Score(softcap=2.0, alibi=True))
    plain, chunked, scored = kw_kernels.SEEN
    assert plain == {"causal": True, "window": 3}
    assert set(chunked) == {"causal", "window", "chunk", "sinks"} and chunked["chunk"] == 4
    assert torch.equal(chunked["sinks"], sink_logits(4))
    assert scored == {"causal": False, "window": None, "softcap": 2.0, "alibi": True}
    out = attention(q, k, v, backend="kw_kernels:spy", mask="window:3+chunk:4", score="softcap:2+alibi+sinks")
    ref = reference_attention(q, k, v, mask="window:3+chunk:4", score="softcap:2+alibi+sinks")
    assert torch.allclose(out.double(), ref, atol=1e-5)
