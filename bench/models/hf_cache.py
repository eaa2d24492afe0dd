"""KV caches as transformers keeps them: a narrow twin of a preset run one forward step, its cache's bytes counted.

The twin is one decoder layer of the preset's family in transformers (Llama where transformers has no grouped-KV
class of that family: GPT-2, GPT-3, the 2017 Transformer), with the preset's query heads, K/V heads and head dim (an
MLA preset: its latent rank, rope key and value dims; DSA: its indexer), a tiny hidden size and weights left undrawn.
After one forward over TOKENS tokens with `use_cache=True`, the bytes are those of every tensor the returned cache's
layer holds under a name ending in keys or values (K, V; DSA's indexer_keys), per token: transformers' code decides
how many heads it keeps, not a formula of ours. Needs transformers (`pip install 'attnbench[hf]'`), imported here only.

A hybrid (a config with linear layers: bench.models.linear) is measured as its family's own transformers class
(Qwen3Next, Qwen3_5, KimiLinear, Bamba, GraniteMoeHybrid, Jamba): a narrow twin with one layer of each kind, in the
order the model first has them, each with the model's own head shapes (attention heads, K/V heads, head dim or MLA
latent; the linear layers' heads, head dims, state size and convolution kernel), a hidden size of 16 where the
shapes allow it (a Mamba layer's inner width mamba_expand x hidden_size is kept, through mamba_expand), dense MLPs
or two experts, a vocabulary of 32, weights left undrawn. After one forward over TOKENS tokens in the model's dtype,
`hybrid_cache_bytes` counts per layer kind the tensors transformers' cache allocated (linear states are created
lazily, during that forward): K and V per token, and the recurrent and convolution states per sequence, with their
dtypes and the convolution's columns.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from bench.models.config import ModelConfig

TOKENS = 8  # the forward step's length: a few tokens, all within any sliding window
# families whose transformers class takes num_key_value_heads and a head_dim of its own; others are built as Llama
GROUPED = ("llama", "mistral", "qwen2", "gemma2")
LATENT = ("deepseek_v3", "deepseek_v32")  # MLA families: the twin keeps Hkv = Hq (transformers requires it)


def available() -> bool:
    """Whether transformers is installed (the caches cannot be measured without it)."""
    return importlib.util.find_spec("transformers") is not None


def twin_config(cfg: ModelConfig) -> tuple[str, dict[str, Any]]:
    """The transformers model_type and config fields of `cfg`'s one-layer twin: its attention geometry, the rest
    as small as the config allows (hidden_size = Hq: transformers wants it a multiple of the heads)."""
    assert cfg.n_heads is not None, f"{cfg.name}: no query heads to build a twin with"
    small = {"num_hidden_layers": 1, "hidden_size": cfg.n_heads, "intermediate_size": 16, "vocab_size": 32,
             "num_attention_heads": cfg.n_heads}
    if cfg.is_mla:
        rope = cfg.qk_rope_head_dim
        fields = {**small, "num_key_value_heads": cfg.n_heads, "kv_lora_rank": cfg.kv_lora_rank,
                  "qk_rope_head_dim": rope, "qk_nope_head_dim": cfg.head_dim - rope,  # type: ignore[operator]
                  "v_head_dim": cfg.v_head_dim, "q_lora_rank": 16, "first_k_dense_replace": 1,  # a dense MLP
                  "n_routed_experts": 8, "num_experts_per_tok": 1, "n_group": 1, "topk_group": 1,
                  "moe_intermediate_size": 8}
        if cfg.index_head_dim:
            fields.update(index_head_dim=cfg.index_head_dim, index_n_heads=cfg.index_n_heads,
                          index_topk=cfg.index_topk)
        return cfg.model_type if cfg.model_type in LATENT else "deepseek_v3", fields
    family = cfg.model_type if cfg.model_type in GROUPED else "llama"
    fields = {**small, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim}
    if cfg.window is not None and family in ("mistral", "gemma2"):
        fields["sliding_window"] = cfg.window
    return family, fields


def cache_bytes_per_token(cfg: ModelConfig, device: str = "cpu") -> tuple[int, str]:
    """Bytes per token the twin's transformers cache holds after one forward step (bf16), and the model class."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    family, fields = twin_config(cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small gain nothing from threads, and on a busy machine they contend
    try:
        with no_init_weights():  # what the cache holds does not depend on the weights' values: skip drawing them
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **fields), dtype=torch.bfloat16)
        model = model.to(device).eval()
        with torch.no_grad():
            out = model(torch.arange(TOKENS, device=device)[None], use_cache=True)
    finally:
        torch.set_num_threads(threads)
    cache = out["cache"] if "cache" in out else out["past_key_values"]  # renamed in transformers 5
    held = sum(t.nbytes for layer in cache.layers for name, t in vars(layer).items()
               if torch.is_tensor(t) and name.endswith(("keys", "values")))
    return held // TOKENS, type(model).__name__


# hybrid families as transformers names their (text) model classes
HYBRID = {"qwen3_next": "qwen3_next", "qwen3_5": "qwen3_5_text", "qwen3_5_text": "qwen3_5_text",
          "qwen3_5_moe": "qwen3_5_moe_text", "qwen3_5_moe_text": "qwen3_5_moe_text", "kimi_linear": "kimi_linear",
          "bamba": "bamba", "granitemoehybrid": "granitemoehybrid", "jamba": "jamba"}
HIDDEN = 16  # the twin's hidden size where the shapes leave it free
_TYPES = {"full": "full_attention"}  # every linear kind is transformers' "linear_attention"


def hybrid_twin_config(cfg: ModelConfig) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """The transformers model_type and config fields of `cfg`'s narrow twin, and its layers' kinds (one of each,
    in the order `cfg` first has them)."""
    assert cfg.linear is not None and cfg.n_heads is not None, f"{cfg.name}: not a hybrid with attention heads"
    if cfg.model_type not in HYBRID:
        raise ValueError(f"{cfg.name}: model_type {cfg.model_type!r} has no transformers hybrid class here")
    family, linear = HYBRID[cfg.model_type], dict(cfg.linear.fields)
    kinds = tuple(dict.fromkeys(cfg.layer_kinds))
    if set(kinds) - {"full", cfg.linear.kind}:
        raise ValueError(f"{cfg.name}: only full and {cfg.linear.kind} layers are measured, not {kinds}")
    n = len(kinds)
    types = [_TYPES.get(kind, "linear_attention") for kind in kinds]
    fields: dict[str, Any] = {"num_hidden_layers": n, "hidden_size": HIDDEN, "intermediate_size": 16,
                              "vocab_size": 32, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0,
                              "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads}
    if cfg.is_mla:
        rope = cfg.qk_rope_head_dim
        fields.update(kv_lora_rank=cfg.kv_lora_rank, qk_rope_head_dim=rope, v_head_dim=cfg.v_head_dim,
                      qk_nope_head_dim=cfg.head_dim - rope, q_lora_rank=None)  # type: ignore[operator]
    else:
        fields["head_dim"] = cfg.head_dim
    if family in ("bamba", "granitemoehybrid", "jamba"):  # the inner width expand x hidden shapes the state: kept
        inner = linear.pop("mamba_expand") * cfg.hidden_size  # type: ignore[operator]
        hidden = HIDDEN if inner % HIDDEN == 0 else cfg.hidden_size
        fields.update(hidden_size=hidden, mamba_expand=inner // hidden)  # type: ignore[operator]
    fields.update(linear)
    if family.startswith("qwen3"):
        fields.update(layer_types=types, mlp_only_layers=list(range(n)), num_experts=2, num_experts_per_tok=1,
                      moe_intermediate_size=8, shared_expert_intermediate_size=8)
    elif family == "kimi_linear":
        fields.update(layer_types=types, mlp_layer_types=["dense"] * n, num_experts=2, num_experts_per_token=1,
                      moe_intermediate_size=8)
    elif family == "bamba":
        fields["attn_layer_indices"] = [i for i, kind in enumerate(kinds) if kind == "full"]
    elif family == "granitemoehybrid":
        fields.update(layer_types=types, num_local_experts=2, num_experts_per_tok=1, shared_intermediate_size=8)
    else:  # jamba: layer i is attention when i % period == offset
        full = kinds.index("full") if "full" in kinds else n
        fields.update(attn_layer_period=n + (full == n), attn_layer_offset=full, num_experts=2, num_experts_per_tok=1)
    return family, fields, kinds


def hybrid_cache_bytes(cfg: ModelConfig, device: str = "cpu") -> dict[str, Any]:
    """What the hybrid twin's transformers cache holds after one forward step, per layer kind (one layer each):
    kv_bytes_per_token (K and V), recurrent_bytes and conv_bytes (one sequence), their dtypes and conv_columns;
    and the model class."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    from bench.problem.shapes import DTYPES

    family, fields, kinds = hybrid_twin_config(cfg)
    dtype = DTYPES[cfg.dtype]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with no_init_weights():
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **fields), dtype=dtype)
        model = model.to(device).eval()
        with torch.no_grad():
            out = model(torch.arange(TOKENS, device=device)[None] % 32, use_cache=True)
    finally:
        torch.set_num_threads(threads)
    cache = out["cache"] if "cache" in out else out["past_key_values"]
    per_kind: dict[str, Any] = {}
    for kind, layer in zip(kinds, cache.layers, strict=True):
        kv = sum(t.nbytes for name, t in vars(layer).items()
                 if torch.is_tensor(t) and name.endswith(("keys", "values")))
        row = {"kv_bytes_per_token": kv // TOKENS}
        for part, name in (("conv", "conv_states"), ("recurrent", "recurrent_states")):
            held = [t for t in (getattr(layer, name, None) or {}).values() if torch.is_tensor(t)]
            row[f"{part}_bytes"] = sum(t.nbytes for t in held)
            row[f"{part}_dtype"] = str(held[0].dtype).removeprefix("torch.") if held else None
            if part == "conv":
                row["conv_columns"] = held[0].shape[-1] if held else None
        per_kind[kind] = row
    return {"model_class": type(model).__name__, "kinds": per_kind}
