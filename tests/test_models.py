"""bench.models.config: config.json files read into attention facts, the KV bytes they imply (worked by hand below),
every refusal as one line and exit 2, the presets read from their files, and `kv --config`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.counts.metrics import ELEMENT_BYTES
from bench.models.config import (
    DTYPE_BYTES,
    AttentionKind,
    ConfigError,
    KVLayerGroup,
    attention_shapes,
    kv_bytes_per_token,
    kv_layer_groups,
    kv_total_bytes,
)
from bench.models.config_json import PRESET_NAMES, load_config, parse_config
from bench.models.kvcache import estimate, format_bytes, max_batch, max_context, measure_kv_cache_bytes
from bench.models.presets import PRESETS, preset

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "fixtures" / "configs"
KiB, MiB, GiB = 2**10, 2**20, 2**30
CTX = 32 * KiB  # 32768 tokens


def fixture(name: str) -> Path:
    return CONFIGS / f"{name}.json"


def cfg(name: str):
    return load_config(fixture(name))


# ------------------------------------------------------------------------------------ bytes, worked by hand

# (fixture, bytes per token, bytes at 32k tokens x batch 1 in bf16 (2 bytes per element)), from public config facts.
HAND = [
    # Llama-3-8B: 32 layers, 8 KV heads, head_dim 4096/32 = 128: 2 (K, V) x 32 x 8 x 128 x 2 B = 131072;
    # x 32768 tokens = 4294967296 (4 GiB)
    ("llama-3-8b", 131_072, 4_294_967_296),
    # Qwen2.5-0.5B: 24 layers, 2 KV heads, head_dim 896/14 = 64: 2 x 24 x 2 x 64 x 2 = 12288; x 32768 = 402653184;
    # sliding_window is set but use_sliding_window is false: every layer full
    ("qwen2.5-0.5b", 12_288, 402_653_184),
    # Qwen3-4B: 36 layers, 8 KV heads, head_dim 128 given (not 2560/32 = 80): 2 x 36 x 8 x 128 x 2 = 147456;
    # x 32768 = 4831838208 (4.5 GiB)
    ("qwen3-4b", 147_456, 4_831_838_208),
    # Mistral-7B-v0.1: 32 layers, 8 KV heads, 4096/32 = 128: 2 x 32 x 8 x 128 x 2 = 131072; every layer slides,
    # window 4096: 131072 x 4096 = 536870912 (512 MiB)
    ("mistral-7b-v0.1", 131_072, 536_870_912),
    # Gemma-2-9B: 42 layers, 8 KV heads, head_dim 256; one layer 2 x 8 x 256 x 2 = 8192 B/token; 42 x 8192 = 344064.
    # 21 full layers x 8192 x 32768 = 5637144576, plus 21 sliding x 8192 x 4096 (window) = 704643072:
    # 6341787648
    ("gemma-2-9b", 344_064, 6_341_787_648),
    ("gemma-2-9b-no-layer-types", 344_064, 6_341_787_648),  # the same model, its layers from the gemma2 rule
    # DeepSeek-V3 (MLA): 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B = 70272 (no K/V factor, no
    # heads); x 32768 = 2302672896
    ("deepseek-v3", 70_272, 2_302_672_896),
    # Gemma-3-4B (text_config): 34 layers, 4 KV heads, head_dim 256: one layer 2 x 4 x 256 x 2 = 4096 B/token;
    # 34 x 4096 = 139264. Pattern 6: layers 5, 11, 17, 23, 29 full (5), 29 sliding at window 1024:
    # 5 x 4096 x 32768 = 671088640 + 29 x 4096 x 1024 = 121634816 -> 792723456
    ("gemma-3-4b-it", 139_264, 792_723_456),
]


@pytest.mark.parametrize("name, per_token, total", HAND)
def test_bytes_worked_by_hand(name: str, per_token: int, total: int) -> None:
    c = cfg(name)
    assert kv_bytes_per_token(c, "bf16") == per_token
    assert kv_total_bytes(c, CTX, 1, "bf16") == total
    est = estimate(c, CTX, 1, "bf16")
    assert (est.bytes_per_token, est.total_bytes) == (per_token, total)


@pytest.mark.parametrize("name, per_token, total", HAND)
def test_cli_config_bytes(capsys: pytest.CaptureFixture[str], name: str, per_token: int, total: int) -> None:
    assert main(["kv", "--config", str(fixture(name)), "--context", "32k", "--dtype", "bf16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["bytes_per_token"], data["total_bytes"]) == (per_token, total)
    assert sum(g["total_bytes"] for g in data["layer_groups"]) == total
    assert sum(g["layers"] for g in data["layer_groups"]) == data["layers"]


def test_the_facts_read() -> None:
    q3 = cfg("qwen3-4b")
    facts = (q3.layers, q3.hidden_size, q3.n_heads, q3.n_kv_heads, q3.head_dim, q3.dtype)
    assert facts == (36, 2560, 32, 8, 128, "bf16")  # head_dim 128 as given, not 2560 / 32 = 80
    assert q3.window is None and q3.variant == "gqa"
    q = cfg("qwen2.5-0.5b")
    assert (q.head_dim, q.n_kv_heads, q.window, set(q.layer_kinds)) == (64, 2, None, {"full"})
    m = cfg("mistral-7b-v0.1")
    assert (m.window, m.sliding_layers, m.full_layers) == (4096, 32, 0)
    g = cfg("gemma-2-9b")
    assert g.layer_kinds[:3] == ("sliding", "full", "sliding") and (g.full_layers, g.sliding_layers) == (21, 21)
    assert cfg("gemma-2-9b-no-layer-types").layer_kinds == g.layer_kinds  # the gemma2 rule = HF's layer_types
    ds = cfg("deepseek-v3")
    assert (ds.layers, ds.n_heads, ds.kv_latent_dim, ds.head_dim, ds.variant) == (61, 128, 576, 192, "mla")


def test_text_config_is_the_text_model() -> None:
    g3 = cfg("gemma-3-4b-it")
    assert g3.name == "gemma-3-4b-it" and g3.model_type == "gemma3_text" and g3.dtype == "bf16"  # dtype: outer
    assert [i for i, kind in enumerate(g3.layer_kinds) if kind == "full"] == [5, 11, 17, 23, 29]
    assert (g3.layers, g3.n_heads, g3.n_kv_heads, g3.head_dim, g3.window) == (34, 8, 4, 256, 1024)
    data = json.loads(fixture("gemma-3-4b-it").read_text())
    types = ["full_attention" if kind == "full" else "sliding_attention" for kind in g3.layer_kinds]
    data["text_config"] = {**data["text_config"], "layer_types": types}
    del data["text_config"]["sliding_window_pattern"]
    assert parse_config(data, name="gemma-3-4b-it").layer_kinds == g3.layer_kinds


# ------------------------------------------------------------------------------------ hybrids and fitting

def test_hybrid_totals_below_and_above_the_window() -> None:
    g = cfg("gemma-2-9b")  # every layer 8192 B/token in bf16; window 4096
    assert kv_total_bytes(g, 2048) == 704_643_072  # 42 x 8192 x 2048: below the window every layer grows
    assert kv_total_bytes(g, 4096) == 1_409_286_144  # 42 x 8192 x 4096
    assert kv_total_bytes(g, 8192) == 2_113_929_216  # 21 x 8192 x 8192 + 21 x 8192 x 4096: only full layers grow
    assert estimate(g, 8192).tokens == 8192  # full layers hold the whole context
    groups = {grp.kind: grp for grp in kv_layer_groups(g)}
    assert groups["sliding"].cached_tokens(8192) == 4096 and groups["full"].cached_tokens(8192) == 8192


def test_hybrid_fitting_known_values() -> None:
    g = cfg("gemma-2-9b")
    # 80 GiB: the sliding layers' full windows (21 x 8192 x 4096 = 704643072) and then 21 x 8192 = 172032 B per
    # token of the full layers: (85899345920 - 704643072) // 172032 = 495225
    assert max_context(g, 1, "bf16", 80 * GiB) == 495_225
    # 256 MiB does not hold the windows: every layer grows, 344064 B/token: 268435456 // 344064 = 780
    assert max_context(g, 1, "bf16", 256 * MiB) == 780
    assert max_context(g, 1, "bf16", 10**15) is not None  # a hybrid always has a limit: its full layers grow
    assert max_batch(g, 8192, "bf16", 80 * GiB) == 80 * GiB // 2_113_929_216


@pytest.mark.parametrize("name", ["gemma-2-9b", "gemma-3-4b-it", "deepseek-v3", "mistral-7b-v0.1"])
@pytest.mark.parametrize("memory", [1, 100 * KiB, 300 * MiB, 700 * MiB, 24 * GiB, 80 * 10**9 + 12345])
@pytest.mark.parametrize("batch", [1, 3])
def test_max_context_is_the_boundary(name: str, memory: int, batch: int) -> None:
    c = cfg(name)
    ctx = max_context(c, batch, "bf16", memory)
    if ctx is None:  # only a model whose every layer slides, with its windows in memory
        assert c.full_layers == 0 and kv_total_bytes(c, 100 * c.window, batch, "bf16") <= memory
        return
    assert ctx == 0 or kv_total_bytes(c, ctx, batch, "bf16") <= memory
    assert kv_total_bytes(c, ctx + 1, batch, "bf16") > memory
    b = max_batch(c, CTX, "bf16", memory)
    assert b == 0 or kv_total_bytes(c, CTX, b, "bf16") <= memory
    assert kv_total_bytes(c, CTX, b + 1, "bf16") > memory


# ----------------------------------------------------------------------------------------------- MLA

def test_mla_has_no_variants_and_one_latent() -> None:
    ds = cfg("deepseek-v3")
    assert ds.variants() == []
    with pytest.raises(ConfigError, match="MLA"):
        ds.as_variant("mqa")
    assert kv_layer_groups(ds) == [KVLayerGroup("full", 61, None, None, 576, None, 61 * 576 * 2)]


def test_mla_decompressed_twins_cache_k_and_v_per_head() -> None:
    """DeepSeek-V3 without its latent, at its Hq: K of 192 and V of 128 per head (MHA) or one such head (MQA)."""
    ds = cfg("deepseek-v3")
    mha, mqa = ds.decompressed("mha"), ds.decompressed("mqa")
    assert not mha.is_mla and (mha.n_kv_heads, mqa.n_kv_heads) == (128, 1)
    assert kv_bytes_per_token(mha) == 61 * 128 * (192 + 128) * 2 and kv_bytes_per_token(mqa) == 61 * 320 * 2
    assert kv_bytes_per_token(mha) / kv_bytes_per_token(ds) == pytest.approx(128 * 320 / 576)
    for m in (ds, mha, mqa):  # allocated, as the KV claim measures them
        c = m.first_layers(2)
        assert measure_kv_cache_bytes(c, 100, 1, "bf16", "cpu") == kv_total_bytes(c, 100, 1, "bf16")
    with pytest.raises(ConfigError, match="decompressed"):
        cfg("llama-3-8b").decompressed("mha")


def test_cli_mla(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kv", "--config", str(fixture("deepseek-v3")), "--context", "32k", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["variant"] == "mla" and data["kv_latent_dim"] == 576 and data["variants"][0]["variant"] is None
    assert "do not apply to MLA" in data["variants_note"]
    assert main(["kv", "--config", str(fixture("deepseek-v3"))]) == 0
    out = capsys.readouterr().out
    assert "do not apply to MLA" in out and "this model" not in out  # no variants table


# ------------------------------------------------------------------------------------ attention shapes

def test_attention_shapes() -> None:
    assert attention_shapes(cfg("llama-3-8b")) == [AttentionKind("full", 32, 32, 8, 128, None)]
    assert attention_shapes(cfg("gemma-2-9b")) == [AttentionKind("full", 21, 16, 8, 256, None),
                                                   AttentionKind("sliding", 21, 16, 8, 256, 4096)]
    assert attention_shapes(cfg("mistral-7b-v0.1")) == [AttentionKind("sliding", 32, 32, 8, 128, 4096)]
    # MLA in its prefill form: K and V decompressed per head, head_dim = qk_nope 128 + qk_rope 64
    assert attention_shapes(cfg("deepseek-v3")) == [AttentionKind("full", 61, 128, 128, 192, None)]
    assert attention_shapes(preset("bert-base"))[0].kind == "full"


# --------------------------------------------------------------------------------------------- refusals

def _write(tmp_path: Path, data: dict, name: str = "bad.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _llama(**changes: object) -> dict:
    data = json.loads(fixture("llama-3-8b").read_text())
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key, None)
        else:
            data[key] = value
    return data


_DROP = object()
MAMBA = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24,
         "state_size": 16, "conv_kernel": 4, "expand": 2, "torch_dtype": "float32"}

REFUSALS = [
    (_llama(num_hidden_layers=_DROP), "num_hidden_layers is missing"),
    (_llama(head_dim=_DROP, hidden_size=1000, num_attention_heads=4, num_key_value_heads=2),  # 1000 / 4 = 250 fine
     None),
    (_llama(hidden_size=1000, num_attention_heads=3, num_key_value_heads=1),
     "hidden_size=1000 is not divisible by num_attention_heads=3"),
    (_llama(num_key_value_heads="8"), "num_key_value_heads='8' is not an integer"),
    (_llama(num_hidden_layers=32.0), "num_hidden_layers=32.0 is not an integer"),
    (_llama(num_hidden_layers=True), "num_hidden_layers=True is not an integer"),
    (_llama(num_attention_heads=0), "num_attention_heads=0 must be positive"),
    (_llama(num_key_value_heads=5), "num_attention_heads=32 is not divisible by num_key_value_heads=5"),
    (_llama(num_key_value_heads=64), "num_key_value_heads=64 exceeds num_attention_heads=32"),
    (_llama(model_type="phi3", sliding_window=2047), "add layer_types"),
    (_llama(sliding_window=4096), "add layer_types"),  # llama has no known sliding rule
    (_llama(sliding_window="4k", model_type="mistral"), "sliding_window='4k' is not an integer"),
    (MAMBA, "num_attention_heads is missing; without attention heads there is no attention to size"),
    (_llama(layer_types=["full_attention"] * 31), "layer_types must be a list of 32 entries"),
    (_llama(layer_types=["linear_attention"] * 32), "layer_types holds 'linear_attention'"),
    (_llama(layer_types=["sliding_attention"] * 32), "sliding_window is missing"),
    (_llama(model_type="gemma3_text", sliding_window=1024), "sliding_window_pattern is missing"),
    (_llama(model_type="qwen2", sliding_window=4096), "use_sliding_window=None must be true or false"),
    (_llama(model_type="qwen2", sliding_window=4096, use_sliding_window=True), "max_window_layers is missing"),
    (_llama(num_key_value_heads=_DROP, multi_query=True), "num_key_value_heads is missing and multi_query is set"),
    (_llama(kv_lora_rank=512), "qk_rope_head_dim is missing"),
    (_llama(is_encoder_decoder=True), "is_encoder_decoder"),
    (_llama(cross_attention_layers=[3, 8]), "cross_attention_layers"),
    (_llama(attention_chunk_size=8192, no_rope_layers=[1, 0]), "no_rope_layers must be a list of 32 entries"),
    (_llama(torch_dtype="float8_e4m3fn"), "torch_dtype='float8_e4m3fn' is not one of bfloat16"),
    ({"model_type": "llava", "text_config": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096}},
     "text_config.num_attention_heads is missing"),
    ([1, 2], "expected a JSON object"),
]


@pytest.mark.parametrize("data, message", REFUSALS)
def test_refusals_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, data: object,
                                       message: str | None) -> None:
    code = main(["kv", "--config", _write(tmp_path, data)])  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    if message is None:  # the control: a config that reads
        assert code == 0 and err == ""
        return
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert "bad.json" in err  # the file is named too


def test_refusals_of_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{not json")
    for argv, message in [(["--config", str(tmp_path / "broken.json")], "not valid JSON"),
                          (["--config", str(tmp_path / "absent.json")], "no such config file"),
                          (["--config", str(tmp_path)], "config.json"),  # a folder without config.json
                          (["--config", "llama-9"], "unknown model preset 'llama-9'"),
                          (["--model", "llama-9"], "known: transformer-base, bert-base"),
                          (["--config", str(fixture("qwen3-4b")), "--model", "gpt2"], "cannot be combined"),
                          (["--config", str(fixture("qwen3-4b")), "--layers", "2"], "cannot be combined")]:
        assert main(["kv", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_config_error_is_an_input_error() -> None:
    from bench.errors import InputError

    assert issubclass(ConfigError, InputError)


# --------------------------------------------------------------------------------------- naming and dtype

def test_names(tmp_path: Path) -> None:
    folder = tmp_path / "Llama-3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(fixture("llama-3-8b").read_text())
    assert load_config(folder).name == "Llama-3-8B" == load_config(folder / "config.json").name
    named = _write(tmp_path, _llama(_name_or_path="meta-llama/Meta-Llama-3-8B"))
    assert load_config(named).name == "Meta-Llama-3-8B"
    assert load_config("llama-3-8b") == preset("llama-3-8b")  # a preset name reads the packaged file


def test_dtype_comes_from_the_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fp32 = _write(tmp_path, _llama(torch_dtype="float32"))
    assert main(["kv", "--config", fp32, "--context", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["dtype"], data["bytes_per_token"]) == ("fp32", 2 * 32 * 8 * 128 * 4)
    assert main(["kv", "--config", fp32, "--context", "1", "--dtype", "fp8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes_per_token"] == 2 * 32 * 8 * 128 * 1
    new_key = _write(tmp_path, _llama(torch_dtype=_DROP, dtype="float16"), "new.json")  # newer transformers' key
    assert load_config(new_key).dtype == "fp16"
    assert load_config(_write(tmp_path, _llama(torch_dtype=_DROP), "none.json")).dtype == "bf16"
    assert preset("llama-2-7b").dtype == "fp16" and preset("gpt2").dtype == "bf16"


def test_qwen_sliding_layers(tmp_path: Path) -> None:
    data = json.loads(fixture("qwen2.5-0.5b").read_text())
    on = load_config(_write(tmp_path, {**data, "use_sliding_window": True, "max_window_layers": 21}))
    assert on.layer_kinds == ("full",) * 21 + ("sliding",) * 3 and on.window == 32768


def test_encoder_only_by_architecture(tmp_path: Path) -> None:
    masked = load_config(_write(tmp_path, _llama(model_type="custom-encoder", architectures=["FooForMaskedLM"])))
    assert masked.encoder_only and kv_bytes_per_token(masked) == 0 and kv_layer_groups(masked) == []
    assert not cfg("llama-3-8b").encoder_only


def test_element_sizes_match_the_metrics_module() -> None:
    assert DTYPE_BYTES == ELEMENT_BYTES


def test_models_module_imports_no_torch() -> None:
    # bench/__init__.py imports torch for the backends; bench/models/config.py needs only the standard library and
    # bench.errors, so it can be lifted out or imported lazily (the sweep does) without torch in the way.
    for module in ("config.py", "config_json.py", "config_hybrid.py", "linear.py"):
        tree = ast.parse((REPO / "bench" / "models" / module).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        allowed = {"__future__", "json", "re", "dataclasses", "importlib", "pathlib", "typing", "bench.errors",
                   "bench.models.config", "bench.models.config_hybrid", "bench.models.config_json",
                   "bench.models.linear"}  # config_hybrid names config_json's reader only for type checking
        assert imported <= allowed, (module, imported)


# -------------------------------------------------------------------------------------------- presets

# Each preset's facts as bench/presets.py held them before they moved to files (name: layers, d_model, Hq, Hkv, D,
# window, encoder-only).
OLD_PRESETS = {
    "transformer-base": (6, 512, 8, 8, 64, None, False),
    "bert-base": (12, 768, 12, 12, 64, None, True),
    "gpt2": (12, 768, 12, 12, 64, None, False),
    "qwen2.5-0.5b": (24, 896, 14, 2, 64, None, False),
    "llama-2-7b": (32, 4096, 32, 32, 128, None, False),
    "llama-2-70b": (80, 8192, 64, 8, 128, None, False),
    "llama-3-8b": (32, 4096, 32, 8, 128, None, False),
    "mistral-7b-v0.1": (32, 4096, 32, 8, 128, 4096, False),
    "gpt-3-175b": (96, 12288, 96, 96, 128, None, False),
}


def test_presets_read_from_files_keep_their_facts() -> None:
    assert tuple(PRESETS) == PRESET_NAMES == (*OLD_PRESETS, "deepseek-v3", "deepseek-v3.2", "gemma-2-9b",
                                              "qwen3-next-80b-a3b")
    gemma = PRESETS["gemma-2-9b"]  # sliding and full layers alternate, every layer soft-caps its scores
    assert gemma.layer_kinds == ("sliding", "full") * 21 and gemma.window == 4096 and gemma.softcap == 50.0
    assert (gemma.n_heads, gemma.n_kv_heads, gemma.head_dim) == (16, 8, 256) and not gemma.ignored[1:]
    for name, facts in OLD_PRESETS.items():
        p = PRESETS[name]
        assert (p.layers, p.hidden_size, p.n_heads, p.n_kv_heads, p.head_dim, p.window, p.encoder_only) == facts, name
        assert p.name == name and p.source and not p.is_mla
        assert set(p.layer_kinds) == ({"sliding"} if p.window else {"full"})
    files = sorted(path.stem for path in (REPO / "bench" / "models" / "configs").glob("*.json"))
    assert files == sorted(PRESET_NAMES)
    assert "Vaswani" in preset("transformer-base").source and "decoder" in preset("transformer-base").note


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen2.5-0.5b", "mistral-7b-v0.1", "deepseek-v3"])
def test_fixture_and_preset_agree(name: str) -> None:
    a, b = cfg(name), preset(name)
    assert (a.layers, a.n_heads, a.n_kv_heads, a.head_dim, a.layer_kinds, a.window, a.dtype, a.kv_lora_rank,
            a.qk_rope_head_dim, a.v_head_dim) == (b.layers, b.n_heads, b.n_kv_heads, b.head_dim, b.layer_kinds,
                                                  b.window, b.dtype, b.kv_lora_rank, b.qk_rope_head_dim, b.v_head_dim)


def test_readme_example_config() -> None:
    section = (REPO / "README.md").read_text().split("## KV cache calculator", 1)[1].split("\n## ", 1)[0]
    prose = " ".join(section.split())
    c = preset("gemma-2-9b")  # the README's example: its facts and figures, as the code gives them
    assert (c.layers, c.n_heads, c.n_kv_heads, c.head_dim, c.window) == (42, 16, 8, 256, 4096)
    assert "(42 layers, 16 heads over 8 of 256, window 4096)" in prose
    assert kv_bytes_per_token(c, "bf16") == 344_064 and format_bytes(kv_total_bytes(c, CTX, dtype="bf16")) == "5.91 GiB"
    assert "gives 336 KiB per token and 5.91 GiB at 32k" in prose


def test_pyproject_ships_the_preset_files() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert "[tool.setuptools.package-data]" in text and '"bench.models" = ["configs/*.json"]' in text


# ------------------------------------------------------------------------------------------ real caches

@pytest.mark.parametrize("name, layers, context", [("gemma-2-9b", 4, 5000), ("gemma-2-9b", 2, 100),
                                                   ("gemma-3-4b-it", 6, 1500), ("deepseek-v3", 2, 333)])
def test_allocated_hybrid_and_mla_caches_equal_the_formula(name: str, layers: int, context: int) -> None:
    c = cfg(name).first_layers(layers)  # a few layers keep the kinds' layout (gemma-3: 5 sliding, then 1 full)
    for dtype in ("bf16", "fp8"):
        assert measure_kv_cache_bytes(c, context, 1, dtype, "cpu") == estimate(c, context, 1, dtype).total_bytes > 0
