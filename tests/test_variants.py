"""Attention variants (softcap, ALiBi, sinks, chunk): the reference against a brute-force loop, each backend against the
reference or Unsupported with its reason, the chunk mask's pair count, the axes and the case ids."""

from __future__ import annotations

import math

import pytest
import torch

import bench
from bench.backends import BACKENDS
from bench.counts.metrics import attention_bytes, attention_flops
from bench.engine import sweeps
from bench.problem.columns import shape_from_fields
from bench.problem.masks import visible, visible_pairs
from bench.problem.scores import alibi_slopes, parse_score, sink_logits
from bench.problem.shapes import ShapeError, parse_mask
from bench.reference import compare_to_reference, reference_attention

VARIANTS = {
    "softcap": {"softcap": 1.5},
    "alibi": {"alibi": True},
    "sinks": {"sinks": "seeded"},
    "chunk": {"chunk": 5},
    "alibi+chunk": {"alibi": True, "chunk": 4},
    "softcap+sinks+window": {"softcap": 2.0, "sinks": "seeded", "window": 3},
}


def _kwargs(variant: str, n_heads: int) -> dict:
    kw = dict(VARIANTS[variant])
    if kw.get("sinks") == "seeded":
        kw["sinks"] = sink_logits(n_heads)
    return kw


def brute_force(q, k, v, causal=True, window=None, chunk=None, softcap=None, alibi=False, sinks=None):
    """The conventions as bench.problem.masks and bench.problem.scores state them, one (b, h, i) row at a time in
    Python floats."""
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    off = Skv - Sq
    slopes = alibi_slopes(Hq)
    out = torch.zeros(B, Hq, Sq, D, dtype=torch.float64)
    for b in range(B):
        for h in range(Hq):
            kh = h // (Hq // Hkv)
            for i in range(Sq):
                logits, values = [], []
                for j in range(Skv):
                    seen = not causal or j <= i + off
                    if window is not None:
                        seen = seen and j > i + off - window
                    if chunk is not None:
                        seen = seen and j <= i + off and (i + off) // chunk == j // chunk
                    if not seen:
                        continue
                    s = sum(float(q[b, h, i, d]) * float(k[b, kh, j, d]) for d in range(D)) / math.sqrt(D)
                    if softcap is not None:
                        s = softcap * math.tanh(s / softcap)
                    if alibi:
                        s -= slopes[h] * abs(i + off - j)
                    logits.append(s)
                    values.append(v[b, kh, j].double())
                denom = sum(math.exp(s) for s in logits) + (math.exp(float(sinks[h])) if sinks is not None else 0.0)
                for s, val in zip(logits, values, strict=True):
                    out[b, h, i] += math.exp(s) / denom * val
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_reference_matches_brute_force(variant):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, n, s, 4, generator=g, dtype=torch.float64) for n, s in ((6, 5), (3, 9), (3, 9)))
    kw = _kwargs(variant, 6)
    ref = reference_attention(q, k, v, causal=True, **kw)
    assert torch.allclose(ref, brute_force(q, k, v, **kw), atol=1e-12)


def test_alibi_slopes_follow_the_paper():
    assert alibi_slopes(8) == [2 ** -(h + 1) for h in range(8)]
    # 12 heads: the 8-head slopes, then every other one of the 16-head slopes
    sixteen = [2 ** (-(h + 1) / 2) for h in range(16)]
    assert alibi_slopes(12) == pytest.approx(alibi_slopes(8) + sixteen[0::2][:4])
    assert len(alibi_slopes(6)) == 6


def test_sinks_take_mass_and_add_no_value():
    q, k = torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 3, 4)
    v = torch.ones(1, 2, 3, 4)
    out = reference_attention(q, k, v, sinks=torch.tensor([0.0, math.log(3.0)]))
    # head 0: 3 keys of weight 1 and the sink's 1 -> 3/4 of the value; head 1: 3 / (3 + 3)
    assert torch.allclose(out[0, :, 0, 0], torch.tensor([0.75, 0.5], dtype=torch.float64))


BUILT_IN_EAGER = ["naive", "sdpa", "sdpa-math", "sdpa-flash"]


@pytest.mark.parametrize("backend", [*BUILT_IN_EAGER, "hf-eager", "hf-sdpa"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_backends_run_or_refuse(backend, variant, dtype):
    if backend.startswith("hf-"):
        pytest.importorskip("transformers")  # the [hf] extra
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 24, 16, generator=g).to(dtype)
    k, v = (torch.randn(2, 2, 40, 16, generator=g).to(dtype) for _ in range(2))
    kw = _kwargs(variant, 4)
    needs = {name for name in ("softcap", "alibi", "sinks", "chunk") if kw.get(name) is not None}
    if needs - set(BACKENDS[backend].variants):
        with pytest.raises(bench.Unsupported, match="cannot express" if backend in BUILT_IN_EAGER else "runs: "):
            bench.attention(q, k, v, backend=backend, causal=True, **kw)
        return
    if backend == "hf-eager" and {"softcap", "sinks"} <= needs:  # Gemma-2's eager caps, gpt-oss's has sinks
        with pytest.raises(bench.Unsupported, match="softcap and sinks together"):
            bench.attention(q, k, v, backend=backend, causal=True, **kw)
        return
    out = bench.attention(q, k, v, backend=backend, causal=True, **kw)
    check = compare_to_reference(out, reference_attention(q, k, v, causal=True, **kw))
    assert check.ok, check.describe()


@pytest.mark.slow
def test_flex_runs_every_variant():
    """One compile per variant (tens of seconds each on CPU); 64 x 64, the size flex's CPU kernel handles."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 64, 16, generator=g)
    k, v = (torch.randn(1, 2, 64, 16, generator=g) for _ in range(2))
    for variant in ("softcap", "alibi", "sinks", "chunk"):
        kw = _kwargs(variant, 4)
        out = bench.attention(q, k, v, backend="flex", causal=True, **kw)
        check = compare_to_reference(out, reference_attention(q, k, v, causal=True, **kw))
        assert check.ok, (variant, check.describe())
    other = torch.randn(4, generator=g) * 3  # other sink logits, same compiled graph: they are read, not baked in
    out = bench.attention(q, k, v, backend="flex", causal=True, sinks=other)
    assert compare_to_reference(out, reference_attention(q, k, v, causal=True, sinks=other)).ok


def test_flash_attn_declares_softcap_and_alibi_only():
    assert set(BACKENDS["flash-attn"].variants) == {"softcap", "alibi"}
    why = BACKENDS["flash-attn"].variant_reason(("sinks",))
    assert why and "sink" in why


def test_bad_variant_arguments_are_refused():
    q = k = v = torch.randn(1, 2, 8, 4)
    with pytest.raises(ShapeError, match="sinks"):
        bench.attention(q, k, v, backend="naive", sinks=torch.zeros(3))
    with pytest.raises(ShapeError, match="chunk"):
        bench.attention(q, k, v, backend="naive", chunk=0)
    with pytest.raises(ShapeError, match="softcap"):
        bench.attention(q, k, v, backend="naive", softcap=-1.0)


@pytest.mark.parametrize("sq,skv,chunk", [(9, 9, 4), (3, 17, 5), (1, 30, 8), (16, 16, 16), (12, 40, 1)])
def test_chunk_pairs_are_exact(sq, skv, chunk):
    assert visible_pairs(sq, skv, True, None, chunk) == int(visible(sq, skv, True, None, chunk=chunk).sum())


def test_chunk_flops_count_visible_pairs_and_bytes_do_not_change():
    chunked = shape_from_fields(dict(batch=1, seq_q=64, seq_kv=64, n_heads=2, n_kv_heads=2, head_dim=8, mask="chunk",
                                     chunk=16))
    causal = shape_from_fields(dict(batch=1, seq_q=64, seq_kv=64, n_heads=2, n_kv_heads=2, head_dim=8, mask="causal"))
    assert attention_flops(chunked) == 4 * 2 * 8 * 4 * (16 * 17 // 2)
    assert attention_flops(shape_from_fields(dict(batch=1, seq_q=64, seq_kv=64, n_heads=2, n_kv_heads=2, head_dim=8,
                                                  mask="causal", score="softcap:30"))) == \
        attention_flops(causal)
    assert attention_bytes(chunked) == attention_bytes(causal)


def test_parsing():
    assert parse_mask("chunk:8192") == ("chunk", 8192)
    assert parse_score("softcap:50") == ("softcap", 50.0)
    assert parse_score("alibi") == ("alibi", None)
    for bad in ("softcap", "softcap:-1", "alibi:2", "tanh"):
        with pytest.raises(bench.ShapeError.__mro__[1]):
            parse_score(bad)
    with pytest.raises(ShapeError):
        shape_from_fields(dict(batch=1, seq_q=8, seq_kv=8, n_heads=2, n_kv_heads=2, head_dim=4, mask="chunk"))
    with pytest.raises(ShapeError):
        shape_from_fields(dict(batch=1, seq_q=8, seq_kv=8, n_heads=2, n_kv_heads=2, head_dim=4, score="softcap:x"))


def test_axes_make_new_ids_and_keep_old_ones():
    plain = sweeps.Sweep(backends=("naive",), heads=(2,), kv_heads=(2,), seqs=(32,), phases=("prefill", "decode"),
                         decode_kv=(64,))
    ids = [c.id for c in sweeps.cases(plain, "cpu")]
    varied = [c.id for c in sweeps.cases(plain.with_axes(masks=("causal", "chunk:16"),
                                                         scores=("none", "softcap:30", "alibi", "sinks")), "cpu")]
    assert set(ids) <= set(varied)
    assert "naive/mha/b1-hq2-hkv2-q32-kv32-d64-score=alibi/fp32/chunk:16/prefill/fwd/cpu" in varied
    assert len(varied) == 8 * len(ids)


def _frame(times: dict[tuple[str, str, str], float]):
    import pandas as pd

    from bench.problem.columns import shape_fields
    rows = []
    for (backend, mask, score), t in times.items():
        shape = shape_from_fields(dict(batch=1, seq_q=128, seq_kv=128, n_heads=4, n_kv_heads=2, head_dim=16, mask=mask,
                                       score=score))
        ok = t > 0
        rows.append({**shape_fields(shape), "backend": backend, "phase": "prefill", "pass": "fwd",
                     "status": "ok" if ok else "unsupported", "reason": "" if ok else "sdpa: a softcap applies tanh",
                     "median_s": t if ok else None, "noisy": False, "d_model": None})
    return pd.DataFrame(rows)


def test_variant_claim_reads_traits_and_judges_the_ratio():
    from bench.analysis.traits import ALL_VARIANT_KERNELS
    from bench.analysis.variant_cost import variant_costs
    from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, NOT_MEASURED
    from bench.claims import CLAIMS, judge_of
    from bench.claims.variants import variants_within

    assert variants_within in [judge_of(s) for s in CLAIMS]  # the claim's judge, in its claim's module
    every = {"softcap", "alibi", "sinks", "chunk"}
    expected = tuple(n for n, b in BACKENDS.items() if b.memory == "tiled" and every <= set(b.variants))
    assert expected == ALL_VARIANT_KERNELS
    fused = ALL_VARIANT_KERNELS[0]
    times = {(fused, "causal", "none"): 1.0, (fused, "causal", "softcap:30"): 1.1, (fused, "chunk:32", "none"): 0.6,
             ("naive", "causal", "none"): 2.0, ("naive", "causal", "alibi"): 3.0,
             ("sdpa", "causal", "none"): 1.0, ("sdpa", "causal", "softcap:30"): 0.0}
    df = _frame(times)
    costs = variant_costs(df)
    assert set(costs["attn_variant"]) == {"softcap:30", "chunk:32", "alibi"}
    assert costs.set_index(["backend", "attn_variant"]).loc[("naive", "alibi"), "ratio"] == pytest.approx(1.5)
    assert variants_within(df).verdict == HOLDS
    times[(fused, "causal", "sinks")] = 2.0  # one condition fails beside two that hold
    verdict = variants_within(_frame(times))
    assert verdict.verdict == DEPENDS and "sinks" in verdict.why and f"{fused} · sinks 2.00×" in verdict.numbers
    times.update({(fused, "causal", "softcap:30"): 1.5, (fused, "chunk:32", "none"): 1.4})
    assert variants_within(_frame(times)).verdict == FAILS
    assert variants_within(_frame({("naive", "causal", "none"): 1.0})).verdict == NOT_MEASURED


def test_variant_figure_draws():
    from bench.report.catalogue import FIGURES

    df = _frame({("naive", "causal", "none"): 2.0, ("naive", "causal", "alibi"): 3.0,
                 ("sdpa", "causal", "none"): 1.0, ("sdpa", "causal", "softcap:30"): 0.0,
                 ("naive", "causal", "softcap:30"): 2.5})
    fig = FIGURES["variant_cost"].drawer()(df)
    assert fig is not None
    assert FIGURES["variant_cost"].drawer()(_frame({("naive", "causal", "none"): 1.0})) is None


LLAMA4 = {"model_type": "llama4_text", "num_hidden_layers": 8, "num_attention_heads": 40, "num_key_value_heads": 8,
          "hidden_size": 5120, "head_dim": 128, "attention_chunk_size": 8192}


def _read(data: dict):
    from bench.models.config_json import parse_config
    return parse_config(data, "config.json", "m")


def test_llama4_chunked_layers_and_their_cache():
    from bench.models.config import kv_total_bytes
    cfg = _read(LLAMA4)
    assert cfg.layer_kinds == ("chunked",) * 3 + ("full",) + ("chunked",) * 3 + ("full",)  # Llama4TextConfig's rule
    assert _read(LLAMA4 | {"no_rope_layers": [1, 0] * 4}).layer_kinds == ("chunked", "full") * 4
    assert _read(LLAMA4 | {"layer_types": ["full_attention"] * 8}).chunk is None
    per_layer_token = 2 * 8 * 128 * 2
    assert kv_total_bytes(cfg, 32768) == per_layer_token * (2 * 32768 + 6 * 8192)  # chunked: min(context, C)


def test_softcap_sinks_alibi_and_falcon_heads_from_config():
    gemma2 = _read({"model_type": "gemma2", "num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 64,
                    "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0})
    assert gemma2.score == "softcap:50" and "final_logit_softcapping" in gemma2.ignored[0]
    assert _read({"model_type": "gpt_oss", "num_hidden_layers": 2, "num_attention_heads": 8,
                  "hidden_size": 64}).score == "sinks"
    assert _read({"model_type": "bloom", "n_layer": 2, "n_head": 8, "hidden_size": 64}).score == "alibi"
    falcon = {"model_type": "falcon", "num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 64}
    assert _read(falcon).n_kv_heads == 1  # multi_query defaults to true, as FalconConfig's does
    assert _read(falcon | {"multi_query": False}).n_kv_heads == 8
    assert _read(falcon | {"new_decoder_architecture": True, "num_kv_heads": 2}).n_kv_heads == 2
    assert _read(falcon | {"new_decoder_architecture": True, "num_kv_heads": None}).n_kv_heads == 8


def test_model_sweeps_take_the_models_mask_and_score(tmp_path):
    import json
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA4 | {"attn_logit_softcapping": 30.0}))
    sweep = sweeps.Sweep(backends=("naive",), models=(str(path),), seqs=(64,), phases=("prefill",))
    ids = [c.id for c in sweeps.cases(sweep, "cpu")]
    assert any("/chunk:8192/" in i and "score=softcap:30" in i for i in ids)
    assert any("/causal/" in i and "score=softcap:30" in i for i in ids)
