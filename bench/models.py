"""Model configs: a HuggingFace-style config.json read into the attention facts that size a KV cache.

`load_config(path_or_preset_name)` reads a local config.json (never the network) -- a file, a folder holding
config.json, or the name of a preset shipped in bench/model_configs/ -- into a frozen `ModelConfig`. The nine
presets are such files, read by the same code. Pure Python: nothing here imports torch.

The rules, each applied as written (the README's "KV cache calculator" section states them too):

- Text model. A config with a `text_config` object (multimodal models: Gemma-3, LLaVA, ...) is read from it;
  the name, and the dtype when text_config has none, come from the outer config. Fields are then named
  `text_config.<field>` in errors.
- Sizes. `num_hidden_layers`, `num_attention_heads` and `hidden_size` are required positive integers; GPT-2-style
  names (`n_layer`, `n_head`, `n_embd`) stand in for them when the HF names are absent, as transformers maps them.
  A config without `num_attention_heads` (a state-space model, say) has no attention to size and is refused.
- KV heads. `num_key_value_heads`; absent or null means MHA (= num_attention_heads), as in transformers. It must
  divide num_attention_heads. A config naming its KV heads another way (`num_kv_heads`, `n_head_kv`, `n_kv_heads`,
  `multi_query`, `multi_query_group_num`: Falcon, ChatGLM, ...) and not num_key_value_heads is refused, since
  reading it as MHA would be silently wrong.
- Head dim. `head_dim` when given and not null (Qwen3-4B: hidden 2560, 32 heads, head_dim 128; Gemma: 256),
  else hidden_size / num_attention_heads, which must divide.
- MLA (DeepSeek-V2/V3, any config with a non-null `kv_lora_rank`): each layer caches one latent of
  kv_lora_rank + qk_rope_head_dim elements per token, shared by all heads -- no factor 2 for K and V, no heads.
  `qk_rope_head_dim`, `qk_nope_head_dim` and `v_head_dim` are required; head_dim is then
  qk_nope_head_dim + qk_rope_head_dim (the query/key dim of a decompressed head; any `head_dim` key is ignored).
- Layer kinds. One entry per layer, "full" or "sliding":
  `layer_types` when present (HF's "full_attention" / "sliding_attention"; any other value is refused);
  else all full when `sliding_window` is absent or null;
  else the family's known rule, by `model_type`:
    gemma2: layers alternate sliding, full, starting with sliding on layer 0;
    gemma3 / gemma3_text: layer i is full when (i + 1) % sliding_window_pattern == 0, sliding otherwise;
    mistral: every layer slides (Mistral-7B-v0.1; later versions set sliding_window to null);
    qwen2 / qwen2_moe / qwen3 / qwen3_moe: `use_sliding_window` false -> all full; true -> layers
      0 .. max_window_layers - 1 full and the rest sliding (transformers' Qwen2Config);
  anything else with a non-null sliding_window is refused, naming `layer_types` (give it to say which layers slide).
- Window. `sliding_window`, kept only when some layer slides; only sliding layers are capped at it: a layer caches
  min(context, window) tokens, a full layer all of them.
- dtype (the default element type). `torch_dtype`, else `dtype` (newer transformers), of the text config then of
  the outer one: bfloat16 -> bf16, float16 -> fp16, float32 -> fp32; absent -> bf16; any other value is refused.
- Encoder-only (no decoding, so no KV cache): `model_type` bert, roberta, xlm-roberta, electra, deberta,
  deberta-v2 or modernbert, or every entry of `architectures` ending in ForMaskedLM.
- Refused as well, each naming its field: `is_encoder_decoder` true (the cross-attention cache depends on the
  source length), a non-empty `cross_attention_layers` (Llama-3.2-Vision: those layers cache image tokens), a
  non-null `attention_chunk_size` (Llama-4's chunked layers cap their cache differently).
- Name. The last part of `_name_or_path` when given, else the file's stem, or its folder's name for a file called
  config.json. `_source` and `_note` (our keys, for models without an HF config) give where the facts come from.

Every refusal is a `ConfigError` (a bench.errors.InputError, so `python -m bench` prints one line and exits 2)
naming the file and the field; a number is never guessed.

KV bytes. A layer group is the layers of one kind. Per token and sequence, a group caches
2 (K and V) x layers x Hkv x head_dim x element size, or layers x (kv_lora_rank + qk_rope_head_dim) x element size
under MLA; at a context it holds min(context, window) tokens when sliding, all of them when full. Encoder-only
models cache nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NamedTuple

from bench.errors import InputError, UsageError

LayerKind = Literal["full", "sliding"]
LAYER_KINDS: tuple[LayerKind, ...] = ("full", "sliding")

# Bytes per element of a cache dtype; equal to bench.metrics.ELEMENT_BYTES (a test keeps them in step), repeated
# here so that reading configs needs no torch.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
CONFIG_DTYPES: dict[str, str] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
DEFAULT_DTYPE = "bf16"

# The presets shipped as bench/model_configs/<name>.json, in the order they are listed to users.
PRESET_NAMES: tuple[str, ...] = ("transformer-base", "bert-base", "gpt2", "qwen2.5-0.5b", "llama-2-7b",
                                 "llama-2-70b", "llama-3-8b", "mistral-7b-v0.1", "gpt-3-175b")

ENCODER_MODEL_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "electra", "deberta", "deberta-v2", "modernbert"})
HF_LAYER_TYPES: dict[str, LayerKind] = {"full_attention": "full", "sliding_attention": "sliding"}
_ALIASES = {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "hidden_size": "n_embd"}
_OTHER_KV_KEYS = ("num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query", "multi_query_group_num")
_QWEN_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})


class ConfigError(InputError):
    """A config.json that cannot be read correctly; the one-line message names the file and the field."""


# ------------------------------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class ModelConfig:
    """The attention facts of one model. Built by `load_config`, or by `from_geometry` for a hand-given geometry
    (then hidden_size is None, and n_heads may be None: the variant is unknown)."""

    name: str
    layers: int  # num_hidden_layers: every layer holds a cache when decoding
    hidden_size: int | None
    n_heads: int | None  # query heads
    n_kv_heads: int  # K/V heads (MLA: the config's num_key_value_heads, those of a decompressed head)
    head_dim: int  # MLA: qk_nope_head_dim + qk_rope_head_dim
    layer_kinds: tuple[LayerKind, ...] = ()  # one per layer; empty: all "full"
    window: int | None = None  # sliding_window; set iff some layer slides
    kv_lora_rank: int | None = None  # MLA: the compressed K/V latent
    qk_rope_head_dim: int | None = None  # MLA: the decoupled rotary key, cached next to the latent
    v_head_dim: int | None = None  # MLA: value head dim of a decompressed head
    dtype: str = DEFAULT_DTYPE
    encoder_only: bool = False
    model_type: str = ""
    source: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if not self.layer_kinds and isinstance(self.layers, int):
            object.__setattr__(self, "layer_kinds", ("full",) * self.layers)
        for name in ("layers", "n_kv_heads", "head_dim", "hidden_size", "n_heads", "window", "kv_lora_rank",
                     "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ConfigError(f"{self.name}: {name}={value!r} must be a positive integer")
        if self.n_heads is not None:
            _check_heads(self.n_heads, self.n_kv_heads, f"{self.name}: ", "n_heads", "n_kv_heads")
        if len(self.layer_kinds) != self.layers or not set(self.layer_kinds) <= set(LAYER_KINDS):
            raise ConfigError(f"{self.name}: layer_kinds must hold {self.layers} entries of 'full' or 'sliding'")
        if ("sliding" in self.layer_kinds) != (self.window is not None):
            raise ConfigError(f"{self.name}: window must be set exactly when some layer is sliding")
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ConfigError(f"{self.name}: MLA needs both kv_lora_rank and qk_rope_head_dim")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError(f"{self.name}: dtype {self.dtype!r} is not one of {', '.join(DTYPE_BYTES)}")

    @classmethod
    def from_geometry(cls, name: str, layers: int, n_kv_heads: int, head_dim: int, n_heads: int | None = None,
                      window: int | None = None) -> ModelConfig:
        """A uniform model given by hand: every layer full, or every layer sliding when a window is given."""
        kinds: tuple[LayerKind, ...] = ("sliding" if window is not None else "full",) * layers
        return cls(name, layers, None, n_heads, n_kv_heads, head_dim, kinds, window)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def kv_latent_dim(self) -> int | None:
        """MLA: elements cached per token and layer (kv_lora_rank + qk_rope_head_dim); None otherwise."""
        return None if self.kv_lora_rank is None else self.kv_lora_rank + self.qk_rope_head_dim  # type: ignore[operator]

    @property
    def full_layers(self) -> int:
        return self.layer_kinds.count("full")

    @property
    def sliding_layers(self) -> int:
        return self.layer_kinds.count("sliding")

    @property
    def variant(self) -> str | None:
        """mha / gqa / mqa by Hkv against Hq; "mla" for a latent cache; None when Hq is unknown."""
        if self.is_mla:
            return "mla"
        if self.n_heads is None:
            return None
        if self.n_kv_heads == self.n_heads:
            return "mha"
        return "mqa" if self.n_kv_heads == 1 else "gqa"

    def as_variant(self, variant: str) -> ModelConfig:
        """The same model with MHA (Hkv = Hq), MQA (Hkv = 1) or its own GQA grouping."""
        if self.is_mla:
            raise ConfigError(f"{self.name} uses MLA (one latent shared by all heads): MHA / GQA / MQA do not apply")
        if self.n_heads is None:
            raise ConfigError(f"{self.name}: the number of query heads is unknown, so {variant} is undefined")
        if variant == "mha":
            return replace(self, n_kv_heads=self.n_heads)
        if variant == "mqa":
            return replace(self, n_kv_heads=1)
        if variant == "gqa" and self.variant == "gqa":
            return self
        raise ConfigError(f"{self.name} is {self.variant}: it has no GQA grouping of its own; expected mha or mqa")

    def variants(self) -> list[str]:
        """MHA, the model's own GQA if it has one, MQA; empty when Hq is unknown or under MLA (nothing to compare)."""
        if self.n_heads is None or self.is_mla:
            return []
        own = [self.variant] if self.variant == "gqa" else []
        return ["mha", *own, "mqa"] if self.n_heads > 1 else ["mha"]  # Hq = 1: MHA and MQA coincide

    def first_layers(self, n: int) -> ModelConfig:
        """The model cut to its first n layers (with their kinds): small caches that keep the model's layout."""
        kinds = self.layer_kinds[:n]
        return replace(self, layers=n, layer_kinds=kinds, window=self.window if "sliding" in kinds else None)


def _check_heads(n_heads: int, n_kv_heads: int, where: str, heads: str, kv_heads: str) -> None:
    if n_kv_heads > n_heads:
        raise ConfigError(f"{where}{kv_heads}={n_kv_heads} exceeds {heads}={n_heads}")
    if n_heads % n_kv_heads:
        raise ConfigError(f"{where}{heads}={n_heads} is not divisible by {kv_heads}={n_kv_heads}")


# --------------------------------------------------------------------------------------------- KV arithmetic

@dataclass(frozen=True)
class KVLayerGroup:
    """The layers of one kind and what each token of one sequence costs in their cache."""

    kind: LayerKind
    layers: int
    n_kv_heads: int | None  # None under MLA
    head_dim: int | None  # None under MLA
    latent_dim: int | None  # MLA: kv_lora_rank + qk_rope_head_dim; None otherwise
    window: int | None  # sliding layers: the most tokens they hold
    bytes_per_token: int  # one token of one sequence, all layers of the group (K and V, or the latent)

    def cached_tokens(self, context: int) -> int:
        return context if self.window is None else min(context, self.window)

    def total_bytes(self, context: int, batch: int = 1) -> int:
        return self.bytes_per_token * self.cached_tokens(context) * batch

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "layers": self.layers, "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim,
                "latent_dim": self.latent_dim, "window": self.window, "bytes_per_token": self.bytes_per_token}


def element_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise InputError(f"dtype {dtype!r} is unknown; expected one of {', '.join(DTYPE_BYTES)}") from None


def kv_layer_groups(cfg: ModelConfig, dtype: str | None = None) -> list[KVLayerGroup]:
    """One group per layer kind present, full first; empty for an encoder-only model (no cache)."""
    if cfg.encoder_only:
        return []
    e = element_bytes(dtype or cfg.dtype)
    groups = []
    for kind in LAYER_KINDS:
        n = cfg.layer_kinds.count(kind)
        if not n:
            continue
        window = cfg.window if kind == "sliding" else None
        if cfg.is_mla:
            latent = cfg.kv_latent_dim
            groups.append(KVLayerGroup(kind, n, None, None, latent, window, n * latent * e))  # type: ignore[operator]
        else:
            groups.append(KVLayerGroup(kind, n, cfg.n_kv_heads, cfg.head_dim, None, window,
                                       2 * n * cfg.n_kv_heads * cfg.head_dim * e))
    return groups


def kv_bytes_per_token(cfg: ModelConfig, dtype: str | None = None) -> int:
    """Cache bytes of one token of one sequence in every layer (while the context is within any window)."""
    return sum(g.bytes_per_token for g in kv_layer_groups(cfg, dtype))


def kv_total_bytes(cfg: ModelConfig, context: int, batch: int = 1, dtype: str | None = None) -> int:
    """Cache bytes at context x batch: full layers hold the context, sliding ones min(context, window)."""
    return sum(g.total_bytes(context, batch) for g in kv_layer_groups(cfg, dtype))


def kv_cached_tokens(cfg: ModelConfig, context: int) -> int:
    """The most tokens any layer holds at this context (0 without a cache)."""
    return max((g.cached_tokens(context) for g in kv_layer_groups(cfg)), default=0)


# -------------------------------------------------------------------------------------------- attention kinds

class AttentionKind(NamedTuple):
    """One distinct attention of a model: its layer kind, how many layers have it, and its shape."""

    kind: LayerKind
    layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    window: int | None


def attention_shapes(cfg: ModelConfig) -> list[AttentionKind]:
    """One entry per layer kind present (full first). MLA is given in its prefill form, K and V decompressed
    per head: Hkv = num_key_value_heads, head_dim = qk_nope_head_dim + qk_rope_head_dim (v_head_dim, which may
    differ, is not represented)."""
    if cfg.n_heads is None:
        raise ConfigError(f"{cfg.name}: the number of query heads is unknown, so its attention shape is too")
    return [AttentionKind(kind, cfg.layer_kinds.count(kind), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                          cfg.window if kind == "sliding" else None)
            for kind in LAYER_KINDS if kind in cfg.layer_kinds]


# ------------------------------------------------------------------------------------------------- reading

def load_config(source: str | Path) -> ModelConfig:
    """A config.json file, a folder holding one, or a preset name (bench/model_configs/<name>.json)."""
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
    resource = resources.files("bench") / "model_configs" / f"{name}.json"
    return parse_config(_json(resource.read_text(encoding="utf-8"), f"bench/model_configs/{name}.json"),
                        f"bench/model_configs/{name}.json", name)


def read_config(path: str | Path) -> ModelConfig:
    path = Path(path)
    data = _json(path.read_text(encoding="utf-8"), str(path))
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
    r = _Reader(text, origin, prefix)

    if text.get("is_encoder_decoder") is True or outer.get("is_encoder_decoder") is True:
        raise ConfigError(f"{origin}: is_encoder_decoder is true; encoder-decoder models are not supported (their "
                          "cross-attention cache depends on the source length)")
    if text.get("cross_attention_layers"):
        raise ConfigError(f"{origin}: {prefix}cross_attention_layers is set; models whose layers cache image "
                          "tokens by cross-attention are not supported")
    if text.get("attention_chunk_size") is not None:
        raise ConfigError(f"{origin}: {prefix}attention_chunk_size is set; chunked-attention layers are not "
                          "supported")

    layers = r.positive("num_hidden_layers")
    n_heads = r.positive("num_attention_heads", why="without attention heads there is no attention to size")
    hidden = r.positive("hidden_size")
    model_type = text.get("model_type") or outer.get("model_type") or ""
    if not isinstance(model_type, str):
        raise ConfigError(f"{origin}: {prefix}model_type={model_type!r} is not a string")

    n_kv = r.positive("num_key_value_heads", required=False)
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

    kinds = _layer_kinds(r, layers, model_type)
    window = r.positive("sliding_window", required=False) if "sliding" in kinds else None
    if "sliding" in kinds and window is None:
        raise ConfigError(f"{origin}: {prefix}sliding_window is missing but some layers are sliding")

    dtype = _dtype(text, outer, origin, prefix)
    name_or_path = outer.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/\\"):
        name = name_or_path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return ModelConfig(name, layers, hidden, n_heads, n_kv, head_dim, kinds, window, mla["kv_lora_rank"],
                       mla["qk_rope_head_dim"], mla["v_head_dim"], dtype, encoder_only, model_type,
                       str(outer.get("_source") or origin), str(outer.get("_note") or ""))


class _Reader:
    """Integer fields of the (text) config, refused with one line naming the field."""

    def __init__(self, data: dict[str, Any], origin: str, prefix: str):
        self.data, self.origin, self.prefix = data, origin, prefix

    def positive(self, key: str, required: bool = True, why: str = "") -> int | None:  # type: ignore[return]
        used = key
        value = self.data.get(key)
        if value is None and key in _ALIASES and self.data.get(_ALIASES[key]) is not None:
            used, value = _ALIASES[key], self.data[_ALIASES[key]]
        if value is None:
            if not required:
                return None
            raise ConfigError(f"{self.origin}: {self.prefix}{key} is missing" + (f"; {why}" if why else ""))
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{self.origin}: {self.prefix}{used}={value!r} is not an integer")
        if value <= 0:
            raise ConfigError(f"{self.origin}: {self.prefix}{used}={value!r} must be positive")
        return value


def _layer_kinds(r: _Reader, layers: int, model_type: str) -> tuple[LayerKind, ...]:
    text, where = r.data, f"{r.origin}: {r.prefix}"
    layer_types = text.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers:
            raise ConfigError(f"{where}layer_types must be a list of {layers} entries (one per layer)")
        unknown = sorted({str(t) for t in layer_types if t not in HF_LAYER_TYPES})
        if unknown:
            raise ConfigError(f"{where}layer_types holds {', '.join(map(repr, unknown))}; only "
                              f"{' and '.join(map(repr, HF_LAYER_TYPES))} are supported")
        return tuple(HF_LAYER_TYPES[t] for t in layer_types)
    window = text.get("sliding_window")
    if window is None:
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


def model_facts(cfg: ModelConfig, dtypes: tuple[str, ...]) -> dict:
    """What a run records of a model it sweeps (RunMeta.models), so reports need no config file: its layers per
    attention kind, window, and KV bytes per token of all layers of each kind, per dtype of the sweep."""
    kv: dict[str, dict[str, int]] = {}
    for dtype in dtypes:
        per_kind: dict[str, int] = {}
        for group in kv_layer_groups(cfg, dtype):
            per_kind[group.kind] = per_kind.get(group.kind, 0) + group.bytes_per_token
        kv[dtype] = per_kind
    return {"layers": {"full": cfg.full_layers, "sliding": cfg.sliding_layers}, "window": cfg.window,
            "encoder_only": cfg.encoder_only, "source": cfg.source, "kv_bytes_per_token": kv}
