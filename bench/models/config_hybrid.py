"""A hybrid config.json's layer kinds and its linear layers' state, read as transformers' config class of its family
reads them (config_json's docstring, "Linear layers", states the rules; bench.models.linear the state's shapes).

Each family names its linear layers its own way; transformers' defaults stand in for the fields a config.json may
leave out, and each one taken is noted in the model's `assumed`. Every other sign of non-attention layers (a known
hybrid or state-space model_type, a field only such models have, a layer kind no family here has) is refused by
name, so that a hybrid is never read as a model whose every layer is attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.models.config import ConfigError, LayerKind
from bench.models.linear import LinearKind, LinearState

HF_LAYER_TYPES: dict[str, LayerKind] = {"full_attention": "full", "sliding_attention": "sliding",
                                        "chunked_attention": "chunked"}
# transformers renames these for every config as it reads it (configuration_utils' _LEGACY_LAYER_TYPE_REMAP)
LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention"}


# GPT-2's names of three integer fields, read where a config.json lacks the usual name
_ALIASES = {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "hidden_size": "n_embd"}


class Reader:
    """Integer fields of the (text) config, refused with one line naming the field: config_json reads a config.json
    through it, read_hybrid a hybrid's linear fields."""

    def __init__(self, data: dict[str, Any], origin: str, prefix: str) -> None:
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


@dataclass(frozen=True)
class Family:
    """A hybrid family: its linear kind, transformers' config class, and that class's defaults for the fields a
    config.json may omit (attention ones are filled in before the attention is read)."""

    kind: LinearKind
    config_class: str
    attention_defaults: dict[str, int]
    linear_defaults: dict[str, Any]


_DELTANET = {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
             "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4}
_MAMBA2 = {"mamba_n_heads": 128, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
           "mamba_expand": 2}
FAMILIES: dict[str, Family] = {
    "qwen3_next": Family("deltanet", "Qwen3NextConfig", {"num_key_value_heads": 2, "head_dim": 256}, _DELTANET),
    # Qwen3.5 keeps Qwen3-Next's gated DeltaNet; its text config is qwen3_5_text (the outer one names qwen3_5)
    "qwen3_5_text": Family("deltanet", "Qwen3_5TextConfig", {"num_key_value_heads": 4, "head_dim": 256}, _DELTANET),
    "qwen3_5_moe_text": Family("deltanet", "Qwen3_5MoeTextConfig", {"num_key_value_heads": 2, "head_dim": 256},
                               _DELTANET),
    "kimi_linear": Family("kda", "KimiLinearConfig",
                          {"num_key_value_heads": 32, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                           "qk_nope_head_dim": 128, "v_head_dim": 128},
                          {"linear_num_heads": 32, "linear_head_dim": 128, "linear_conv_kernel_dim": 4}),
    "bamba": Family("mamba2", "BambaConfig", {"num_key_value_heads": 8}, _MAMBA2),
    "granitemoehybrid": Family("mamba2", "GraniteMoeHybridConfig", {}, _MAMBA2),
    "jamba": Family("mamba", "JambaConfig", {"num_key_value_heads": 8},
                    {"attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4,
                     "mamba_expand": 2}),
}
FAMILIES["qwen3_5"], FAMILIES["qwen3_5_moe"] = FAMILIES["qwen3_5_text"], FAMILIES["qwen3_5_moe_text"]

# transformers' model types with recurrent, convolutional or linear-attention layers not sized here
OTHER_HYBRIDS = frozenset({
    "bailing_hybrid", "falcon_h1", "falcon_mamba", "glm5_next", "inkling", "inkling2", "inkling2_loop", "lara_mini",
    "lfm2", "lfm2_moe", "lfm3", "mamba", "mamba2", "minimax", "nemotron_h", "olmo_hybrid", "qwen4_exp",
    "recurrent_gemma", "rwkv", "xlstm", "zamba", "zamba2", "zaya"})
# fields only configs with such layers have
HYBRID_FIELDS = ("layers_block_type", "hybrid_override_pattern", "attn_layer_indices", "attn_layer_period",
                 "attn_layer_offset", "full_attention_interval", "linear_attn_config", "full_attn_idxs", "block_types",
                 "mamba_d_state", "ssm_state_size", "linear_num_value_heads", "linear_num_heads",
                 "linear_conv_kernel_dim")


def supported() -> str:
    return ", ".join(sorted(FAMILIES))


def with_defaults(text: dict[str, Any], model_type: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The text config with its family's attention defaults for the fields it leaves out, and a note for each."""
    family = FAMILIES.get(model_type)
    if family is None:
        return text, ()
    missing = {key: value for key, value in family.attention_defaults.items() if key not in text}
    return {**text, **missing}, tuple(_note(key, value, family) for key, value in missing.items())


def refuse_unknown(text: dict[str, Any], model_type: str, where: str) -> None:
    """Refuse a config that has non-attention layers of a family not read here."""
    if model_type in OTHER_HYBRIDS:
        raise ConfigError(f"{where}model_type {model_type!r} has recurrent or linear-attention layers that attnbench "
                          f"does not size; the hybrids it reads: {supported()}")
    field = next((key for key in HYBRID_FIELDS if text.get(key) is not None), None)
    if field is not None:
        raise ConfigError(f"{where}{field} is set: a field of models with linear or state-space layers, which "
                          f"attnbench reads for model_type {supported()}, not {model_type or 'an unnamed one'!r}")


def read_hybrid(r: Reader, layers: int, hidden: int, model_type: str) \
        -> tuple[tuple[LayerKind | LinearKind, ...], LinearState | None, tuple[str, ...]]:
    """A hybrid family's layer kinds (one per layer), its linear layers' state (None when no layer is linear) and
    the notes of the defaults taken."""
    family = FAMILIES[model_type]
    read = _Fields(r, family)
    if family.kind == "deltanet":
        kinds = _deltanet_kinds(read, layers)
        k_heads, v_heads = read.int("linear_num_key_heads"), read.int("linear_num_value_heads")
        if v_heads % k_heads:
            raise ConfigError(f"{read.where}linear_num_value_heads={v_heads} is not a multiple of "
                              f"linear_num_key_heads={k_heads} (each key head serves a whole group of value heads)")
        d_k, d_v, kernel = (read.int(key) for key in ("linear_key_head_dim", "linear_value_head_dim",
                                                       "linear_conv_kernel_dim"))
        state = LinearState("deltanet", (v_heads, d_k, d_v), 2 * k_heads * d_k + v_heads * d_v, kernel,
                            (("linear_num_key_heads", k_heads), ("linear_num_value_heads", v_heads),
                             ("linear_key_head_dim", d_k), ("linear_value_head_dim", d_v),
                             ("linear_conv_kernel_dim", kernel)))
    elif family.kind == "kda":
        kinds = _kimi_kinds(read, layers)
        heads, dim = read.kimi("num_heads", "linear_num_heads"), read.kimi("head_dim", "linear_head_dim")
        kernel = read.kimi("short_conv_kernel_size", "linear_conv_kernel_dim")
        state = LinearState("kda", (heads, dim, dim), 3 * heads * dim, kernel,
                            (("linear_num_heads", heads), ("linear_head_dim", dim), ("linear_conv_kernel_dim", kernel)))
    elif family.kind == "mamba2":
        kinds = _mamba2_kinds(read, layers, model_type)
        heads, d_state, groups, expand = (read.int(key) for key in ("mamba_n_heads", "mamba_d_state",
                                                                    "mamba_n_groups", "mamba_expand"))
        inner = expand * hidden
        d_head = read.int("mamba_d_head", auto=inner // heads)
        if d_head * heads != inner:  # transformers' validate_architecture
            raise ConfigError(f"{read.where}mamba_d_head={d_head} x mamba_n_heads={heads} must equal mamba_expand x "
                              f"hidden_size = {inner}")
        kernel = read.int("mamba_d_conv")
        state = LinearState("mamba2", (heads, d_head, d_state), inner + 2 * groups * d_state, kernel,
                            (("mamba_n_heads", heads), ("mamba_d_head", d_head), ("mamba_n_groups", groups),
                             ("mamba_d_state", d_state), ("mamba_d_conv", kernel), ("mamba_expand", expand)))
    else:
        period, offset = read.int("attn_layer_period"), read.int("attn_layer_offset", zero=True)
        if offset >= period:
            raise ConfigError(f"{read.where}attn_layer_offset={offset} must be smaller than attn_layer_period={period}")
        kinds = tuple("full" if i % period == offset else "mamba" for i in range(layers))
        expand, d_state, kernel = (read.int(key) for key in ("mamba_expand", "mamba_d_state", "mamba_d_conv"))
        state = LinearState("mamba", (expand * hidden, d_state), expand * hidden, kernel,
                            (("mamba_expand", expand), ("mamba_d_state", d_state), ("mamba_d_conv", kernel)))
    if state.conv_kernel < 2:
        raise ConfigError(f"{read.where}the {state.name} layers' convolution kernel must be at least 2")
    return kinds, state if family.kind in kinds else None, tuple(read.notes)


class _Fields:
    """A family's linear fields: present (a positive integer) or absent (the family's default, noted)."""

    def __init__(self, r: Reader, family: Family):
        self.r, self.family, self.where, self.notes = r, family, f"{r.origin}: {r.prefix}", []

    def present(self, key: str) -> bool:
        return self.r.data.get(key) is not None

    def int(self, key: str, auto: int | None = None, zero: bool = False) -> int:
        if key not in self.r.data:
            value = self.family.linear_defaults[key]
            resolved = f": mamba_expand x hidden_size / mamba_n_heads = {auto}" if value == "auto" else ""
            self.notes.append(_note(key, value, self.family) + resolved)
            return auto if value == "auto" else value  # type: ignore[return-value]
        value = self.r.data[key]
        if value == "auto" and auto is not None:
            return auto
        return _positive(value, f"{self.where}{key}", zero)

    def kimi(self, inner: str, key: str) -> int:
        """KimiLinearConfig: linear_attn_config's value when given, else the top-level field (or its default)."""
        block = self.r.data.get("linear_attn_config") or {}
        if not isinstance(block, dict):
            raise ConfigError(f"{self.where}linear_attn_config must be a JSON object")
        if inner in block:
            return _positive(block[inner], f"{self.where}linear_attn_config.{inner}")
        return self.int(key)

    def layer_types(self, layers: int, linear: LinearKind, allowed: tuple[str, ...]) \
            -> tuple[LayerKind | LinearKind, ...] | None:
        """`layer_types` (or its alias layers_block_type) as this family's kinds; None when absent."""
        key = "layer_types" if self.present("layer_types") else "layers_block_type"
        types = self.r.data.get(key)
        if types is None:
            return None
        if not isinstance(types, list) or len(types) != layers:
            raise ConfigError(f"{self.where}{key} must be a list of {layers} entries (one per layer)")
        names = [LEGACY_LAYER_TYPES.get(t, t) if isinstance(t, str) else t for t in types]
        unknown = sorted({repr(t) for t, name in zip(types, names, strict=True) if name not in allowed})
        if unknown:
            raise ConfigError(f"{self.where}{key} holds {', '.join(unknown)}: not a layer kind of "
                              f"{self.family.config_class}, whose layers are {' or '.join(map(repr, allowed))}")
        return tuple(linear if name == "linear_attention" else HF_LAYER_TYPES[name] for name in names)


def _positive(value: Any, name: str, zero: bool = False) -> int:
    if value is None:
        raise ConfigError(f"{name} is null; give it as a number (it shapes the linear layers' state)")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not an integer")
    if value < 0 or (value == 0 and not zero):
        raise ConfigError(f"{name}={value!r} must be {'non-negative' if zero else 'positive'}")
    return value


def _note(key: str, value: Any, family: Family) -> str:
    return f"{key} not given: {family.config_class}'s default {value!r} taken, as transformers does"


def _deltanet_kinds(read: _Fields, layers: int) -> tuple[LayerKind | LinearKind, ...]:
    """Qwen3NextConfig / Qwen3_5TextConfig: layer_types, else linear unless (i + 1) % full_attention_interval == 0."""
    kinds = read.layer_types(layers, "deltanet", ("linear_attention", "full_attention"))
    if kinds is not None:
        return kinds
    interval = read.int("full_attention_interval")
    return tuple("full" if (i + 1) % interval == 0 else "deltanet" for i in range(layers))


def _kimi_kinds(read: _Fields, layers: int) -> tuple[LayerKind | LinearKind, ...]:
    """KimiLinearConfig: layer_types, else linear_attn_config's 1-based full_attn_layers and kda_layers, else full
    on layers i > 0 with i % 4 == 0."""
    kinds = read.layer_types(layers, "kda", ("linear_attention", "full_attention"))
    if kinds is not None:
        return kinds
    block = read.r.data.get("linear_attn_config") or {}
    if not isinstance(block, dict):
        raise ConfigError(f"{read.where}linear_attn_config must be a JSON object")
    if "full_attn_layers" in block and "kda_layers" in block:
        found: dict[int, LayerKind | LinearKind] = {}
        for key, kind in (("full_attn_layers", "full"), ("kda_layers", "kda")):
            numbers = block[key]
            if not isinstance(numbers, list) or any(isinstance(n, bool) or not isinstance(n, int) for n in numbers):
                raise ConfigError(f"{read.where}linear_attn_config.{key} must be a list of layer numbers")
            for n in numbers:
                if not 1 <= n <= layers or n in found:
                    raise ConfigError(f"{read.where}linear_attn_config.{key} holds {n}: layers are numbered 1 to "
                                      f"{layers}, each in full_attn_layers or kda_layers once")
                found[n] = kind  # type: ignore[assignment]
        if len(found) != layers:
            missing = [n for n in range(1, layers + 1) if n not in found]
            raise ConfigError(f"{read.where}linear_attn_config names no kind for layers {missing} (1-based)")
        return tuple(found[n] for n in range(1, layers + 1))
    return tuple("full" if i and i % 4 == 0 else "kda" for i in range(layers))


def _mamba2_kinds(read: _Fields, layers: int, model_type: str) -> tuple[LayerKind | LinearKind, ...]:
    """BambaConfig: full on the 0-based attn_layer_indices, Mamba-2 elsewhere (every layer without them);
    GraniteMoeHybridConfig: layer_types, every layer Mamba-2 without it."""
    if model_type == "granitemoehybrid":
        kinds = read.layer_types(layers, "mamba2", ("linear_attention", "full_attention"))
        return kinds if kinds is not None else ("mamba2",) * layers
    indices = read.r.data.get("attn_layer_indices") or []
    if not isinstance(indices, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                            for i in indices):
        raise ConfigError(f"{read.where}attn_layer_indices must list layer numbers from 0 to {layers - 1}")
    return tuple("full" if i in indices else "mamba2" for i in range(layers))
