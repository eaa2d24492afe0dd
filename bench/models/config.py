"""Model configs: the attention facts of a model (ModelConfig) and the KV cache they size.

A ModelConfig is read from a HuggingFace-style config.json, or a preset shipped in bench/models/configs/, by
bench.models.config_json (whose docstring states every rule of reading one). Pure Python: nothing here imports torch.

KV bytes. A layer group is the layers of one kind. Per token and sequence, a group caches
layers x Hkv x (head_dim + v_head_dim) x element size (2 x layers x Hkv x head_dim when V is as wide as K, as in
every non-MLA model), or layers x (kv_lora_rank + qk_rope_head_dim) x element size under MLA; a model with a top-K
indexer (DeepSeek-V3.2's sparse attention, DSA) caches its index key beside them, layers x index_head_dim x element
size more; at a context it holds min(context, window) tokens when sliding, all of them when full. Encoder-only models
cache nothing.

Hybrid models. A linear layer (gated DeltaNet, Kimi Delta Attention, Mamba-2, Mamba: bench.models.linear) caches no
K or V: it keeps a fixed state per sequence, counted apart from the KV bytes (`linear_state_group`). A model's layers
hold one linear kind at most; `all_attention` is the same model with each linear layer made a full attention layer of
the model's own attention geometry, the cache a hybrid is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

from bench.errors import InputError
from bench.models.linear import LINEAR_KINDS, STATE_DTYPE, LinearKind, LinearState, StateGroup

# chunked: Llama-4's chunked local attention; its cache holds min(context, chunk) tokens, like a window of the chunk
LayerKind = Literal["full", "sliding", "chunked"]
LAYER_KINDS: tuple[LayerKind, ...] = ("full", "sliding", "chunked")

# Bytes per element of a cache dtype; equal to bench.counts.metrics.ELEMENT_BYTES (a test keeps them in step), repeated
# here so that reading configs needs no torch.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
DEFAULT_DTYPE = "bf16"

class ConfigError(InputError):
    """A config.json that cannot be read correctly; the one-line message names the file and the field."""


# ------------------------------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class ModelConfig:
    """The attention facts of one model. Built by `load_config`, or by `from_geometry` for a hand-given geometry
    (then hidden_size is None, and n_heads may be None: the variant is unknown)."""

    name: str
    layers: int  # num_hidden_layers: every layer holds a cache when decoding (a linear layer: a fixed state)
    hidden_size: int | None
    n_heads: int | None  # query heads
    n_kv_heads: int  # K/V heads (MLA: the config's num_key_value_heads, those of a decompressed head)
    head_dim: int  # MLA: qk_nope_head_dim + qk_rope_head_dim
    layer_kinds: tuple[LayerKind | LinearKind, ...] = ()  # one per layer; empty: all "full"
    window: int | None = None  # sliding_window; set iff some layer slides
    kv_lora_rank: int | None = None  # MLA: the compressed K/V latent
    qk_rope_head_dim: int | None = None  # MLA: the decoupled rotary key, cached next to the latent
    v_head_dim: int | None = None  # MLA: value head dim of a decompressed head
    dtype: str = DEFAULT_DTYPE
    encoder_only: bool = False
    model_type: str = ""
    source: str = ""
    note: str = ""
    chunk: int | None = None  # attention_chunk_size; set iff some layer is chunked
    softcap: float | None = None  # attn_logit_softcapping (Gemma-2), on every layer's scores
    sinks: bool = False  # one learned sink logit per query head on every layer (gpt-oss)
    alibi: bool = False  # ALiBi on every layer (BLOOM; Falcon with alibi true)
    ignored: tuple[str, ...] = ()  # fields read and deliberately left out, each with why
    # DSA (DeepSeek-V3.2): each query attends to the index_topk keys its indexer (index_n_heads x index_head_dim)
    # scores highest; every layer caches one index key of index_head_dim per token. All three or none.
    index_topk: int | None = None
    index_n_heads: int | None = None
    index_head_dim: int | None = None
    linear: LinearState | None = None  # what each linear layer keeps; set iff some layer is linear (of its kind)
    assumed: tuple[str, ...] = ()  # fields the config left out, taken at transformers' default, each saying so

    @property
    def score(self) -> str:
        """The layers' score variant as the --score axis spells it (bench.problem.scores); 'none' without one."""
        variants = ([f"softcap:{self.softcap:g}"] if self.softcap is not None else []) + ["alibi"] * self.alibi \
            + ["sinks"] * self.sinks
        if len(variants) > 1:
            raise ConfigError(f"{self.name}: {' and '.join(variants)} together are not one score variant")
        return variants[0] if variants else "none"

    def __post_init__(self) -> None:
        if not self.layer_kinds and isinstance(self.layers, int):
            object.__setattr__(self, "layer_kinds", ("full",) * self.layers)
        for name in ("layers", "n_kv_heads", "head_dim", "hidden_size", "n_heads", "window", "kv_lora_rank",
                     "qk_rope_head_dim", "v_head_dim", "index_topk", "index_n_heads", "index_head_dim"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ConfigError(f"{self.name}: {name}={value!r} must be a positive integer")
        if self.n_heads is not None:
            _check_heads(self.n_heads, self.n_kv_heads, f"{self.name}: ", "n_heads", "n_kv_heads")
        if len(self.layer_kinds) != self.layers or not set(self.layer_kinds) <= {*LAYER_KINDS, *LINEAR_KINDS}:
            raise ConfigError(f"{self.name}: layer_kinds must hold {self.layers} entries of 'full' or 'sliding'")
        linear_kinds = set(self.layer_kinds) & set(LINEAR_KINDS)
        if linear_kinds != ({self.linear.kind} if self.linear else set()):
            raise ConfigError(f"{self.name}: linear must be set exactly when some layer is linear, of that kind")
        if ("sliding" in self.layer_kinds) != (self.window is not None):
            raise ConfigError(f"{self.name}: window must be set exactly when some layer is sliding")
        if ("chunked" in self.layer_kinds) != (self.chunk is not None):
            raise ConfigError(f"{self.name}: chunk must be set exactly when some layer is chunked")
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ConfigError(f"{self.name}: MLA needs both kv_lora_rank and qk_rope_head_dim")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError(f"{self.name}: dtype {self.dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        if len({self.index_topk is None, self.index_n_heads is None, self.index_head_dim is None}) > 1:
            raise ConfigError(f"{self.name}: a top-K indexer needs index_topk, index_n_heads and index_head_dim")

    @property
    def sparsity(self) -> str | None:
        """The sparsity its layers run (bench.problem.sparsity): topk:K:HxD for a DSA model, else None."""
        if self.index_topk is None:
            return None
        return f"topk:{self.index_topk}:{self.index_n_heads}x{self.index_head_dim}"

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
    def chunked_layers(self) -> int:
        return self.layer_kinds.count("chunked")

    @property
    def linear_layers(self) -> int:
        """Layers that keep a fixed state instead of a KV cache (0 unless hybrid)."""
        return self.layer_kinds.count(self.linear.kind) if self.linear else 0

    @property
    def is_hybrid(self) -> bool:
        return self.linear is not None

    def all_attention(self) -> ModelConfig:
        """The same model with every linear layer a full attention layer of its own attention geometry (heads, head
        dim or MLA latent): the cache a hybrid saves against. Itself when nothing is linear."""
        if self.linear is None:
            return self
        return replace(self, layer_kinds=tuple("full" if k in LINEAR_KINDS else k for k in self.layer_kinds),
                       linear=None)

    def cap(self, kind: LayerKind) -> int | None:
        """The most tokens a layer of this kind caches: the window, the chunk, or None (the whole context)."""
        return self.window if kind == "sliding" else self.chunk if kind == "chunked" else None

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

    def decompressed(self, variant: str) -> ModelConfig:
        """An MLA model without its latent: K (head_dim) and V (v_head_dim) cached per head at Hkv = Hq (mha) or 1
        (mqa), the caches MLA's is compared with at the same Hq."""
        if not self.is_mla or self.n_heads is None or variant not in ("mha", "mqa"):
            raise ConfigError(f"{self.name}: decompressed() takes an MLA model with known heads and mha or mqa")
        return replace(self, kv_lora_rank=None, qk_rope_head_dim=None, index_topk=None, index_n_heads=None,
                       index_head_dim=None, n_kv_heads=self.n_heads if variant == "mha" else 1)

    def variants(self) -> list[str]:
        """MHA, the model's own GQA if it has one, MQA; empty when Hq is unknown or under MLA (nothing to compare)."""
        if self.n_heads is None or self.is_mla:
            return []
        own = [self.variant] if self.variant == "gqa" else []
        return ["mha", *own, "mqa"] if self.n_heads > 1 else ["mha"]  # Hq = 1: MHA and MQA coincide

    def first_layers(self, n: int) -> ModelConfig:
        """The model cut to its first n layers (with their kinds): small caches that keep the model's layout."""
        kinds = self.layer_kinds[:n]
        return replace(self, layers=n, layer_kinds=kinds, window=self.window if "sliding" in kinds else None,
                       chunk=self.chunk if "chunked" in kinds else None,
                       linear=self.linear if self.linear and self.linear.kind in kinds else None)


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
    bytes_per_token: int  # one token of one sequence, all layers of the group (K and V, or the latent, and the
    # index key of a top-K indexer)
    index_dim: int | None = None  # DSA: the index key cached per token and layer

    def cached_tokens(self, context: int) -> int:
        return context if self.window is None else min(context, self.window)

    def total_bytes(self, context: int, batch: int = 1) -> int:
        return self.bytes_per_token * self.cached_tokens(context) * batch

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "layers": self.layers, "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim,
                "latent_dim": self.latent_dim, "window": self.window, "bytes_per_token": self.bytes_per_token,
                **({"index_dim": self.index_dim} if self.index_dim else {})}


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
        window = cfg.cap(kind)
        index = n * (cfg.index_head_dim or 0) * e  # a DSA model's index keys, beside its K/V or latent
        if cfg.is_mla:
            latent = cfg.kv_latent_dim
            groups.append(KVLayerGroup(kind, n, None, None, latent, window, n * latent * e + index,  # type: ignore[operator]
                                       cfg.index_head_dim))
        else:
            v_dim = cfg.head_dim if cfg.v_head_dim is None else cfg.v_head_dim  # an MLA model decompressed: 128
            groups.append(KVLayerGroup(kind, n, cfg.n_kv_heads, cfg.head_dim, None, window,
                                       n * cfg.n_kv_heads * (cfg.head_dim + v_dim) * e + index, cfg.index_head_dim))
    return groups


def kv_bytes_per_token(cfg: ModelConfig, dtype: str | None = None) -> int:
    """Cache bytes of one token of one sequence in every layer (while the context is within any window)."""
    return sum(g.bytes_per_token for g in kv_layer_groups(cfg, dtype))


def kv_total_bytes(cfg: ModelConfig, context: int, batch: int = 1, dtype: str | None = None) -> int:
    """Cache bytes at context x batch: full layers hold the context, sliding ones min(context, window)."""
    return sum(g.total_bytes(context, batch) for g in kv_layer_groups(cfg, dtype))


def linear_state_group(cfg: ModelConfig) -> StateGroup | None:
    """A hybrid's linear layers and the state each keeps per sequence (the recurrent state in fp32, the convolution
    state in the model's dtype: bench.models.linear); None for a model without linear layers or an encoder."""
    if cfg.linear is None or cfg.encoder_only:
        return None
    state, conv = element_bytes(STATE_DTYPE), element_bytes(cfg.dtype)
    return StateGroup(cfg.linear.kind, cfg.linear_layers, cfg.linear, STATE_DTYPE, cfg.dtype,
                      cfg.linear.state_elements * state, cfg.linear.conv_elements * conv)


def linear_state_bytes(cfg: ModelConfig) -> int:
    """Bytes of every linear layer's state for one sequence, the same at any context (0 without linear layers)."""
    group = linear_state_group(cfg)
    return 0 if group is None else group.bytes_per_sequence


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
    chunk: int | None = None  # chunked layers: attention_chunk_size


def attention_shapes(cfg: ModelConfig) -> list[AttentionKind]:
    """One entry per attention layer kind present (full first). MLA is given in its prefill form, K and V decompressed
    per head: Hkv = num_key_value_heads, head_dim = qk_nope_head_dim + qk_rope_head_dim (a model sweep adds the
    latent dims and v_head_dim from the config: bench.kinds.model, into bench.kinds.expansion's Geometry). A
    hybrid's linear layers (gated DeltaNet, Mamba, ...) are not attention of any kind here: only its attention layers'
    shapes are given (none for a model whose every layer is linear); bench.kinds.model sweeps the linear layers as
    linear cases of their method."""
    if cfg.n_heads is None:
        raise ConfigError(f"{cfg.name}: the number of query heads is unknown, so its attention shape is too")
    return [AttentionKind(kind, cfg.layer_kinds.count(kind), cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                          cfg.window if kind == "sliding" else None, cfg.chunk if kind == "chunked" else None)
            for kind in LAYER_KINDS if kind in cfg.layer_kinds]


def model_facts(cfg: ModelConfig, dtypes: tuple[str, ...]) -> dict:
    """What a run records of a model it sweeps (RunMeta.models), so reports need no config file: its layers per
    attention kind, window, and KV bytes per token of all layers of each kind, per dtype of the sweep. A hybrid's
    layers also count its linear kind (e.g. "deltanet": 36), and `linear_state_bytes` gives their fixed state per
    sequence, all linear layers (keys present only for a hybrid, so other models' facts are unchanged)."""
    kv: dict[str, dict[str, int]] = {}
    for dtype in dtypes:
        per_kind: dict[str, int] = {}
        for group in kv_layer_groups(cfg, dtype):
            per_kind[group.kind] = per_kind.get(group.kind, 0) + group.bytes_per_token
        kv[dtype] = per_kind
    chunked = {"chunked": cfg.chunked_layers} if cfg.chunk else {}  # keys only when chunked: old facts unchanged
    linear = {cfg.linear.kind: cfg.linear_layers} if cfg.linear else {}
    return {"layers": {"full": cfg.full_layers, "sliding": cfg.sliding_layers, **chunked, **linear},
            "window": cfg.window, **({"chunk": cfg.chunk} if cfg.chunk else {}),
            **({"linear_state_bytes": linear_state_bytes(cfg)} if cfg.linear else {}),
            "encoder_only": cfg.encoder_only, "source": cfg.source, "kv_bytes_per_token": kv}
