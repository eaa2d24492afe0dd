"""Reading a HuggingFace-style config.json (a local file; never the network) into a bench.models.ModelConfig.

`load_config(path_or_preset_name)` reads a file, a folder holding config.json, or the name of a preset shipped in
bench/models/configs/ (the presets are such files, read by the same code).

The rules, each applied as written (bench/REFERENCE.md shows them from this docstring):

- Text model. A config with a `text_config` object (multimodal models: Gemma-3, LLaVA, ...) is read from it;
  the name, and the dtype when text_config has none, come from the outer config. Fields are then named
  `text_config.<field>` in errors.
- Sizes. `num_hidden_layers`, `num_attention_heads` and `hidden_size` are required positive integers; GPT-2-style
  names (`n_layer`, `n_head`, `n_embd`) stand in for them when the HF names are absent, as transformers maps them.
  A config without `num_attention_heads` (a state-space model, say) has no attention to size and is refused.
- KV heads. `num_key_value_heads`; absent or null means MHA (= num_attention_heads), as in transformers. It must
  divide num_attention_heads. Falcon (model_type falcon) as transformers' FalconAttention reads it:
  `new_decoder_architecture` true -> `num_kv_heads` (null: num_attention_heads); else `multi_query` (default true)
  -> 1; else num_attention_heads. (Under new_decoder_architecture transformers expands K and V to all heads before
  caching them; the cache counted here is the model's num_kv_heads, and `ignored` says so.) Any other config
  naming its KV heads another way (`num_kv_heads`, `n_head_kv`,
  `n_kv_heads`, `multi_query`, `multi_query_group_num`: ChatGLM, ...) and not num_key_value_heads is refused,
  since reading it as MHA would be silently wrong.
- Head dim. `head_dim` when given and not null (Qwen3-4B: hidden 2560, 32 heads, head_dim 128; Gemma: 256),
  else hidden_size / num_attention_heads, which must divide.
- MLA (DeepSeek-V2/V3, any config with a non-null `kv_lora_rank`): each layer caches one latent of
  kv_lora_rank + qk_rope_head_dim elements per token, shared by all heads -- no factor 2 for K and V, no heads.
  `qk_rope_head_dim`, `qk_nope_head_dim` and `v_head_dim` are required; head_dim is then
  qk_nope_head_dim + qk_rope_head_dim (the query/key dim of a decompressed head; any `head_dim` key is ignored).
- Top-K sparse attention (DeepSeek-V3.2's DSA, model_type deepseek_v32, any config with a non-null `index_topk`):
  `index_topk`, `index_n_heads` and `index_head_dim` are required positive integers; every layer attends to the
  index_topk keys its indexer picks (a model sweep runs them as sparsity topk:K:HxD beside the dense cases, at the
  contexts longer than K: below, DSA keeps every key) and caches one index key of index_head_dim elements per token
  beside its latent (DeepSeek stores it in fp8: `bench kv --dtype fp8` sizes that).
- Layer kinds. One entry per layer, "full", "sliding" or "chunked":
  `layer_types` when present (HF's "full_attention" / "sliding_attention" / "chunked_attention"; any other value
  is refused);
  else, with a non-null `attention_chunk_size` (Llama-4), Llama4TextConfig's rule: layer i is chunked when
  `no_rope_layers[i]` is 1 (the RoPE layers), full when 0; without no_rope_layers, chunked unless
  (i + 1) % no_rope_layer_interval == 0 (default 4: three layers in four chunked, every fourth full);
  else all full when `sliding_window` is absent or null, or when `use_sliding_window` is false (any family);
  else the family's known rule, by `model_type`:
    gemma2: layers alternate sliding, full, starting with sliding on layer 0;
    gemma3 / gemma3_text: layer i is full when (i + 1) % sliding_window_pattern == 0, sliding otherwise;
    mistral: every layer slides (Mistral-7B-v0.1; later versions set sliding_window to null);
    qwen2 / qwen2_moe / qwen3 / qwen3_moe: `use_sliding_window` false -> all full; true -> layers
      0 .. max_window_layers - 1 full and the rest sliding (transformers' Qwen2Config);
  anything else with a non-null sliding_window is refused, naming `layer_types` (give it to say which layers slide).
- Linear layers (hybrids). A config whose (text config's) model_type is one of the families below is read as that
  family's transformers config class reads it: a field it leaves out takes the class's default (in brackets; each
  one taken is listed in the model's `assumed`, and `bench kv` prints it); a `layer_types` list (or its alias
  `layers_block_type`) holds one entry per layer, "mamba" and "attention" read as "linear_attention" and
  "full_attention" (transformers renames them so for every model). What a linear layer keeps: bench.models.linear.
    qwen3_next, qwen3_5 / qwen3_5_text, qwen3_5_moe / qwen3_5_moe_text: gated DeltaNet. Layers: `layer_types` of
      "linear_attention" / "full_attention", else linear unless (i + 1) % full_attention_interval [4] == 0.
      State: linear_num_value_heads [32] x linear_key_head_dim [128] x linear_value_head_dim [128]; convolution
      channels 2 x linear_num_key_heads [16] x linear_key_head_dim + linear_num_value_heads x linear_value_head_dim,
      kernel linear_conv_kernel_dim [4]; the value heads must be a multiple of the key heads. Attention:
      num_key_value_heads [2; qwen3_5_text 4], head_dim [256].
    kimi_linear: Kimi Delta Attention; its full layers are MLA. Layers: `layer_types`, else `linear_attn_config`'s
      full_attn_layers and kda_layers (1-based; between them every layer once), else full on layers i > 0 with
      i % 4 == 0. State: H x d x d, with H, d and the kernel from linear_attn_config's num_heads, head_dim,
      short_conv_kernel_size, else linear_num_heads [32], linear_head_dim [128], linear_conv_kernel_dim [4];
      convolution channels 3 x H x d. Attention: kv_lora_rank [512], qk_rope_head_dim [64], qk_nope_head_dim
      [128], v_head_dim [128], num_key_value_heads [32].
    bamba: Mamba-2; full on the 0-based `attn_layer_indices`, Mamba-2 elsewhere (every layer without them);
    granitemoehybrid: Mamba-2; `layer_types`, every layer Mamba-2 without it. State: mamba_n_heads [128] x
      mamba_d_head ["auto": mamba_expand x hidden_size / mamba_n_heads] x mamba_d_state [256], which must give
      mamba_d_head x mamba_n_heads = mamba_expand [2] x hidden_size; convolution channels mamba_expand x hidden_size
      + 2 x mamba_n_groups [1] x mamba_d_state, kernel mamba_d_conv [4]. Attention: bamba's num_key_value_heads [8].
    jamba: Mamba; full when i % attn_layer_period [8] == attn_layer_offset [4] (the offset below the period).
      State: (mamba_expand [2] x hidden_size) x mamba_d_state [16]; convolution channels mamba_expand x hidden_size,
      kernel mamba_d_conv [4]. Attention: num_key_value_heads [8].
  A linear field given as null, or not a positive integer, is refused by name, as is a layer_types entry that is not
  one of the family's kinds. Refused as well, so that a hybrid is never read as all attention: any other model_type
  transformers knows with recurrent or linear layers (falcon_h1, whose every layer runs attention and Mamba-2 side
  by side; nemotron_h, zamba2, lfm2, minimax, ...), and a config of any other model_type carrying a field only such
  models have (layers_block_type, hybrid_override_pattern, attn_layer_indices, attn_layer_period,
  full_attention_interval, linear_attn_config, mamba_d_state, ssm_state_size, linear_num_value_heads, ...).
- Window. `sliding_window`, kept only when some layer slides; only sliding layers are capped at it: a layer caches
  min(context, window) tokens, a full layer all of them. A chunked layer caches min(context, attention_chunk_size)
  tokens (transformers gives it the sliding-window cache layer, with the chunk as its window).
- Score variants: `attn_logit_softcapping` (non-null: softcap on every layer's scores, Gemma-2);
  `final_logit_softcapping` caps the LM head's logits, outside attention: ignored, and listed in `ignored` saying
  so; model_type gpt_oss: a learned sink logit per query head on every layer (GptOssAttention's `sinks`; no config
  field); model_type bloom, or falcon with `alibi` true: ALiBi.
- dtype (the default element type). `torch_dtype`, else `dtype` (newer transformers), of the text config then of
  the outer one: bfloat16 -> bf16, float16 -> fp16, float32 -> fp32; absent -> bf16; any other value is refused.
- Encoder-only (no decoding, so no KV cache): `model_type` bert, roberta, xlm-roberta, electra, deberta,
  deberta-v2 or modernbert, or every entry of `architectures` ending in ForMaskedLM.
- Refused as well, each naming its field: `is_encoder_decoder` true (the cross-attention cache depends on the
  source length), a non-empty `cross_attention_layers` (Llama-3.2-Vision: those layers cache image tokens).
- Name. The last part of `_name_or_path` when given, else the file's stem, or its folder's name for a file called
  config.json; characters other than letters, digits and . _ + - become "-" (the name goes into case ids).
  `_source` and `_note` (our keys, for models without an HF config) give where the facts come from.

Every refusal is a `ConfigError` (a bench.errors.InputError, so `python -m bench` prints one line and exits 2)
naming the file and the field; a number is never guessed.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from bench.errors import UsageError
from bench.models.config import DEFAULT_DTYPE, ConfigError, LayerKind, ModelConfig, _check_heads
from bench.models.config_hybrid import (  # noqa: F401  (HF_LAYER_TYPES: importable from here as before)
    FAMILIES,
    HF_LAYER_TYPES,
    Reader,
    read_hybrid,
    refuse_unknown,
    supported,
    with_defaults,
)

CONFIG_DTYPES: dict[str, str] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# The presets shipped as bench/models/configs/<name>.json, in the order they are listed to users.
PRESET_NAMES: tuple[str, ...] = ("transformer-base", "bert-base", "gpt2", "qwen2.5-0.5b", "llama-2-7b",
                                 "llama-2-70b", "llama-3-8b", "mistral-7b-v0.1", "gpt-3-175b", "deepseek-v3",
                                 "deepseek-v3.2", "gemma-2-9b", "qwen3-next-80b-a3b")

ENCODER_MODEL_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "electra", "deberta", "deberta-v2", "modernbert"})
_OTHER_KV_KEYS = ("num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query", "multi_query_group_num")
_QWEN_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})




def load_config(source: str | Path) -> ModelConfig:
    """A config.json file, a folder holding one, or a preset name (bench/models/configs/<name>.json)."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return read_config(path)
    text = str(source)
    if text in PRESET_NAMES:
        return preset_config(text)
    if path.name == "config.json" or path.suffix == ".json" or "/" in text or "\\" in text:
        raise ConfigError(f"{path}: no such config file")
    raise UsageError(f"unknown model preset {text!r}; known: {', '.join(PRESET_NAMES)} (or give a config.json path)")


def preset_config(name: str) -> ModelConfig:
    """One of the presets shipped with the package."""
    if name not in PRESET_NAMES:
        raise UsageError(f"unknown model preset {name!r}; known: {', '.join(PRESET_NAMES)}")
    resource = resources.files("bench.models") / "configs" / f"{name}.json"
    return parse_config(_json(resource.read_text(encoding="utf-8"), f"bench/models/configs/{name}.json"),
                        f"bench/models/configs/{name}.json", name)


def read_config(path: str | Path) -> ModelConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file, so not a config.json") from None
    data = _json(text, str(path))
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return parse_config(data, str(path), name)


def _json(text: str, origin: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{origin}: not valid JSON ({err})") from None


def parse_config(data: Any, origin: str = "config.json", name: str = "model") -> ModelConfig:
    """A config.json already parsed; `origin` names it in errors, `name` is used without `_name_or_path`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a JSON object, got {type(data).__name__}")
    outer, text, prefix = data, data, ""
    if data.get("text_config") is not None:
        text, prefix = data["text_config"], "text_config."
        if not isinstance(text, dict):
            raise ConfigError(f"{origin}: text_config must be a JSON object")
    model_type = text.get("model_type") or outer.get("model_type") or ""
    if not isinstance(model_type, str):
        raise ConfigError(f"{origin}: {prefix}model_type={model_type!r} is not a string")
    text, assumed = with_defaults(text, model_type)  # a hybrid family's transformers defaults, each noted
    r = Reader(text, origin, prefix)

    if text.get("is_encoder_decoder") is True or outer.get("is_encoder_decoder") is True:
        raise ConfigError(f"{origin}: is_encoder_decoder is true; encoder-decoder models are not supported (their "
                          "cross-attention cache depends on the source length)")
    if text.get("cross_attention_layers"):
        raise ConfigError(f"{origin}: {prefix}cross_attention_layers is set; models whose layers cache image "
                          "tokens by cross-attention are not supported")

    layers = r.positive("num_hidden_layers")
    n_heads = r.positive("num_attention_heads", why="without attention heads there is no attention to size")
    hidden = r.positive("hidden_size")

    n_kv = r.positive("num_key_value_heads", required=False)
    if n_kv is None and model_type == "falcon":
        n_kv = _falcon_kv_heads(r, n_heads)  # type: ignore[arg-type]
    if n_kv is None:
        other = [key for key in _OTHER_KV_KEYS if key in text]
        if other:
            raise ConfigError(f"{origin}: {prefix}num_key_value_heads is missing and {prefix}{other[0]} is set; "
                              "this way of giving KV heads is not supported (add num_key_value_heads)")
        n_kv = n_heads
    _check_heads(n_heads, n_kv, f"{origin}: ", f"{prefix}num_attention_heads", f"{prefix}num_key_value_heads")

    mla: dict[str, int | None] = {"kv_lora_rank": None, "qk_rope_head_dim": None, "v_head_dim": None}
    if text.get("kv_lora_rank") is not None:
        mla = {key: r.positive(key) for key in mla}
        head_dim = r.positive("qk_nope_head_dim") + mla["qk_rope_head_dim"]  # type: ignore[operator]
    else:
        head_dim = r.positive("head_dim", required=False)
        if head_dim is None:
            if hidden % n_heads:
                raise ConfigError(f"{origin}: {prefix}hidden_size={hidden} is not divisible by "
                                  f"{prefix}num_attention_heads={n_heads} and {prefix}head_dim is not given")
            head_dim = hidden // n_heads

    architectures = outer.get("architectures") or []
    encoder_only = model_type in ENCODER_MODEL_TYPES or (
        isinstance(architectures, list) and bool(architectures)
        and all(isinstance(a, str) and a.endswith("ForMaskedLM") for a in architectures))

    linear = None
    if model_type in FAMILIES:
        kinds, linear, notes = read_hybrid(r, layers, hidden, model_type)  # type: ignore[arg-type]
        assumed += notes
    else:
        refuse_unknown(text, model_type, f"{origin}: {prefix}")
        kinds = _layer_kinds(r, layers, model_type)  # type: ignore[assignment]
    window = r.positive("sliding_window", required=False) if "sliding" in kinds else None
    if "sliding" in kinds and window is None:
        raise ConfigError(f"{origin}: {prefix}sliding_window is missing but some layers are sliding")
    chunk = r.positive("attention_chunk_size", required=False) if "chunked" in kinds else None
    if "chunked" in kinds and chunk is None:
        raise ConfigError(f"{origin}: {prefix}attention_chunk_size is missing but some layers are chunked")
    softcap, ignored = _softcap(text, origin, prefix)
    if model_type == "falcon" and text.get("new_decoder_architecture") is True and n_kv != n_heads:
        ignored += (f"transformers' FalconAttention broadcasts K and V to all {n_heads} heads before caching them: its "
                    f"cache is {n_heads // n_kv}x this one, which counts the model's {n_kv} distinct KV heads",)
    scalar = text.get("query_pre_attn_scalar")  # Gemma-2/3 scale by scalar^-0.5: the same as D^-0.5 when equal
    if scalar is not None and scalar != head_dim:
        ignored += (f"{prefix}query_pre_attn_scalar={scalar!r} scales the scores by {scalar}^-0.5; attnbench scales "
                    f"by head_dim^-0.5 ({head_dim}^-0.5): the same work, other values",)
    alibi = model_type == "bloom" or (model_type == "falcon" and text.get("alibi") is True)

    dsa: dict[str, int | None] = {"index_topk": None, "index_n_heads": None, "index_head_dim": None}
    if text.get("index_topk") is not None:
        dsa = {key: r.positive(key) for key in dsa}

    dtype = _dtype(text, outer, origin, prefix)
    name_or_path = outer.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/\\"):
        name = name_or_path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    # the name goes into case ids: letters, digits and . _ + - only ("my model" -> "my-model")
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-") or "model"
    return ModelConfig(name, layers, hidden, n_heads, n_kv, head_dim, kinds, window, mla["kv_lora_rank"],
                       mla["qk_rope_head_dim"], mla["v_head_dim"], dtype, encoder_only, model_type,
                       str(outer.get("_source") or origin), str(outer.get("_note") or ""), chunk, softcap,
                       model_type == "gpt_oss", alibi, ignored, **dsa, linear=linear, assumed=assumed)


def _falcon_kv_heads(r: Reader, n_heads: int) -> int:
    """transformers' FalconAttention: new_decoder_architecture -> num_kv_heads (null: all heads); else multi_query
    (FalconConfig's default true) -> 1; else all heads."""
    if r.data.get("new_decoder_architecture") is True:
        return r.positive("num_kv_heads", required=False) or n_heads
    return 1 if r.data.get("multi_query", True) is not False else n_heads


def _softcap(text: dict[str, Any], origin: str, prefix: str) -> tuple[float | None, tuple[str, ...]]:
    cap = text.get("attn_logit_softcapping")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0):
        raise ConfigError(f"{origin}: {prefix}attn_logit_softcapping={cap!r} must be a positive number or null")
    ignored = ()
    if text.get("final_logit_softcapping") is not None:
        ignored = (f"{prefix}final_logit_softcapping={text['final_logit_softcapping']!r} caps the LM head's logits, "
                   "outside attention: ignored",)
    return (None if cap is None else float(cap)), ignored


def _layer_kinds(r: Reader, layers: int, model_type: str) -> tuple[LayerKind, ...]:
    text, where = r.data, f"{r.origin}: {r.prefix}"
    layer_types = text.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers:
            raise ConfigError(f"{where}layer_types must be a list of {layers} entries (one per layer)")
        unknown = sorted({str(t) for t in layer_types if t not in HF_LAYER_TYPES})
        if unknown:
            raise ConfigError(f"{where}layer_types holds {', '.join(map(repr, unknown))}; only "
                              f"{' and '.join(map(repr, HF_LAYER_TYPES))} are supported for model_type "
                              f"{model_type or 'unnamed'!r} (linear layers are read for {supported()})")
        return tuple(HF_LAYER_TYPES[t] for t in layer_types)
    if text.get("attention_chunk_size") is not None:  # Llama4TextConfig: the RoPE layers are the chunked ones
        rope = text.get("no_rope_layers")
        if rope:
            if not isinstance(rope, list) or len(rope) != layers or any(x not in (0, 1) for x in rope):
                raise ConfigError(f"{where}no_rope_layers must be a list of {layers} entries of 0 or 1")
            return tuple("chunked" if x else "full" for x in rope)
        interval = r.positive("no_rope_layer_interval", required=False) or 4
        return tuple("full" if (i + 1) % interval == 0 else "chunked" for i in range(layers))
    window = text.get("sliding_window")
    if window is None or text.get("use_sliding_window") is False:  # the config itself says no layer slides
        return ("full",) * layers
    r.positive("sliding_window")  # refuse a non-integer window before any rule uses it
    if model_type == "gemma2":
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(layers))
    if model_type in ("gemma3", "gemma3_text"):
        pattern = r.positive("sliding_window_pattern")
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers))  # type: ignore[operator]
    if model_type == "mistral":
        return ("sliding",) * layers
    if model_type in _QWEN_TYPES:
        use = text.get("use_sliding_window")
        if not isinstance(use, bool):
            raise ConfigError(f"{where}use_sliding_window={use!r} must be true or false for {model_type} "
                              "with sliding_window set")
        if not use:
            return ("full",) * layers
        full = r.positive("max_window_layers")
        return tuple("full" if i < full else "sliding" for i in range(layers))  # type: ignore[operator]
    raise ConfigError(f"{where}sliding_window={window!r} is set but which layers slide is unknown for model_type "
                      f"{model_type!r}; add layer_types (one 'full_attention' or 'sliding_attention' per layer)")


def _dtype(text: dict[str, Any], outer: dict[str, Any], origin: str, prefix: str) -> str:
    for config, where in ((text, prefix), (outer, "")):
        for key in ("torch_dtype", "dtype"):
            value = config.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or value not in CONFIG_DTYPES:
                raise ConfigError(f"{origin}: {where}{key}={value!r} is not one of {', '.join(CONFIG_DTYPES)}")
            return CONFIG_DTYPES[value]
    return DEFAULT_DTYPE


