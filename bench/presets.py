"""Model presets: the attention geometry of well-known models, with where each number comes from."""

from __future__ import annotations

from dataclasses import dataclass

from bench.errors import UsageError
from bench.shapes import ShapeError, check_heads, head_dim_for, variant_of


@dataclass(frozen=True)
class ModelPreset:
    name: str
    layers: int  # layers that hold a KV cache when decoding
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    source: str
    window: int | None = None  # sliding-window attention caps the cached tokens
    encoder_only: bool = False  # no decoding, so no KV cache
    note: str = ""

    def __post_init__(self) -> None:
        check_heads(self.n_heads, self.n_kv_heads)
        if head_dim_for(self.d_model, self.n_heads) != self.head_dim:
            raise ShapeError(f"{self.name}: head_dim={self.head_dim} != d_model/n_heads")

    @property
    def variant(self) -> str:
        return variant_of(self.n_heads, self.n_kv_heads)


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in [
        ModelPreset("transformer-base", 6, 512, 8, 8, 64, "Vaswani et al. 2017, Attention Is All You Need",
                    note="6 encoder + 6 decoder layers; only the 6 decoder self-attention layers cache K/V"),
        ModelPreset("bert-base", 12, 768, 12, 12, 64, "Devlin et al. 2018, BERT", encoder_only=True),
        ModelPreset("gpt2", 12, 768, 12, 12, 64, "Radford et al. 2019, GPT-2 (124M)"),
        ModelPreset("qwen2.5-0.5b", 24, 896, 14, 2, 64, "Qwen2.5-0.5B config.json"),
        ModelPreset("llama-2-7b", 32, 4096, 32, 32, 128, "Touvron et al. 2023, Llama 2"),
        ModelPreset("llama-2-70b", 80, 8192, 64, 8, 128, "Touvron et al. 2023, Llama 2 (GQA-8)"),
        ModelPreset("llama-3-8b", 32, 4096, 32, 8, 128, "Meta Llama 3 8B config.json"),
        ModelPreset("mistral-7b-v0.1", 32, 4096, 32, 8, 128, "Jiang et al. 2023, Mistral 7B", window=4096),
        ModelPreset("gpt-3-175b", 96, 12288, 96, 96, 128, "Brown et al. 2020, GPT-3"),
    ]
}


def preset(name: str) -> ModelPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"unknown model preset {name!r}; known: {', '.join(PRESETS)}") from None
