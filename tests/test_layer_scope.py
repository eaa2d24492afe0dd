"""scope="layer": the whole layer (W_Q, W_K, W_V, attention, W_O) checked, timed and counted; its share analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import bench.kinds.mha_layer
import bench.reference
from bench.analysis.conditions import SHARE
from bench.analysis.layer_share import attention_share
from bench.analysis.load import read_results
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, Verdict
from bench.backends import BACKENDS, Backend
from bench.backends.naive import naive_attention
from bench.claims.layer import COMMAND, attention_dominates
from bench.counts.metrics import (
    attention_bytes,
    attention_flops,
    layer_bytes,
    layer_d_model,
    layer_flops,
    layer_weight_bytes,
    projection_flops,
)
from bench.engine import runner
from bench.engine.runner import EXACT_CHECK_ELEMENTS, Runner, check_shape
from bench.engine.sweeps import Case
from bench.kinds import kind_of
from bench.kinds.mha_layer import MultiHeadAttention, make_layer
from bench.problem.columns import shape_from_fields
from bench.problem.masks import CAUSAL, NO_MASK
from bench.problem.scores import NO_SCORE
from bench.problem.shapes import AttentionShape
from bench.reference import (
    LAYER_TOLERANCES,
    check_layer_gradients,
    compare_to_reference,
    make_layer_input,
    merge_heads,
    reference_layer,
)
from bench.results.meta import Calibration
from bench.results.record import RECORD_FIELDS, new_record
from tests.results_factory import make_record, make_run
from tests.test_correctness import ScaledBackward
from tests.test_layers import copy_weights

CALIBRATION = Calibration.from_dict({"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10})


def layer_shape(dtype="fp32", mask="causal", seq=32, window=None, batch=1, heads=4, kv_heads=2,
                head_dim=16) -> AttentionShape:
    """d_model 64: 4 heads of 16, 2 KV heads."""
    return shape_from_fields(dict(batch=batch, seq_q=seq, seq_kv=seq, n_heads=heads, n_kv_heads=kv_heads,
                                  head_dim=head_dim, dtype=dtype, mask=mask, window=window, scope="layer"))


def run(backend="naive", shape=None, pass_="fwd"):
    return Runner(calibration=CALIBRATION, case_budget_s=0.05).run(Case(backend, shape or layer_shape(), "prefill",
                                                                    pass_, "cpu"))


def register(monkeypatch, name, fn):
    """A test backend; returns the list of the query shapes it was called with."""
    calls = []

    def wrapped(q, k, v, *, mask, score):
        calls.append(tuple(q.shape))
        return fn(q, k, v, mask=mask, score=score)

    monkeypatch.setitem(BACKENDS, name, Backend(name, wrapped, "test backend", "materialising", "#000000", "o"))
    return calls


def assert_untimed(out):
    r = out.record
    assert out.samples == [] and r.median_s is None and r.rounds == 0 and r.peak_mem_bytes is None


# --- FLOPs and bytes ------------------------------------------------------------------------------------------

def test_layer_flops_by_hand():
    s = shape_from_fields(dict(batch=2, seq_q=8, seq_kv=8, n_heads=4, n_kv_heads=2, head_dim=16, dtype="fp32",
                               mask="causal", scope="layer"))  # d_model 64
    assert layer_d_model(s) == 64
    attention = 4 * 2 * 4 * 16 * 36  # B Hq D x visible pairs 1 + 2 + ... + 8
    projections = 2 * 2 * 8 * 64 * (2 * 4 * 16 + 2 * 2 * 16)  # 2 B S d_model (2 Hq D + 2 Hkv D)
    assert attention_flops(s) == attention == 18_432
    assert projection_flops(s) == projections == 393_216
    assert layer_flops(s) == attention + projections
    assert layer_flops(s, "fwd+bwd") * 2 == (attention + projections) * 7  # 3.5x the whole layer
    assert projection_flops(s, d_model=128) == 2 * projections  # an explicit d_model
    weights = (2 * 64 * 4 * 16 + 2 * 64 * 2 * 16) * 4  # W_Q, W_O at Hq heads, W_K, W_V at Hkv heads, fp32
    assert layer_weight_bytes(s) == weights == 49_152
    assert layer_bytes(s) == attention_bytes(s) + weights
    with pytest.raises(ValueError, match="unknown pass"):
        layer_flops(s, "bwd")


def test_llama_3_8b_layer_is_mostly_projections_at_short_s():
    s = shape_from_fields(dict(batch=1, seq_q=512, seq_kv=512, n_heads=32, n_kv_heads=8, head_dim=128, dtype="bf16",
                               mask="causal", scope="layer"))
    # 2 * 512 * 4096 * (2 * 4096 + 2 * 1024): ~43 GFLOP of projections against ~4.3 GFLOP of causal attention
    assert projection_flops(s) == 2 * 512 * 4096 * 10240
    assert projection_flops(s) > 9 * attention_flops(s)
    assert layer_weight_bytes(s) == (2 * 4096 * 4096 + 2 * 4096 * 1024) * 2  # 80 MiB of bf16 weights


def test_new_record_counts_by_scope():
    layer = layer_shape()
    attention = AttentionShape(1, 32, 32, 4, 2, 16, "fp32", CAUSAL)
    for pass_ in ("fwd", "fwd+bwd"):
        r = new_record(Case("naive", layer, "prefill", pass_, "cpu"), "materialising")
        assert r.flops == layer_flops(layer, pass_) and r.bytes == layer_bytes(layer)
        assert r.model_mem_bytes is None and r.shape.scope == "layer"
        a = new_record(Case("naive", attention, "prefill", pass_, "cpu"), "materialising")
        assert a.flops == attention_flops(attention, pass_) and a.bytes == attention_bytes(attention)
        assert a.shape.scope == "attention"
    assert new_record(Case("naive", attention, "prefill", "fwd", "cpu"), "materialising").model_mem_bytes > 0


# --- the layer's reference -----------------------------------------------------------------------------------

def test_reference_layer_matches_torch_multihead_attention_with_biases():
    torch.manual_seed(0)
    d, h = 64, 4
    ref = nn.MultiheadAttention(d, h, batch_first=True).double()
    ours = MultiHeadAttention(d, h, backend="naive").double()
    copy_weights(ref, ours)
    x = torch.randn(2, 9, d, dtype=torch.float64)
    causal = torch.ones(9, 9, dtype=torch.bool).triu(1)
    expected, _ = ref(x, x, x, attn_mask=causal, need_weights=False)
    assert torch.allclose(reference_layer(ours, x, causal=True), expected, atol=1e-12)


def test_make_layer_is_seeded_and_in_the_case_dtype():
    s = layer_shape("bf16")
    a, b = make_layer(s, "naive"), make_layer(s, "sdpa")
    assert a.W_Q.weight.dtype == torch.bfloat16 and a.W_Q.bias is None
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.W_Q.weight, make_layer(s, "naive", seed=1).W_Q.weight)
    assert (a.W_Q.weight.shape, a.W_K.weight.shape, a.W_O.weight.shape) == ((64, 64), (32, 64), (64, 64))
    x = make_layer_input(s)
    assert x.shape == (1, 32, 64) and x.dtype == torch.bfloat16


def test_bf16_layer_of_a_real_geometry_is_within_its_tolerance():
    # Qwen2.5-0.5B's heads (14 x 64, 2 KV heads, d_model 896) at S 128: naive bf16 uses ~75% of attention's own
    # bounds here, well inside the layer's
    s = shape_from_fields(dict(batch=1, seq_q=128, seq_kv=128, n_heads=14, n_kv_heads=2, head_dim=64, dtype="bf16",
                               mask="none", scope="layer"))
    layer = make_layer(s, "naive")
    x = make_layer_input(s)
    with torch.no_grad():
        out = layer(x)
    check = compare_to_reference(out, reference_layer(layer, x), LAYER_TOLERANCES)
    assert check.ok, check.describe()
    assert check.atol == LAYER_TOLERANCES[torch.bfloat16][0]


def test_layer_gradients_are_checked_against_float64():
    s = layer_shape()
    assert check_layer_gradients(make_layer(s, "sdpa-flash"), s).max_abs_err < 1e-5


# --- the runner ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["naive", "sdpa-flash", "sdpa-math"])
def test_tiny_layer_case_is_ok_with_the_layers_flops(backend, monkeypatch):
    calls = []
    built = []

    def spy(shape, backend, device="cpu", seed=0):
        layer = make_layer(shape, backend, device, seed)
        layer.register_forward_hook(lambda *_: calls.append(1))
        built.append(layer)
        return layer

    monkeypatch.setattr(bench.kinds.mha_layer, "make_layer", spy)
    shape = layer_shape()
    out = run(backend, shape)
    r = out.record
    assert r.status == "ok", r.reason
    assert set(r.to_dict()) == set(RECORD_FIELDS)
    assert r.case_id == f"{backend}/gqa/b1-hq4-hkv2-q32-kv32-d16-scope=layer/fp32/causal/prefill/fwd/cpu"
    assert r.flops == layer_flops(shape) and r.bytes == layer_bytes(shape) and r.model_mem_bytes is None
    assert r.tflops == pytest.approx(layer_flops(shape) / r.median_s / 1e12)
    assert 0 <= r.max_abs_err < 1e-5 and r.peak_mem_bytes > 0
    # what was timed is the layer: one built, and called by the check, the warm-up, every timed call and the peak
    assert len(built) == 1
    assert len(calls) >= 1 + r.rounds * r.calls_per_round


def test_layer_fwd_bwd_is_ok_and_differentiates_the_weights(monkeypatch):
    seen = []
    real_grad = torch.autograd.grad

    def spy_grad(outputs, inputs, *args, **kwargs):
        seen.append(len(inputs))
        return real_grad(outputs, inputs, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", spy_grad)
    shape = layer_shape()
    r = run("sdpa-math", shape, "fwd+bwd").record
    assert r.status == "ok", r.reason
    assert r.flops * 2 == layer_flops(shape) * 7 and r.model_mem_bytes is None
    assert set(seen) == {5}  # x and the four weights, in the check and in every timed call


def test_bf16_layer_case_passes_its_tolerance():
    r = run("naive", layer_shape("bf16")).record
    assert r.status == "ok", r.reason
    assert 0 < r.max_abs_err < LAYER_TOLERANCES[torch.bfloat16][0]


def test_backend_ignoring_the_mask_is_incorrect_and_not_timed(monkeypatch):
    calls = register(monkeypatch, "maskless", lambda q, k, v, **kw: naive_attention(q, k, v, mask=NO_MASK,
                                                                                   score=NO_SCORE))
    out = run("maskless")
    assert out.record.status == "incorrect"
    assert "exceeds tolerance" in out.record.reason
    assert_untimed(out)
    assert len(calls) == 1  # the check's call only


def test_attention_one_percent_off_is_incorrect_in_fp32(monkeypatch):
    register(monkeypatch, "off", lambda q, k, v, **kw: naive_attention(q, k, v, **kw) * 1.01)
    out = run("off")
    assert out.record.status == "incorrect" and out.record.max_abs_err > 1e-3
    assert_untimed(out)


class TokenMixingLayer(MultiHeadAttention):
    """The tutorials' warning: heads split with a view and no transpose, so each 'head' reads other tokens."""

    def forward(self, x, memory=None, *, causal=False, window=None):
        from bench.backends import attention

        B, T, _ = x.shape
        q = self.W_Q(x).view(B, self.n_heads, T, self.head_dim)
        k = self.W_K(x).view(B, self.n_kv_heads, T, self.head_dim)
        v = self.W_V(x).view(B, self.n_kv_heads, T, self.head_dim)
        return self.W_O(merge_heads(attention(q, k, v, backend=self.backend, causal=causal, window=window)))


def test_broken_layer_is_incorrect_and_not_timed(monkeypatch):
    def broken(shape, backend, device="cpu", seed=0):
        good = make_layer(shape, backend, device, seed)
        bad = TokenMixingLayer(good.d_model, good.n_heads, good.n_kv_heads, head_dim=good.head_dim, bias=False,
                               backend=backend)
        bad.load_state_dict(good.state_dict())
        return bad

    monkeypatch.setattr(bench.kinds.mha_layer, "make_layer", broken)
    out = run("naive")
    assert out.record.status == "incorrect" and out.record.max_abs_err > 0.1
    assert_untimed(out)


def test_wrong_backward_is_incorrect_in_a_layer_case(monkeypatch):
    register(monkeypatch, "halfgrad", lambda q, k, v, **kw: ScaledBackward.apply(naive_attention(q, k, v, **kw), 0.5))
    assert run("halfgrad").record.status == "ok"  # the forward is right
    out = run("halfgrad", pass_="fwd+bwd")
    assert out.record.status == "incorrect" and out.record.reason.startswith("gradients")
    assert_untimed(out)


def test_unsupported_error_and_oom_in_a_layer_case(monkeypatch):
    out = run("sdpa-efficient")
    assert out.record.status == "unsupported" and "CUDA" in out.record.reason
    assert_untimed(out)

    def boom(q, k, v, **kw):
        raise RuntimeError("kernel exploded\ntraceback")

    register(monkeypatch, "boom", boom)
    out = run("boom")
    assert out.record.status == "error" and out.record.reason == "RuntimeError: kernel exploded"
    monkeypatch.setattr(runner, "available_cpu_bytes", lambda: 1000)
    out = run("naive")
    assert out.record.status == "oom" and out.record.reason.startswith("predicted")


def test_predicted_oom_counts_the_weights(monkeypatch):
    # a tiled backend's attention needs little; the layer's weights (Llama-3-8B: 160 MiB in fp32) do not fit
    s = shape_from_fields(dict(batch=1, seq_q=16, seq_kv=16, n_heads=32, n_kv_heads=8, head_dim=128, dtype="fp32",
                               mask="causal", scope="layer"))
    monkeypatch.setattr(runner, "available_cpu_bytes", lambda: 100 * 2**20)
    r = Runner(calibration=CALIBRATION)
    assert r._predicted_oom(Case("sdpa-flash", s, "prefill", "fwd", "cpu"))
    attention_alone = AttentionShape(1, 16, 16, 32, 8, 128, "fp32", CAUSAL)
    assert r._predicted_oom(Case("sdpa-flash", attention_alone, "prefill", "fwd", "cpu")) is None


def test_check_shape_keeps_scope_and_model():
    s = shape_from_fields(dict(batch=4, seq_q=4096, seq_kv=4096, n_heads=32, n_kv_heads=8, head_dim=128, dtype="bf16",
                               mask="causal", scope="layer", model="llama-3-8b"))
    c = check_shape(s)
    assert c.batch * c.n_heads * c.seq_q * c.seq_kv <= EXACT_CHECK_ELEMENTS
    assert (c.scope, c.model, c.seq_q, c.seq_kv, c.batch) == ("layer", "llama-3-8b", 256, 256, 2)


def test_layer_and_attention_references_are_not_confused(monkeypatch):
    # one cache for every kind: a layer and its attention-alone twin (same dims) must each get their own reference
    built = []
    real = bench.reference.reference_layer

    def counting(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(bench.reference, "reference_layer", counting)
    cache = runner.ReferenceCache()
    s = layer_shape()
    layer_kind, dense_kind = kind_of(s), kind_of(AttentionShape(1, 32, 32, 4, 2, 16, "fp32", CAUSAL))
    assert (layer_kind.name, dense_kind.name) == ("layer", "dense")
    for backend in ("naive", "sdpa-math"):
        case = Case(backend, s, "prefill", "fwd", "cpu")
        check, _ = layer_kind.check(case, layer_kind.setup(case), cache)
        assert check.ok
    assert len(built) == 1  # the next backend on this shape reuses it
    twin = Case("naive", AttentionShape(1, 32, 32, 4, 2, 16, "fp32", CAUSAL), "prefill", "fwd", "cpu")
    check, _ = dense_kind.check(twin, dense_kind.setup(twin), cache)
    assert check.ok and check.max_abs_err < 1e-5  # the layer's (1, 32, 64) reference was not handed out
    case = Case("naive", s, "prefill", "fwd", "cpu")
    assert layer_kind.check(case, layer_kind.setup(case), cache)[0].ok and len(built) == 2


# --- attention's share of the layer --------------------------------------------------------------------------

def scoped(backend, seq, median_s, scope, status="ok", model="llama-3-8b", **kw) -> dict:
    rec = make_record(backend, 32, 8, seq, status=status, median_s=median_s, head_dim=128, **kw)
    suffix = "".join(f"-{k}={v}" for k, v in (("scope", scope), ("model", model)) if v not in ("attention", None))
    parts = rec["case_id"].split("/")
    parts[2] += suffix
    rec.update(scope=scope, model=model, case_id="/".join(parts))
    return rec


def frame(tmp_path: Path, recs: list[dict]):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(make_run(recs)))
    return read_results(path)[0]


# attention alone and the layer around it: the projections cost ~S, attention ~S^2
TIMES = {  # seq -> backend -> (attention_s, layer_s)
    512: {"naive": (0.02, 0.10), "sdpa-flash": (0.01, 0.09)},
    2048: {"naive": (0.30, 0.60), "sdpa-flash": (0.12, 0.45)},
    8192: {"naive": (5.0, 6.4), "sdpa-flash": (1.8, 3.2)},
}


def share_records(times=TIMES, **kw) -> list[dict]:
    recs = []
    for seq, per_backend in times.items():
        for backend, (attention_s, layer_s) in per_backend.items():
            recs += [scoped(backend, seq, attention_s, "attention", **kw), scoped(backend, seq, layer_s, "layer", **kw)]
    return recs


def test_attention_share_pairs_each_layer_case_with_its_attention_twin(tmp_path):
    recs = share_records()
    recs.append(scoped("sdpa-math", 512, 0.05, "layer"))  # no attention twin: no share
    recs.append(scoped("sdpa-math", 2048, 0.5, "layer", status="oom"))
    recs.append(scoped("sdpa-math", 2048, 0.2, "attention"))
    shares = attention_share(frame(tmp_path, recs))
    assert [(r["backend"], r["seq"]) for r in shares] == [
        ("naive", 512), ("naive", 2048), ("naive", 8192), ("sdpa-flash", 512), ("sdpa-flash", 2048),
        ("sdpa-flash", 8192)]
    first = shares[0]
    assert first["share"] == pytest.approx(0.2) and (first["attention_s"], first["layer_s"]) == (0.02, 0.10)
    assert (first["model"], first["dtype"], first["n_heads"], first["n_kv_heads"], first["head_dim"]) == (
        "llama-3-8b", "fp32", 32, 8, 128)
    assert (first["mask"], first["batch"], first["pass"], first["noisy"]) == ("causal", 1, "fwd", False)


def test_attention_dominates_holds_at_long_s(tmp_path):
    c = attention_dominates(frame(tmp_path, share_records()))
    assert isinstance(c, Verdict)
    assert set(c.as_dict()) == {"key", "claim", "verdict", "numbers", "why", "notes", "detail", "judged_on", "noisy",
                                "conditions", "series", "answer"}
    assert c.judged_on == "S 512–8192 · fp32 · naive, sdpa-flash"
    assert c.verdict == HOLDS
    # medians over naive and sdpa-flash: 512 (20% + 11.1%) / 2, 2048 (50% + 26.7%) / 2, 8192 (78.1% + 56.3%) / 2
    assert "S=512 15.5%" in c.numbers and "S=2048 38.3%" in c.numbers and "S=8192 67.1%" in c.numbers
    assert "from S=8192" in c.numbers
    assert [d["seq"] for d in c.detail] == [512, 2048, 8192]
    assert c.detail[-1]["backends"] == {"naive": pytest.approx(5.0 / 6.4), "sdpa-flash": pytest.approx(1.8 / 3.2)}


def test_attention_dominates_fails_when_it_never_takes_half(tmp_path):
    # a share that stays flat over three lengths spanning 16x: longer lengths would not change it
    times = {512: {"sdpa-flash": (0.01, 0.09)}, 2048: {"sdpa-flash": (0.04, 0.36)}, 8192: {"sdpa-flash": (0.16, 1.4)}}
    c = attention_dominates(frame(tmp_path, share_records(times)))
    assert c.verdict == FAILS and "does not rise" in c.why
    assert "never takes half on this machine (up to S=8192)" in c.numbers


def test_attention_below_half_but_rising_is_inconclusive(tmp_path):
    times = {512: {"sdpa-flash": (0.01, 0.09)}, 2048: {"sdpa-flash": (0.12, 0.45)}}
    c = attention_dominates(frame(tmp_path, share_records(times)))
    assert c.verdict == INCONCLUSIVE and "still rising" in c.why and "reaches half near S≈" in c.why
    assert "never takes half on this machine (up to S=2048)" in c.numbers


def test_attention_dominates_from_s_needs_every_longer_s_too(tmp_path):
    times = {512: {"naive": (0.06, 0.1)}, 2048: {"naive": (0.3, 0.9)}, 8192: {"naive": (5.0, 6.0)}}
    c = attention_dominates(frame(tmp_path, share_records(times)))
    assert c.verdict == HOLDS and "from S=8192" in c.numbers  # S=512's 60% is not "from 512"


def test_attention_dominates_not_measured_without_layer_cases(tmp_path):
    recs = [scoped("naive", 512, 0.02, "attention", model=None), make_record("sdpa", seq=256)]
    c = attention_dominates(frame(tmp_path, recs))
    assert c.verdict == NOT_MEASURED and COMMAND in c.numbers and c.detail == ()
    assert attention_share(frame(tmp_path, recs)) == []
    failed = [scoped("naive", 512, 0.02, "attention"), scoped("naive", 512, 0.1, "layer", status="error")]
    c = attention_dominates(frame(tmp_path, failed))
    assert c.verdict == NOT_MEASURED and "none is ok" in c.numbers


def test_families_are_judged_apart_and_unnamed_geometries_labelled(tmp_path):
    recs = share_records(model=None) + share_records({512: {"naive": (0.01, 0.1)}}, model=None, dtype="bf16")
    c = attention_dominates(frame(tmp_path, recs))
    assert c.verdict == INCONCLUSIVE  # the bf16 family, at one length, cannot say
    assert "Hq=32 Hkv=8 D=128 · bf16" in c.numbers and "Hq=32 Hkv=8 D=128 · fp32" in c.numbers
    assert all(r["model"] is None for r in attention_share(frame(tmp_path, recs)))


def test_a_share_just_under_half_does_not_read_as_half(tmp_path):
    times = {512: {"naive": (0.1, 0.9)}, 2048: {"naive": (0.4999, 1.0)}}
    c = attention_dominates(frame(tmp_path, share_records(times)))
    assert "S=2048 49.9%" in c.numbers and "never takes half" in c.numbers  # the share itself is not rounded up
    assert c.verdict == HOLDS and "at its bound (within 5% of 50.0%)" in c.numbers  # the claim, within 5%, is met
    assert c.conditions[0].unit == SHARE and c.series[0].points[-1][1] == pytest.approx(0.4999)  # data, not text


def test_noisy_timings_are_counted(tmp_path):
    recs = share_records()
    recs[0]["noisy"] = True
    c = attention_dominates(frame(tmp_path, recs))
    assert "1 of 6 shares rest on a timing flagged noisy" in c.numbers


def test_share_analysis_returns_plain_python_data(tmp_path):
    df = frame(tmp_path, share_records())
    for row in [*attention_share(df), *attention_dominates(df).detail]:
        for value in row.values():
            assert value is None or type(value) in (int, float, str, bool, dict), (value, type(value))
    json.dumps(attention_dominates(df).as_dict())


def test_share_keys_hold_every_shape_field_but_the_scope(tmp_path):
    """A shape field left out of the keys would pool different cases: every field, a later one too, is in."""
    from bench.analysis.layer_share import SHARE_KEYS, VARIED
    from bench.results.record import SHAPE_KEYS

    assert set(SHARE_KEYS) | set(VARIED) == {"backend", *SHAPE_KEYS} and not set(SHARE_KEYS) & set(VARIED)
    # two score variants of one shape: each layer case pairs with its own attention twin only
    recs = [scoped("naive", 512, t, scope, score=score) for score, ts in (("none", (0.02, 0.1)), ("alibi", (0.05, 0.1)))
            for scope, t in zip(("attention", "layer"), ts, strict=True)]
    for rec in recs:
        rec["case_id"] += f"-{rec['score']}"
    shares = attention_share(frame(tmp_path, recs))
    assert sorted((r["score"], r["share"]) for r in shares) == [("alibi", pytest.approx(0.5)),
                                                                 ("none", pytest.approx(0.2))]


def test_a_new_shape_field_reaches_the_pairing_keys(monkeypatch):
    """The keys are derived from bench.results.record's shape fields, not listed by hand: a field added there is in
    them."""
    import importlib

    from bench.analysis import frames, layer_share, serving

    monkeypatch.setattr(frames, "SHAPE_KEYS", [*frames.SHAPE_KEYS, "new_axis"])
    try:
        assert "new_axis" in importlib.reload(layer_share).SHARE_KEYS
        assert "new_axis" in importlib.reload(serving).PAIR_KEYS
    finally:
        monkeypatch.undo()
        importlib.reload(layer_share)
        importlib.reload(serving)


def test_the_rising_threshold_is_the_one_in_bench_claims(monkeypatch):
    """RISING lives in the layer claim's module (bench.claims.layer) beside its judge: changing it there changes the
    judge."""
    from bench.claims import layer

    rising = [(256, 1 / 9), (1024, 0.2)]  # odds 1/8 -> 1/4 over 4x: k = 0.5, a share still rising
    assert layer.projected_crossing(rising) > 0
    monkeypatch.setattr(layer, "RISING", 0.6)  # k = 0.5 no longer counts as rising: too few lengths to decide
    assert layer.projected_crossing(rising) == 0
