"""Hybrid models (linear layers beside attention): their layer kinds and linear state read from config.json as
transformers reads them, every other hybrid refused by name, `bench kv`'s figures worked by hand, and the sweep side
(attention shapes and model facts)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.engine import sweeps
from bench.models.config import attention_shapes, kv_bytes_per_token, linear_state_bytes, model_facts
from bench.models.config_hybrid import FAMILIES
from bench.models.config_json import parse_config
from bench.models.kvcache import estimate, max_batch, max_context
from bench.models.presets import preset

KiB, MiB, GiB = 2**10, 2**20, 2**30
QWEN = "qwen3-next-80b-a3b"
# Qwen3-Next-80B-A3B's attention geometry; the layer kinds and linear fields are added per test
QWEN_BASE = {"model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16,
             "num_key_value_heads": 2, "head_dim": 256, "torch_dtype": "bfloat16"}
QWEN_LINEAR = {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
               "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "configs"
# test fixtures of the other families (their _source says what each holds), read as dicts to vary them
KIMI, BAMBA, GRANITE, JAMBA = (json.loads((FIXTURES / f"{name}.json").read_text())
                               for name in ("kimi-linear", "bamba", "granite-hybrid", "jamba"))

def read(data: dict, name: str = "model"):
    return parse_config(data, "config.json", name)


def kv_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["kv", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------- reading

def test_qwen3_next_preset_every_fourth_layer_full() -> None:
    q = preset(QWEN)
    assert [i for i, kind in enumerate(q.layer_kinds) if kind == "full"] == list(range(3, 48, 4))
    assert (q.full_layers, q.linear_layers, q.layers) == (12, 36, 48) and q.assumed == ()
    assert (q.n_heads, q.n_kv_heads, q.head_dim, q.dtype) == (16, 2, 256, "bf16")
    assert q.linear.kind == "deltanet" and q.linear.state_shape == (32, 128, 128)  # the value heads: 32
    assert (q.linear.conv_channels, q.linear.conv_kernel) == (2 * 16 * 128 + 32 * 128, 4)  # q, k and v: 8192
    assert "Qwen/Qwen3-Next-80B-A3B-Instruct" in q.source


def test_layer_types_and_the_interval_agree() -> None:
    by_interval = read(QWEN_BASE | QWEN_LINEAR | {"full_attention_interval": 4})
    types = ["full_attention" if kind == "full" else "linear_attention" for kind in by_interval.layer_kinds]
    assert read(QWEN_BASE | QWEN_LINEAR | {"layer_types": types}) == by_interval
    two = read(QWEN_BASE | QWEN_LINEAR | {"full_attention_interval": 2})
    assert two.layer_kinds[:4] == ("deltanet", "full", "deltanet", "full")


def test_transformers_defaults_are_taken_and_noted() -> None:
    bare = read(QWEN_BASE)  # no linear field, no layer kinds: Qwen3NextConfig's defaults, as transformers takes them
    assert bare.layer_kinds == preset(QWEN).layer_kinds and bare.linear == preset(QWEN).linear
    assert len(bare.assumed) == 6 and all("Qwen3NextConfig's default" in note for note in bare.assumed)
    no_heads = read({k: v for k, v in QWEN_BASE.items() if k not in ("head_dim", "num_key_value_heads")})
    assert (no_heads.head_dim, no_heads.n_kv_heads) == (256, 2)  # not 2048 / 16 = 128, not MHA


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_the_defaults_are_transformers_own(model_type: str) -> None:
    """Each family's defaults read off transformers' config class (with only the fields it requires given)."""
    import transformers

    family = FAMILIES[model_type]
    config_class = getattr(transformers, family.config_class, None)
    if config_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no {family.config_class}")
    made = config_class()
    for key, value in {**family.attention_defaults, **family.linear_defaults}.items():
        if key == "full_attention_interval":  # popped from kwargs, not kept: seen in the layer types it gives
            assert made.layer_types[:value] == ["linear_attention"] * (value - 1) + ["full_attention"]
        elif key == "mamba_d_head":  # "auto" resolved by __post_init__
            assert made.mamba_d_head == made.mamba_expand * made.hidden_size // made.mamba_n_heads
        elif not (model_type == "kimi_linear" and key == "num_key_value_heads"):  # 32, then None -> Hq (also 32)
            assert getattr(made, key) == value, (model_type, key)


def test_kimi_linear_kda_and_mla() -> None:
    k = read(KIMI)
    assert [i + 1 for i, kind in enumerate(k.layer_kinds) if kind == "full"] == [4, 8, 12, 16, 20, 24, 27]
    assert k.is_mla and k.kv_latent_dim == 576 and k.linear.state_shape == (32, 128, 128)
    assert k.linear.conv_channels == 3 * 32 * 128
    # per token: 7 MLA layers x 576 x 2 bytes; per sequence: 20 x (32 x 128 x 128 x 4 + 12288 x 3 x 2)
    assert kv_bytes_per_token(k) == 7 * 576 * 2 == 8064
    assert linear_state_bytes(k) == 20 * (2_097_152 + 73_728)
    default = read({key: v for key, v in KIMI.items() if key != "linear_attn_config"})
    assert [i for i, kind in enumerate(default.layer_kinds) if kind == "full"] == [4, 8, 12, 16, 20, 24]


def test_mamba_hybrids() -> None:
    b = read(BAMBA)
    assert [i for i, kind in enumerate(b.layer_kinds) if kind == "full"] == [9, 18, 27] and b.linear_layers == 29
    # Mamba-2: 128 heads x 64 x 128 fp32; conv 2 x 4096 + 2 x 1 x 128 = 8448 channels x 3 x 2 bytes
    assert b.linear.state_shape == (128, 64, 128) and b.linear.conv_channels == 8448
    assert linear_state_bytes(b) == 29 * (128 * 64 * 128 * 4 + 8448 * 3 * 2)
    assert read(BAMBA | {"attn_layer_indices": None}).layer_kinds == ("mamba2",) * 32  # BambaConfig: all Mamba-2
    g = read(GRANITE)  # the legacy names transformers renames: mamba -> linear, attention -> full
    assert g.layer_kinds == ("mamba2", "mamba2", "full", "mamba2") and g.linear.state_shape == (48, 64, 128)
    j = read(JAMBA)
    assert j.layer_kinds == ("mamba",) * 4 + ("full",) + ("mamba",) * 3  # i % 8 == 4
    assert j.linear.state_shape == (8192, 16) and j.linear.conv_channels == 8192


BAD = [
    (QWEN_BASE | {"layer_types": ["linear_attention", "full_attention"]}, "layer_types must be a list of 48 entries"),
    (QWEN_BASE | {"layer_types": ["sliding_attention"] * 48}, "holds 'sliding_attention': not a layer kind"),
    (QWEN_BASE | {"linear_num_value_heads": None}, "linear_num_value_heads is null"),
    (QWEN_BASE | {"linear_key_head_dim": "128"}, "linear_key_head_dim='128' is not an integer"),
    (QWEN_BASE | {"linear_num_value_heads": 24}, "linear_num_value_heads=24 is not a multiple"),
    (QWEN_BASE | {"linear_conv_kernel_dim": 1}, "convolution kernel must be at least 2"),
    (KIMI | {"linear_attn_config": {"full_attn_layers": [4], "kda_layers": [1, 2, 3]}}, "names no kind for layers"),
    (KIMI | {"linear_attn_config": {"full_attn_layers": [0], "kda_layers": [1]}}, "numbered 1 to 27"),
    (BAMBA | {"mamba_d_head": 32}, "must equal mamba_expand x hidden_size = 8192"),
    (BAMBA | {"attn_layer_indices": [32]}, "attn_layer_indices must list layer numbers from 0 to 31"),
    (JAMBA | {"attn_layer_offset": 8}, "attn_layer_offset=8 must be smaller than attn_layer_period=8"),
    (QWEN_BASE | {"model_type": "llama", "layer_types": ["linear_attention"] * 48},
     "layer_types holds 'linear_attention'; only"),
    (QWEN_BASE | {"model_type": "falcon_h1"}, "model_type 'falcon_h1' has recurrent or linear-attention layers"),
    (QWEN_BASE | {"model_type": "nemotron_h", "hybrid_override_pattern": "M*M-"}, "model_type 'nemotron_h'"),
    (QWEN_BASE | {"model_type": "minimax"}, "model_type 'minimax'"),  # its layers alternate by default
    (QWEN_BASE | {"model_type": "llama", "mamba_d_state": 16}, "mamba_d_state is set"),
    (QWEN_BASE | {"model_type": "", "full_attention_interval": 4}, "full_attention_interval is set"),
]


@pytest.mark.parametrize("data, message", BAD)
def test_bad_hybrid_configs_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     data: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    code, out, err = kv_cli(capsys, "--config", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ") and message in err, err


# ------------------------------------------------------------------------------------------ bench kv

def test_kv_figures_worked_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = kv_cli(capsys, "--config", QWEN, "--context", "32k")
    assert code == 0 and err == ""
    # 12 full layers x 2 (K, V) x 2 KV heads x 256 x 2 bytes = 24 KiB per token; x 32768 = 768 MiB
    assert "KV cache per token: 24 KiB (24,576 bytes); the 36 gated DeltaNet layers cache none" in out
    assert "at context 32,768 x batch 1: 768 MiB (805,306,368 bytes)" in out
    # per linear layer: 32 x 128 x 128 x 4 bytes (fp32) = 2 MiB, and 8192 channels x 3 x 2 bytes = 48 KiB;
    # x 36 = 77,266,944 bytes (73.69 MiB); with the KV cache: 882,573,312 bytes
    assert "recurrent 32 x 128 x 128 fp32 = 2 MiB" in out and "8,192 channels x 3 (kernel 4 - 1) bf16 = 48 KiB" in out
    assert "x 36 layers x batch 1 = 73.69 MiB" in out
    assert "KV cache and linear state at context 32,768 x batch 1: 841.69 MiB (882,573,312 bytes)" in out
    # all 48 layers full: 96 KiB per token, 3 GiB; saved 3 GiB - 841.69 MiB = 2.18 GiB; the state equals the KV
    # cache of 36 full layers (36 x 2 KiB per token) at ceil(77,266,944 / 73,728) = 1,048 tokens
    assert "every layer full attention instead: 96 KiB/token, 3 GiB at context 32,768 x batch 1; this model saves " \
           "2.18 GiB (72.6%)" in out and "at 1,048 tokens" in out
    assert "48 layers (12 full, 36 gated DeltaNet)" in out.splitlines()[0]


def test_kv_json_and_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = kv_cli(capsys, "--model", QWEN, "--context", "256k", "--memory", "8GiB", "--json")
    data = json.loads(out)
    state = 36 * (2_097_152 + 49_152)
    assert code == 0 and data["state_bytes"] == state == data["state_groups"][0]["bytes_per_sequence"]
    assert data["total_bytes"] == 24_576 * 262_144 and data["cache_bytes"] == data["total_bytes"] + state
    assert data["all_attention"] == {"bytes_per_token": 98_304, "total_bytes": 24 * GiB}
    assert data["saving_bytes"] == 24 * GiB - data["cache_bytes"] and data["linear_layers"] == 36
    assert data["max_context"] == (8 * GiB - state) // 24_576  # the state first, then the KV cache
    assert data["max_batch"] == 8 * GiB // data["cache_bytes"] == 1
    code, out, _ = kv_cli(capsys, "--model", "llama-3-8b", "--json")  # other models: no hybrid keys
    assert not {"state_groups", "cache_bytes", "assumed", "all_attention"} & set(json.loads(out))


def test_fitting_counts_the_state() -> None:
    q = preset(QWEN)
    state = linear_state_bytes(q)
    assert max_context(q, 1, "bf16", state - 1) == 0 and max_context(q, 1, "bf16", state) == 0
    assert max_context(q, 1, "bf16", state + 24_576) == 1
    assert max_batch(q, 1024, "bf16", 10 * state) == 10 * state // (state + 1024 * 24_576)
    all_linear = read(QWEN_BASE | {"layer_types": ["linear_attention"] * 48})
    assert max_context(all_linear, 2, "bf16", 2 * linear_state_bytes(all_linear)) is None  # any context fits
    assert max_context(all_linear, 2, "bf16", 2 * linear_state_bytes(all_linear) - 1) == 0
    assert estimate(all_linear, 8, 2).cache_bytes == 2 * 48 * (2_097_152 + 49_152)


def test_a_model_of_linear_layers_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"  # GraniteMoeHybridConfig without layer_types: every layer Mamba-2
    path.write_text(json.dumps({key: v for key, v in GRANITE.items() if key != "layer_types"}))
    code, out, _ = kv_cli(capsys, "--config", str(path), "--memory", "1GiB")
    assert code == 0 and "4 layers (4 Mamba-2)" in out and "at context 8,192 x batch 1: 0 B (0 bytes)\n" in out
    assert "largest context at batch 1: any (the linear layers' state fits" in out and "MQA" not in out


def test_all_attention_and_first_layers() -> None:
    q = preset(QWEN)
    twin = q.all_attention()
    assert twin.layer_kinds == ("full",) * 48 and twin.linear is None and kv_bytes_per_token(twin) == 96 * KiB
    assert q.first_layers(3).linear == q.linear and q.first_layers(4).full_layers == 1
    assert read(KIMI).first_layers(3).layer_kinds == ("kda",) * 3


# ------------------------------------------------------------------------------------------ the sweep side

def test_sweep_side_attention_layers_only() -> None:
    q = preset(QWEN)
    (kind,) = attention_shapes(q)  # the linear layers are not swept yet
    assert (kind.kind, kind.layers, kind.n_heads, kind.n_kv_heads, kind.head_dim) == ("full", 12, 16, 2, 256)
    facts = model_facts(q, ("bf16", "fp8"))
    assert facts["layers"] == {"full": 12, "sliding": 0, "deltanet": 36}
    assert facts["kv_bytes_per_token"] == {"bf16": {"full": 24_576}, "fp8": {"full": 12_288}}
    assert facts["linear_state_bytes"] == 36 * (2_097_152 + 49_152)
    assert "linear_state_bytes" not in model_facts(preset("llama-3-8b"), ("bf16",))
    cases = sweeps.cases(sweeps.Sweep(backends=("sdpa",), models=(QWEN,), seqs=(256,)), "cpu")
    shapes = {(c.shape.n_heads, c.shape.n_kv_heads, c.shape.head_dim, c.shape.mask.causal, c.shape.mask.window)
              for c in cases}
    assert shapes == {(16, 2, 256, True, None)}  # one shape: the full layers', causal
