"""Transformers' models as a sweep (--model-config): each config's attention kinds (bench.models.config) as the
sweep's head geometries, with its own mask per layer kind and its score variant, instead of the heads / KV heads /
head-dim / mask axes; an MLA model's with its latent dims (its prefill expanded, its decode absorbed, as DeepSeek
runs them), a model with a top-K indexer with its sparsity. A run records each model's layers per kind and KV bytes
per token (`models`), for the report's model section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.kinds.axes import axis, words
from bench.kinds.expansion import Geometry, Kind, Registry


@dataclass(frozen=True)
class ModelAxes:
    models: tuple[str, ...] | None = axis(None, "model-config", "config.json paths or preset names: sweep these "
                                          "models' attention shapes (Hq, Hkv, D, mask per layer kind) instead of "
                                          "--heads/--kv-heads/--head-dim/--mask", words)


def model_geometries(models: tuple[str, ...]) -> list[Geometry]:
    """Each model's attention kinds, with its own mask per layer kind and its score variant; an MLA model's with
    its latent dims."""
    from bench.models.config import attention_shapes
    from bench.models.config_json import load_config  # config files are read only for model sweeps

    out = []
    for name in models:
        cfg = load_config(name)
        for kind in attention_shapes(cfg):
            mask = "none" if cfg.encoder_only else f"window:{kind.window}" if kind.window else \
                f"chunk:{kind.chunk}" if kind.chunk else "causal"
            score = None if cfg.score == "none" else cfg.score  # the model's own variant replaces --score
            if cfg.is_mla:
                out.append(Geometry(kind.n_heads, kind.n_heads, kind.head_dim, (mask,), cfg.name, score,
                                    cfg.v_head_dim, cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.sparsity))
            else:
                out.append(Geometry(kind.n_heads, kind.n_kv_heads, kind.head_dim, (mask,), cfg.name, score,
                                    sparsity=cfg.sparsity))
    return out


def models_of(parts: list[Any]) -> list[str]:
    """Every model config a sweep's parts run, once each."""
    return list(dict.fromkeys(m for part in parts for m in part.models or ()))


class ModelKind(Kind):
    """Not a kind of case (a model's cases are dense, MLA or sparse ones): its axis, geometries and facts."""

    name = "model"
    axes = ModelAxes

    def geometries(self, sweep: Any, kinds: Registry) -> list[Geometry] | None:
        return model_geometries(sweep.models) if sweep.models else None

    def facts(self, parts: list[Any]) -> dict[str, Any]:
        """Each model's layers per kind and KV bytes per token, in the sweep's dtypes."""
        names = models_of(parts)
        if not names:
            return {}
        from bench.models.config import model_facts
        from bench.models.config_json import load_config

        configs = [load_config(name) for name in names]
        return {"models": {cfg.name: model_facts(cfg, parts[0].dtypes) for cfg in configs}}
