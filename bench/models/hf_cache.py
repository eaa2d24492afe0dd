"""KV caches as transformers keeps them: a narrow twin of a preset run one forward step, its cache's bytes counted.

The twin is one decoder layer of the preset's family in transformers (Llama where transformers has no grouped-KV
class of that family: GPT-2, GPT-3, the 2017 Transformer), with the preset's query heads, K/V heads and head dim (an
MLA preset: its latent rank, rope key and value dims; DSA: its indexer), a tiny hidden size and weights left undrawn.
After one forward over TOKENS tokens with `use_cache=True`, the bytes are those of every tensor the returned cache's
layer holds under a name ending in keys or values (K, V; DSA's indexer_keys), per token: transformers' code decides
how many heads it keeps, not a formula of ours. Needs transformers (`pip install 'attnbench[hf]'`), imported here only.
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
