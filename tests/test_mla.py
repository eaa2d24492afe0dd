"""MLA (bench.kinds.mla_calls): the absorbed form equals the expanded one, FLOPs and bytes worked by hand, the MLA case
kind
(check, record, guarded timed call), the --variant / --kv-lora-rank / --rope-dim axes and their case ids, the
decode profile, a DeepSeek-V3 config sweep, the conformance groups, and the "mla" trait of an outside backend."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import pytest
import torch

from bench.backends import Unsupported, attention
from bench.conformance import groups, run_group
from bench.counts.metrics import attention_bytes, attention_flops, latent_cache_bytes, model_mem_bytes
from bench.engine.sweeps import Case, Sweep, cases, profile
from bench.errors import UsageError
from bench.kinds import kind_of
from bench.kinds.base import ReferenceCache
from bench.kinds.mla_calls import MlaInputs, call_tensors, finish, make_mla_inputs, reference_mla
from bench.problem.columns import shape_fields, shape_from_fields
from bench.problem.masks import CAUSAL
from bench.problem.shapes import AttentionShape
from bench.reference import reference_attention


def mla(form: str = "expanded", **kw) -> AttentionShape:
    base = dict(batch=1, seq_q=16, seq_kv=16, n_heads=8, n_kv_heads=8, head_dim=96, dtype="fp32", mask="none",
                v_head_dim=64, kv_lora_rank=256, rope_dim=32, mla_form=form)
    if form == "absorbed":
        base |= dict(seq_q=1, seq_kv=100, n_kv_heads=1, mask="causal")
    return shape_from_fields(dict(**base | kw))


# --------------------------------------------------------------------------------------------- the two forms

@pytest.mark.parametrize("mask, window, sq", [("none", None, 7), ("causal", None, 1), ("causal", None, 7),
                                              ("window", 11, 3)])
def test_absorbed_equals_expanded_in_float64(mask, window, sq):
    shape = mla("absorbed", seq_q=sq, seq_kv=57, n_heads=4, head_dim=24, v_head_dim=20, kv_lora_rank=40, rope_dim=8,
                mask=mask, window=window, batch=2)
    x = make_mla_inputs(shape)
    x64 = MlaInputs(*(t.double() for t in dataclasses.astuple(x)))
    q, k, v = call_tensors(shape, x64, torch.float64)
    assert v.data_ptr() == k.data_ptr() and q.shape[-1] == 48  # V is the cache's first rank columns: read once
    absorbed = finish(shape, reference_attention(q, k, v, causal=shape.causal, window=window), x64)
    expanded = reference_mla(shape, x)
    assert expanded.shape == (2, 4, sq, 20)
    assert torch.allclose(absorbed, expanded, atol=1e-12, rtol=1e-12)
    # and the weights matter: another seed's W_UV moves the output by O(1)
    other = make_mla_inputs(shape, seed=5)
    assert (finish(shape, reference_attention(q, k, v, causal=shape.causal, window=window),
                   dataclasses.replace(x64, w_uv=other.w_uv.double())) - expanded).abs().max() > 0.1


def test_softmax_is_not_degenerate():
    """Weights scaled 1/sqrt(rank): the scores have about unit spread, so no row is one-hot and none is flat."""
    shape = mla("expanded", seq_q=64, seq_kv=64)
    q, k, _ = call_tensors(shape, make_mla_inputs(shape), torch.float64)
    probs = (q @ k.transpose(-1, -2) / shape.head_dim**0.5).softmax(-1)
    top = probs.max(-1).values
    assert 0.5 < float((q @ k.transpose(-1, -2) / shape.head_dim**0.5).std()) < 2.0
    assert float(top.median()) < 0.5 and float(top.median()) > 2 / 64


# --------------------------------------------------------------------------------------------- FLOPs, bytes

def test_flops_and_bytes_by_hand():
    e = mla()  # B 1, Hq 8, S 16, no mask: 256 pairs; D_qk 96, D_v 64
    assert attention_flops(e) == 2 * 8 * 256 * (96 + 64) == 655_360
    assert attention_bytes(e) == (8 * 16 * (96 + 64) + 8 * 16 * (96 + 64)) * 4 == 163_840  # Q+O, K+V at Hq heads
    a = mla("absorbed")  # Sq 1 against 100 keys; D_qk 256 + 32, D_v 256; the latent read once
    assert attention_flops(a) == 2 * 8 * 100 * (288 + 256) == 870_400
    assert attention_bytes(a) == (8 * 1 * (288 + 256) + 100 * 288) * 4 == 132_608
    assert attention_flops(a, "fwd+bwd") == int(870_400 * 3.5)
    # the other variants keep 4 * B * Hq * D * pairs and 2 x Q/O + 2 x K/V
    g = AttentionShape(2, 10, 10, 8, 2, 64)
    assert attention_flops(g) == 4 * 2 * 8 * 64 * 100
    assert attention_bytes(g) == (2 * 2 * 8 * 10 * 64 + 2 * 2 * 2 * 10 * 64) * 4
    # per byte read, MLA's absorbed decode does more FLOPs than MQA's step and ~Hq x MHA's (one latent, Hq heads)
    def intensity(s: AttentionShape) -> float:
        return attention_flops(s) / attention_bytes(s)
    mha_step = AttentionShape(1, 1, 100, 8, 8, 64, mask=CAUSAL)
    mqa_step = AttentionShape(1, 1, 100, 8, 1, 64, mask=CAUSAL)
    assert intensity(a) > intensity(mqa_step) and 4 < intensity(a) / intensity(mha_step) < 2 * 8


def test_memory_models_and_latent_cache():
    a = mla("absorbed")
    # scores and probabilities, the causal mask and its negation, the one latent repeated to Hq heads (K 288, V 256)
    assert model_mem_bytes(a, "materialising") == 2 * 8 * 100 * 4 + 2 * 100 + 8 * 100 * (288 + 256) * 4
    assert model_mem_bytes(a, "tiled") == 8 * 1 * 256 * 4 + 8 * 4  # the output at D_v and a float32 LSE per row
    assert latent_cache_bytes(61, 576, 32768, 1, "bf16") == 2_302_672_896  # DeepSeek-V3 at 32k (test_models)
    assert latent_cache_bytes(1, 576, 10_000, 2, "bf16", window=4096) == 576 * 4096 * 2 * 2


# --------------------------------------------------------------------------------------------- the case kind

@pytest.mark.parametrize("form", ["expanded", "absorbed"])
def test_mla_kind_checks_records_and_guards(form):
    shape = mla(form)
    case = Case("sdpa", shape, "decode" if form == "absorbed" else "prefill", "fwd", "cpu")
    kind = kind_of(shape)
    assert kind.name == "mla"
    check, _ = kind.check(case, kind.setup(case), ReferenceCache())
    assert check.ok, check.describe()
    fields = kind.record_fields(case, __import__("bench.backends", fromlist=["get_backend"]).get_backend("sdpa"))
    assert fields["flops"] == attention_flops(shape) and fields["bytes"] == attention_bytes(shape)
    if form == "absorbed":
        assert fields["kv_cache_bytes"] == 100 * (256 + 32) * 4  # one layer's latent, all heads
    call = kind.timed_call(case, None)
    out = call()
    assert out.shape == shape.out_shape and call.guard.verdict() is None
    call.guard.keep(out[..., :-1])  # a call that hands back the wrong width is caught
    assert "returned shape" in call.guard.verdict()


def test_mla_kind_is_forward_only():
    case = Case("naive", mla(), "prefill", "fwd+bwd", "cpu")
    with pytest.raises(Unsupported, match="forward only"):
        kind_of(case.shape).setup(case)


# ------------------------------------------------------------------------------------------ axes and ids

def test_variant_axis_keeps_the_kv_heads_ids_and_adds_mla():
    base = dict(backends=("naive", "sdpa"), seqs=(64,), phases=("prefill", "decode"), decode_kv=(256,))
    plain = [c.id for c in cases(Sweep(**base), "cpu")]
    named = [c.id for c in cases(Sweep(variants=("mha", "gqa", "mqa"), **base), "cpu")]
    assert named == plain  # --variant mha,gqa,mqa is --kv-heads 8,2,1 at Hq 8
    four = cases(Sweep(variants=("mha", "gqa", "mqa", "mla"), passes=("fwd", "fwd+bwd"), **base), "cpu")
    assert {c.shape.variant for c in four} == {"mha", "gqa", "mqa", "mla"}
    ids = [c.id for c in four if c.shape.variant == "mla"]
    assert "naive/mla/b1-hq8-hkv8-q64-kv64-d96-v_head_dim=64-kv_lora_rank=256-rope_dim=32-mla_form=expanded/fp32/" \
           "causal/prefill/fwd/cpu" in ids
    assert "sdpa/mla/b1-hq8-hkv1-q1-kv256-d96-v_head_dim=64-kv_lora_rank=256-rope_dim=32-mla_form=absorbed/fp32/" \
           "causal/decode/fwd/cpu" in ids
    assert all("/fwd+bwd/" not in i for i in ids)  # MLA is timed forward only
    wide = cases(Sweep(variants=("mla",), kv_lora_ranks=(512,), rope_dims=(64,), head_dims=(128,), **base), "cpu")
    assert {(c.shape.head_dim, *dataclasses.astuple(c.shape.mla)[1:]) for c in wide} == {
        (192, 128, 512, 64)}


def test_variant_axis_errors():
    with pytest.raises(UsageError, match="--variant gqa: no --kv-heads value groups --heads 8"):
        cases(Sweep(variants=("gqa",), kv_heads=(8, 1)), "cpu")
    with pytest.raises(UsageError, match="unknown variant 'mlx'"):
        from bench.kinds.axes import one_of
        from bench.problem.shapes import VARIANTS
        one_of("variant", VARIANTS)("mlx")


def test_cli_variant_axis_lists_all_four(capsys):
    from bench.cli import main

    assert main(["run", "--backend", "naive,sdpa,flex", "--variant", "mha,gqa,mqa,mla", "--kv-lora-rank", "128",
                 "--rope-dim", "16", "--seq", "128", "--dtype", "fp32", "--mask", "causal", "--list"]) == 0
    ids = capsys.readouterr().out.split()
    assert {i.split("/")[1] for i in ids} == {"mha", "gqa", "mqa", "mla"}
    assert "flex/mla/b1-hq8-hkv8-q128-kv128-d80-v_head_dim=64-kv_lora_rank=128-rope_dim=16-mla_form=expanded/fp32/" \
           "causal/prefill/fwd/cpu" in ids


def test_decode_profile_adds_mla_after_the_others():
    sweep = profile("decode", "cpu")
    all_ids = [c.id for c in cases(sweep, "cpu")]
    first = [c.id for c in cases(dataclasses.replace(sweep, also=()), "cpu")]
    assert all_ids[:len(first)] == first  # the MHA/GQA/MQA ids as they were, in their order
    added = all_ids[len(first):]
    assert added and all("/mla/" in i and "mla_form=absorbed" in i and "-hkv1-" in i for i in added)
    assert {i.split("-kv")[1].split("-")[0] for i in added} == {"1024", "4096", "16384"}


def test_deepseek_config_sweeps_mla_cases():
    sweep = Sweep(backends=("sdpa",), models=("deepseek-v3",), seqs=(128,), phases=("prefill", "decode"),
                  decode_kv=(4096,), dtypes=("bf16",))
    ids = [c.id for c in cases(sweep, "cpu")]
    assert ids == [
        "sdpa/mla/b1-hq128-hkv128-q128-kv128-d192-model=deepseek-v3-v_head_dim=128-kv_lora_rank=512-rope_dim=64-"
        "mla_form=expanded/bf16/causal/prefill/fwd/cpu",
        "sdpa/mla/b1-hq128-hkv1-q1-kv4096-d192-model=deepseek-v3-v_head_dim=128-kv_lora_rank=512-rope_dim=64-"
        "mla_form=absorbed/bf16/causal/decode/fwd/cpu"]
    absorbed = cases(sweep, "cpu")[1].shape
    assert (absorbed.qk_dim, absorbed.value_dim) == (576, 512)  # the model's latent: 512 + 64, values 512


# ------------------------------------------------------------------------------------ conformance, trait

def test_conformance_has_forward_mla_groups():
    mla_groups = [g for g in groups("naive", ("fp32",)) if g.variant == "mla"]
    assert {(g.pass_, g.mask) for g in mla_groups} == {("fwd", "none"), ("fwd", "causal"), ("fwd", "window")}
    forms = {name: shape_fields(s)["mla_form"] for name, s in mla_groups[1].shapes()}
    assert forms == {"square": "expanded", "sq<skv": "expanded", "decode": "absorbed"}
    row = run_group("naive", mla_groups[1], "cpu")
    assert row.status == "pass", row.detail
    flash = run_group("sdpa-flash", mla_groups[1], "cpu")
    assert flash.status == "unsupported" and "same last dimension" in flash.detail
    assert "Triggered internally" not in flash.detail and "because:;" not in flash.detail  # torch's noise dropped


def test_outside_backend_declares_mla(tmp_path, monkeypatch):
    (tmp_path / "mla_outside.py").write_text(textwrap.dedent("""
        import bench
        import torch.nn.functional as F

        @bench.backend(variants=("mla",))
        def takes(q, k, v, *, causal, window):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=k.shape[1] != q.shape[1])

        @bench.backend()
        def plain(q, k, v, *, causal, window):
            return F.scaled_dot_product_attention(q, k, v)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    shape = mla("absorbed", mask="none")
    q, k, v = call_tensors(shape, make_mla_inputs(shape))
    assert attention(q, k, v, backend="mla_outside:takes").shape == shape.out_shape
    with pytest.raises(Unsupported, match="it does not take mla"):
        attention(q, k, v, backend="mla_outside:plain")
    sys.modules.pop("mla_outside", None)


# ------------------------------------------------------------------------------------------------- the claim

def _decode_row(backend: str, variant: str, seconds: float, kv: int = 4096, read: float = 10.0,
                gemm: float = 60.0) -> dict:
    mla_row = variant == "mla"
    return {"status": "ok", "median_s": seconds, "phase": "decode", "variant": variant, "backend": backend,
            "dtype": "fp32", "batch": 1, "n_heads": 8, "seq_q": 1, "seq_kv": kv, "mask": "causal", "pass": "fwd",
            "head_dim": 96 if mla_row else 64, "flops": 8e6 if mla_row else 2e6, "bytes": 1e6,
            "v_head_dim": 64 if mla_row else None, "pct_read_ceiling": read,
            "pct_gemm_ceiling": gemm, "noisy": False, "sdpa_kernel": "math" if backend == "sdpa" else None}


def test_mla_decode_claim_judges_against_gqa_and_says_the_bound():
    import pandas as pd

    from bench.analysis.verdict import FAILS, HOLDS, NOT_MEASURED
    from bench.claims.mla import mla_decode_step

    rows = [_decode_row(*args) for args in [("sdpa", "gqa", 2e-3), ("sdpa", "mqa", 1e-3), ("sdpa", "mla", 4e-3),
                                            ("flex", "gqa", 3e-3), ("flex", "mqa", 2e-3), ("flex", "mla", 6e-3),
                                            ("sdpa", "mla", 1e-3, 1024)]]  # a shorter MLA context: not judged
    slow = mla_decode_step(pd.DataFrame(rows))
    assert slow.verdict == FAILS and "sdpa GQA 0.50×, MQA 0.25×" in slow.numbers and "KV 4096" in slow.numbers
    assert "compute-bound here" in slow.numbers and "sdpa ran math" in slow.numbers
    assert "4.00× sdpa · fp32 · MQA's at worst" in slow.why
    assert "8 FLOP per byte against this machine's ridge at 1.33: right of the ridge" in slow.numbers
    assert slow.judged_on == "KV 4096 · Hq 8 · fp32 · flex, sdpa"  # the longest context, where it is judged
    fast = [dict(r, median_s=r["median_s"] / 10) if r["variant"] == "mla" else r for r in rows]
    fast = [dict(r, pct_read_ceiling=80.0, pct_gemm_ceiling=20.0) for r in fast]
    judged = mla_decode_step(pd.DataFrame(fast))
    assert judged.verdict == HOLDS and "memory-bound here" in judged.numbers and "left of the ridge" in judged.numbers
    assert mla_decode_step(pd.DataFrame([r for r in rows if r["variant"] != "mla"])).verdict == NOT_MEASURED


def test_cli_check_runs_the_mla_groups_alone(capsys):
    import json

    from bench.cli import main

    assert main(["check", "naive", "--variant", "mla", "--dtype", "fp32", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["group"].split()[2], r["status"]) for r in rows] == [("mla", "pass")] * 3
    assert main(["check", "naive", "--variant", "mlx"]) == 2
    assert "--variant 'mlx': one of mha, gqa, mqa, mla" in capsys.readouterr().err
