"""KV cache: the formula, size parsing, memory fitting, the `kv` command, and a real cache measured to the byte."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bench.cli import main
from bench.errors import InputError
from bench.models.config import ModelConfig
from bench.models.kvcache import (
    KVCache,
    SizeError,
    allocate_kv_cache,
    estimate,
    format_bytes,
    max_batch,
    max_context,
    measure_kv_cache_bytes,
    parse_count,
    parse_memory,
)
from bench.models.presets import PRESETS, preset

KiB, MiB, GiB = 2**10, 2**20, 2**30
DECODERS = [name for name, p in PRESETS.items() if not p.encoder_only]


def model(name: str) -> ModelConfig:
    return preset(name)


# ---------------------------------------------------------------------------------------------- formula

# KV bytes per token at 2 bytes (bf16), computed from each model's published config (layers, KV heads, head dim):
# llama-2-7b 2x32x32x128x2, llama-3-8b 2x32x8x128x2, llama-2-70b 2x80x8x128x2, qwen2.5-0.5b 2x24x2x64x2,
# gpt-3-175b 2x96x96x128x2 = 4.5 MiB. Also in the README's "KV cache calculator" section.
@pytest.mark.parametrize("name, per_token", [
    ("llama-2-7b", 512 * KiB), ("llama-3-8b", 128 * KiB), ("llama-2-70b", 320 * KiB),
    ("qwen2.5-0.5b", 12 * KiB), ("gpt-3-175b", 4608 * KiB),  # bf16
])
def test_bytes_per_token_matches_published_configs(name: str, per_token: int) -> None:
    assert estimate(model(name), 1, 1, "bf16").bytes_per_token == per_token


# Worked by hand: 2 x layers x Hkv x D x tokens x batch x 2 bytes (bf16, batch 1).
HAND_CHECKS = [
    ("llama-3-8b", 8 * KiB, 2 * 32 * 8 * 128 * 2, 1_073_741_824),  # 128 KiB x 8192 = 1 GiB
    ("llama-3-8b", 128 * KiB, 2 * 32 * 8 * 128 * 2, 17_179_869_184),  # 128 KiB x 131072 = 16 GiB
    ("llama-2-70b", 32 * KiB, 2 * 80 * 8 * 128 * 2, 10_737_418_240),  # 320 KiB x 32768 = 10 GiB
    ("qwen2.5-0.5b", 32 * KiB, 2 * 24 * 2 * 64 * 2, 402_653_184),  # 12 KiB x 32768 = 384 MiB
    ("mistral-7b-v0.1", 32 * KiB, 2 * 32 * 8 * 128 * 2, 536_870_912),  # 128 KiB x 4096 (window) = 512 MiB
    ("gpt-3-175b", 2 * KiB, 2 * 96 * 96 * 128 * 2, 9_663_676_416),  # 4.5 MiB x 2048 = 9 GiB
]


@pytest.mark.parametrize("name, context, per_token, total", HAND_CHECKS)
def test_hand_checked_totals(name: str, context: int, per_token: int, total: int) -> None:
    est = estimate(model(name), context, 1, "bf16")
    assert (est.bytes_per_token, est.total_bytes) == (per_token, total)


def test_sliding_window_caps_tokens() -> None:
    mistral = model("mistral-7b-v0.1")
    assert estimate(mistral, 1000).tokens == 1000  # under the window: every token cached
    assert estimate(mistral, 4096).total_bytes == estimate(mistral, 1 * 2**20).total_bytes  # beyond: capped
    assert estimate(mistral, 32 * KiB).tokens == 4096
    # the same geometry without the window grows with the context
    assert estimate(model("llama-3-8b"), 32 * KiB).total_bytes == 8 * estimate(mistral, 32 * KiB).total_bytes


def test_encoder_only_has_no_cache() -> None:
    est = estimate(model("bert-base"), 512, 8, "fp32")
    assert (est.bytes_per_token, est.total_bytes, est.tokens) == (0, 0, 0)
    assert model("bert-base").variants() and allocate_kv_cache(model("bert-base"), 512) == []


@pytest.mark.parametrize("dtype, factor", [("fp32", 2), ("bf16", 1), ("fp16", 1), ("fp8", 0.5)])
def test_dtype_sizes(dtype: str, factor: float) -> None:
    llama = model("llama-3-8b")
    assert estimate(llama, 8 * KiB, 1, dtype).total_bytes == factor * GiB


def test_batch_and_variants_scale_linearly() -> None:
    llama = model("llama-3-8b")
    assert estimate(llama, 8192, 4).total_bytes == 4 * estimate(llama, 8192, 1).total_bytes
    assert llama.variants() == ["mha", "gqa", "mqa"]
    per = {v: estimate(llama.as_variant(v), 8192).total_bytes for v in llama.variants()}
    assert per == {"mha": 4 * GiB, "gqa": 1 * GiB, "mqa": 128 * MiB}  # GQA/MQA shrink it by Hq/Hkv
    assert model("gpt-3-175b").variants() == ["mha", "mqa"]  # an MHA model has no GQA grouping of its own
    with pytest.raises(InputError, match="no GQA"):
        model("gpt-3-175b").as_variant("gqa")


def test_custom_model_validation() -> None:
    assert ModelConfig.from_geometry("custom", 32, 8, 128).variants() == []  # no Hq: nothing to compare against
    good = ModelConfig.from_geometry("custom", 32, 8, 128, 32)
    bad_values = [dict(layers=0), dict(n_kv_heads=-1), dict(n_heads=12), dict(n_heads=4),  # 8 KV heads vs Hq
                  dict(layers=31), dict(window=4096)]  # 32 layer kinds for 31 layers; a window with no sliding layer
    for bad in bad_values:
        with pytest.raises(InputError):
            replace(good, **bad)


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (512, "512 B"), (KiB, "1 KiB"), (128 * KiB, "128 KiB"), (4608 * KiB, "4.5 MiB"),
    (GiB, "1 GiB"), (10 * GiB, "10 GiB"), (1536 * GiB, "1.5 TiB"), (2621 * MiB, "2.56 GiB"),
])
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


# ---------------------------------------------------------------------------------------------- parsing

@pytest.mark.parametrize("text, value", [
    ("8192", 8192), ("8k", 8192), ("8K", 8192), ("128k", 131072), (" 32k ", 32768), ("1m", 2**20),
    ("1.5k", 1536), (4096, 4096),
])
def test_parse_count(text: str, value: int) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["", "k", "8x", "8kb", "eight", "0", "-8k", "1.3k", "8 k k", "1e3", True])
def test_parse_count_rejects(text: object) -> None:
    with pytest.raises(SizeError):
        parse_count(text)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, value", [
    ("80GiB", 80 * GiB), ("80GB", 80 * 10**9), ("80 gib", 80 * GiB), ("512MiB", 512 * MiB), ("1.5TiB", 1536 * GiB),
    ("1000", 1000), ("1000B", 1000), ("2KB", 2000), ("1KiB", 1024), (".5KiB", 512), (4096, 4096),
])
def test_parse_memory(text: str, value: int) -> None:
    assert parse_memory(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "80G", "80 gigs", "80PiB", "-1GiB", "0", "0.1B", "eighty GiB", "8e9"])
def test_parse_memory_rejects(text: str) -> None:
    with pytest.raises(SizeError):
        parse_memory(text)


# ---------------------------------------------------------------------------------------------- fitting

MEMORIES = [1, 12 * KiB - 1, 12 * KiB, 10**9, 24 * GiB, 80 * GiB, 80 * 10**9 + 12345]


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("memory", MEMORIES)
@pytest.mark.parametrize("batch", [1, 3, 64])
def test_max_context_is_the_boundary(name: str, memory: int, batch: int) -> None:
    m = model(name)
    ctx = max_context(m, batch, "bf16", memory)
    if ctx is None:  # only a sliding window whose full cache fits may say "any"
        assert m.window is not None and estimate(m, m.window, batch, "bf16").cache_bytes <= memory
        assert estimate(m, 10 * m.window, batch, "bf16").cache_bytes <= memory
        return
    if ctx > 0:  # a hybrid's linear state counts: cache_bytes is its KV cache and state together
        assert estimate(m, ctx, batch, "bf16").cache_bytes <= memory
    assert estimate(m, ctx + 1, batch, "bf16").cache_bytes > memory


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("memory", MEMORIES)
@pytest.mark.parametrize("context", [1, 2048, 32 * KiB])
def test_max_batch_is_the_boundary(name: str, memory: int, context: int) -> None:
    m = model(name)
    b = max_batch(m, context, "fp16", memory)
    assert b is not None
    if b > 0:
        assert estimate(m, context, b, "fp16").cache_bytes <= memory
    assert estimate(m, context, b + 1, "fp16").cache_bytes > memory


def test_fitting_known_values() -> None:
    llama, mistral, bert = model("llama-3-8b"), model("mistral-7b-v0.1"), model("bert-base")
    assert max_context(llama, 1, "bf16", 80 * GiB) == 655_360  # 80 GiB / 128 KiB
    assert max_batch(llama, 8192, "bf16", 80 * GiB) == 80  # 1 GiB per sequence
    assert max_context(mistral, 1, "bf16", 80 * GiB) is None  # 512 MiB window fits: any context
    assert max_context(mistral, 1, "bf16", 256 * MiB) == 2048  # the window does not fit: a real limit
    assert max_batch(mistral, 1 * 2**20, "bf16", 80 * GiB) == 160  # a 1M context still costs only the window
    assert max_context(bert, 1, "bf16", 1) is None and max_batch(bert, 512, "bf16", 1) is None


# -------------------------------------------------------------------------------------------------- CLI

def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["kv", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--model", "llama-3-8b", "--context", "8k")
    assert code == 0 and err == ""
    assert "KV cache per token: 128 KiB (131,072 bytes)" in out
    assert "at context 8,192 x batch 1: 1 GiB (1,073,741,824 bytes)" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] in (["MHA"], ["GQA"], ["MQA"])}
    assert "4 GiB" in rows["MHA"] and "this model" in rows["GQA"] and "128 MiB" in rows["MQA"]


def test_cli_window_and_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--model", "mistral-7b-v0.1", "--context", "32k", "--memory", "80GiB")
    assert code == 0
    assert "512 MiB (536,870,912 bytes); the sliding window caps the cache at 4,096 tokens" in out
    assert "largest context at batch 1: any" in out and "largest batch at context 32,768: 160" in out


def test_cli_encoder_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--model", "bert-base")
    assert code == 0 and "no KV cache" in out
    code, out, _ = run_cli(capsys, "--model", "bert-base", "--json")
    data = json.loads(out)
    assert code == 0 and data["has_kv_cache"] is False and data["total_bytes"] == data["bytes_per_token"] == 0
    assert "no KV cache" in data["note"]


def test_cli_json_is_one_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--model", "llama-2-70b", "--context", "32k", "--batch", "2",
                             "--dtype", "fp8", "--memory", "80GB", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)  # raises if stdout holds anything besides one JSON value
    assert isinstance(data, dict) and out.count("\n") == 1
    per_token = 2 * 80 * 8 * 128 * 1
    assert data["bytes_per_token"] == per_token and data["total_bytes"] == per_token * 32768 * 2
    assert (data["context"], data["batch"], data["dtype"]) == (32768, 2, "fp8")
    assert [(v["variant"], v["n_kv_heads"], v["this_model"]) for v in data["variants"]] == [
        ("mha", 64, False), ("gqa", 8, True), ("mqa", 1, False)]
    assert data["max_context"] == 80 * 10**9 // (per_token * 2)
    assert data["max_batch"] == 80 * 10**9 // (per_token * 32768)
    assert all(isinstance(data[k], int) for k in ("bytes_per_token", "total_bytes", "max_context", "max_batch"))


def test_cli_custom_config(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--json")
    data = json.loads(out)
    assert code == 0 and data["bytes_per_token"] == 128 * KiB and [v["variant"] for v in data["variants"]] == [None]
    code, out, _ = run_cli(capsys, "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--heads", "32")
    assert code == 0 and "GQA" in out and "MQA" in out


@pytest.mark.parametrize("argv, message", [
    (["--model", "llama-9"], "known: transformer-base, bert-base"),
    (["--model", "gpt2", "--layers", "4"], "cannot be combined"),
    (["--layers", "4", "--kv-heads", "2"], "missing --head-dim"),
    ([], "give --model"),
    (["--model", "gpt2", "--context", "0"], "must be positive"),
    (["--model", "gpt2", "--batch", "-2"], "must be positive"),
    (["--model", "gpt2", "--context", "eight"], "not a count"),
    (["--model", "gpt2", "--memory", "80G"], "ambiguous"),
    (["--model", "gpt2", "--memory", "lots"], "does not parse"),
    (["--model", "gpt2", "--dtype", "fp64"], "fp8"),
    (["--layers", "4", "--kv-heads", "8", "--head-dim", "64", "--heads", "4"], "exceeds"),
    (["--layers", "0", "--kv-heads", "8", "--head-dim", "64"], "must be positive"),
])
def test_cli_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


# -------------------------------------------------------------------------------------- the real cache

def test_kvcache_update_writes_by_index() -> None:
    cache = KVCache(2, 4, 16, 8, torch.float32)
    k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 3, 8)  # (B, Hkv, S, D)
    k_all, v_all = cache.update(torch.tensor([5, 6, 7]), k, v)
    assert k_all.shape == (2, 4, 16, 8) and torch.equal(k_all[:, :, 5:8], k) and torch.equal(v_all[:, :, 5:8], v)
    assert k_all[:, :, :5].abs().sum() == 0 and k_all[:, :, 8:].abs().sum() == 0


def test_rolling_cache_keeps_the_last_window() -> None:
    cache = KVCache(1, 1, 4, 2, torch.float32, rolling=True)
    pos = torch.arange(10)
    k = pos.float().view(1, 1, 10, 1).expand(1, 1, 10, 2)  # key p holds the value p
    cache.update(pos[:7], k[:, :, :7], k[:, :, :7])
    cache.update(pos[7:], k[:, :, 7:], k[:, :, 7:])
    assert sorted(cache.k_cache[0, 0, :, 0].tolist()) == [6, 7, 8, 9]  # exactly the last 4 positions
    fresh = KVCache(1, 1, 4, 2, torch.float32, rolling=True)
    fresh.update(pos, k, k)  # one call longer than the window: same result
    assert torch.equal(fresh.k_cache, cache.k_cache)


def _measure_cases() -> list[tuple[str, str, int, str]]:
    cases = []
    for name in DECODERS:
        for variant in model(name).variants():
            for dtype in ("fp32", "bf16", "fp16", "fp8"):
                cases += [(name, variant, 8, dtype), (name, variant, 1000, dtype)]
    cases += [("mistral-7b-v0.1", v, 5000, dt) for v in ("mha", "gqa", "mqa") for dt in ("bf16", "fp8")]  # capped
    return cases


def _one_layer(name: str, variant: str) -> ModelConfig:
    # One layer keeps every case small; the formula is linear in layers (full depth is checked below).
    return model(name).as_variant(variant).first_layers(1)


@pytest.mark.parametrize("name, variant, context, dtype", _measure_cases())
def test_allocated_bytes_equal_the_formula(name: str, variant: str, context: int, dtype: str) -> None:
    m, batch = _one_layer(name, variant), 2 if context == 8 else 1
    measured = measure_kv_cache_bytes(m, context, batch, dtype, "cpu")
    assert measured == estimate(m, context, batch, dtype).cache_bytes > 0  # a linear layer: its state


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name, variant, context, dtype", _measure_cases())
def test_cuda_allocated_bytes_equal_the_formula(name: str, variant: str, context: int, dtype: str) -> None:
    m, batch = _one_layer(name, variant), 2 if context == 8 else 1
    expected = estimate(m, context, batch, dtype).cache_bytes
    assert measure_kv_cache_bytes(m, context, batch, dtype, "cuda", method="requested") == expected
    allocated = measure_kv_cache_bytes(m, context, batch, dtype, "cuda", method="allocator")
    buffer = expected // (2 * m.layers)  # every buffer here is a multiple of 512 bytes (T * D * B >= 512)
    if buffer < MiB and not m.linear:  # small-pool blocks are split to the 512-byte rounding: exact
        assert allocated == expected
    else:  # a large block may keep up to 1 MiB of unsplit slack
        assert expected <= allocated <= expected + 2 * m.layers * MiB


@pytest.mark.parametrize("name, context", [("gpt-3-175b", 8), ("qwen2.5-0.5b", 1024), ("gpt2", 777),
                                           ("transformer-base", 100), ("mistral-7b-v0.1", 4097)])
def test_full_depth_cache_on_cpu(name: str, context: int) -> None:
    # Every layer, at odd contexts too: CPU storages are exact (CUDA's allocator would round to 512 B).
    for variant in model(name).variants():
        m = model(name).as_variant(variant)
        if name == "mistral-7b-v0.1":
            m = m.first_layers(2)  # the 4096-token window is big; two layers show the per-layer cap
        assert measure_kv_cache_bytes(m, context, 1, "bf16") == estimate(m, context, 1, "bf16").total_bytes


@pytest.mark.parametrize("name, variant, context, dtype", [
    ("qwen2.5-0.5b", "gqa", 333, "bf16"), ("llama-3-8b", "mqa", 64, "fp8"), ("mistral-7b-v0.1", "gqa", 5000, "fp16"),
])
def test_profiler_sees_the_same_bytes(name: str, variant: str, context: int, dtype: str) -> None:
    m = model(name).as_variant(variant).first_layers(2)
    measured = measure_kv_cache_bytes(m, context, 1, dtype, "cpu", method="profiler")
    assert measured == estimate(m, context, 1, dtype).total_bytes


def test_measure_encoder_only_and_bad_method() -> None:
    assert measure_kv_cache_bytes(model("bert-base"), 512) == 0
    with pytest.raises(ValueError, match="allocator"):
        measure_kv_cache_bytes(model("gpt2"), 8, method="allocator", device="cpu")


# ------------------------------------------------------------------------------- transformers' own cache

def test_transformers_twins_cache_hkv_heads_per_token() -> None:
    """A one-layer transformers twin's cache, per token: llama-3-8b's GQA keeps 8 K/V heads of 128 at bf16 (the
    formula's 128 KiB over its 32 layers), MHA 32, MQA 1; MLA keeps its latent and rope key (512 + 64)."""
    pytest.importorskip("transformers")
    from bench.models.kvcache import measured_twins

    llama = {r["variant"]: r for r in measured_twins(model("llama-3-8b"))}
    assert {v: r["bytes_per_token"] for v, r in llama.items()} == {"mha": 2 * 32 * 128 * 2, "gqa": 2 * 8 * 128 * 2,
                                                                    "mqa": 2 * 1 * 128 * 2}
    assert 32 * llama["gqa"]["bytes_per_token"] == 128 * KiB == estimate(model("llama-3-8b"), 1, 1).bytes_per_token
    assert llama["gqa"]["source"] == "transformers" and llama["gqa"]["method"] == "LlamaForCausalLM"
    mistral = {r["variant"]: r for r in measured_twins(model("mistral-7b-v0.1"))}
    assert mistral["gqa"]["method"] == "MistralForCausalLM" and mistral["gqa"]["bytes_per_token"] == 4096
    mla = {r["variant"]: r for r in measured_twins(model("deepseek-v3"))}["mla"]
    assert mla["method"] == "DeepseekV3ForCausalLM" and mla["bytes_per_token"] == (512 + 64) * 2


def test_without_transformers_no_cache_is_measured_and_none_is_sized_from_the_formula(monkeypatch) -> None:
    """measured_presets once allocated caches of its own from n_kv_heads: the formula's bytes, which could not fail.
    Without transformers it measures nothing rather than that."""
    from bench.models import hf_cache
    from bench.models.kvcache import measured_presets

    monkeypatch.setattr(hf_cache, "available", lambda: False)
    assert measured_presets("cpu") == []


# A hybrid per transformers family measured here: the preset, and test fixtures of the others (their _source says what
# each holds).
HYBRIDS = ["qwen3-next-80b-a3b", "kimi-linear", "bamba", "granite-hybrid", "jamba", "qwen3.5-text"]


@pytest.mark.parametrize("name", HYBRIDS)
def test_hybrid_cache_per_layer_kind_is_transformers_own(name: str) -> None:
    """A narrow twin of each hybrid (one layer per kind, the model's head shapes) built as transformers' own class
    and run one forward step: per layer kind, the bytes its cache allocated against ours. K and V per token and the
    recurrent state (fp32) equal ours; transformers keeps kernel columns of the convolution's state where we count
    the kernel - 1 it reads: per column they are equal."""
    import importlib.util

    from bench.models import hf_cache
    from bench.models.config import kv_layer_groups, linear_state_group
    from bench.models.config_json import load_config

    pytest.importorskip("transformers")
    fixture = Path(__file__).parent / "fixtures" / "configs" / f"{name}.json"
    cfg = preset(name) if name in PRESETS else load_config(fixture)
    family = hf_cache.HYBRID[cfg.model_type]
    if importlib.util.find_spec(f"transformers.models.{family.removesuffix('_text')}") is None:
        pytest.skip(f"this transformers has no {family} model")
    measured = hf_cache.hybrid_cache_bytes(cfg)
    assert measured["model_class"].replace("_", "").lower() == family.replace("_", "").removesuffix("text") + \
        "forcausallm"  # the family's own class, not a stand-in
    full, linear = measured["kinds"]["full"], measured["kinds"][cfg.linear.kind]
    (group,) = kv_layer_groups(cfg)
    assert full["kv_bytes_per_token"] == group.bytes_per_token // group.layers > 0
    assert full["recurrent_bytes"] == full["conv_bytes"] == linear["kv_bytes_per_token"] == 0
    ours = linear_state_group(cfg)
    assert (linear["recurrent_bytes"], linear["recurrent_dtype"]) == (ours.state_bytes, "float32")
    assert linear["conv_dtype"] == {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[cfg.dtype]
    assert linear["conv_columns"] == ours.state.conv_kernel == ours.state.conv_tokens + 1
    assert linear["conv_bytes"] // linear["conv_columns"] == ours.conv_bytes // ours.state.conv_tokens
