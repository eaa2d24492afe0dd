"""Transformers' models as a sweep (--model-config): each config's attention kinds (bench.models.config) as the
sweep's head geometries, with its own mask per layer kind and its score variant, instead of the heads / KV heads /
head-dim / mask axes; an MLA model's with its latent dims (its prefill expanded, its decode absorbed, as DeepSeek
runs them), a model with a top-K indexer with its sparsity. A run records each model's layers per kind and KV bytes
per token (`models`), for the report's model section.

A hybrid's linear layers (bench.models.linear) are swept too, as linear cases (bench.kinds.linear) of the method that
computes their recurrence (LAYER_METHODS), at the model's own sizes, in the phases and lengths swept:
  deltanet -> gdn     value heads = linear_num_value_heads, key heads = linear_num_key_heads,
                      d_k = linear_key_head_dim, d_v = linear_value_head_dim;
  kda      -> kda     value heads = key heads = linear_num_heads, d_k = d_v = linear_head_dim;
  mamba2   -> mamba2  value heads = mamba_n_heads (x is the value), key heads = mamba_n_groups (B and C are the keys
                      and queries, shared by a group of heads), d_k = mamba_d_state, d_v = mamba_d_head;
  mamba    -> none    (Mamba-1's per-channel selective scan has no method here: its layers are named, not swept).
A linear case has one head dim (d_k = d_v = head_dim, bench.problem.linear), so where a model's d_k and d_v differ
its layers are swept at head_dim = d_k, the width of the keys the recurrence contracts, and the plan and the run's
facts say so in one line (the swept state is d_k / d_v times the model's). The method's chunk is 64
(bench.problem.linear's default); a method the sweep's backends cannot run is swept all the same and each case
records why. The run records each hybrid's `linear_sweep` (its kind, method and sizes, or why it is not swept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.kinds.axes import axis, words
from bench.kinds.expansion import Geometry, Kind, Registry
from bench.kinds.linear import ModelLinearGeometry
from bench.problem.linear import DEFAULT_LINEAR_CHUNK, LINEAR_METHODS

# a hybrid's linear kind (bench.models.linear) -> the --linear method whose recurrence its layers run
LAYER_METHODS: dict[str, str] = {"deltanet": "gdn", "kda": "kda", "mamba2": "mamba2"}


@dataclass(frozen=True)
class ModelAxes:
    models: tuple[str, ...] | None = axis(None, "model-config", "config.json paths or preset names: sweep these "
                                          "models' attention shapes (Hq, Hkv, D, mask per layer kind; a "
                                          "hybrid's linear layers as --linear cases) instead of --heads/--kv-heads/"
                                          "--head-dim/--mask", words)


def linear_sweep(cfg: Any) -> dict[str, Any] | None:
    """How a hybrid's linear layers are swept (module docstring): kind, layers, method label, n_heads (value heads),
    n_kv_heads (key heads), head_dim and a note, or kind, layers and why not (no method); None without linear
    layers."""
    state = cfg.linear
    if state is None or cfg.encoder_only:
        return None
    f = dict(state.fields)
    head = {"kind": state.kind, "layers": cfg.linear_layers}
    method = LAYER_METHODS.get(state.kind)
    if method is None or method not in LINEAR_METHODS:
        return head | {"note": f"{state.name} layers are not swept: no linear method computes their recurrence"}
    if state.kind == "deltanet":
        heads = (f["linear_num_value_heads"], f["linear_num_key_heads"], f["linear_key_head_dim"],
                 f["linear_value_head_dim"])
    elif state.kind == "kda":
        heads = (f["linear_num_heads"], f["linear_num_heads"], f["linear_head_dim"], f["linear_head_dim"])
    else:
        heads = (f["mamba_n_heads"], f["mamba_n_groups"], f["mamba_d_state"], f["mamba_d_head"])
    v_heads, k_heads, d_k, d_v = heads
    note = "" if d_k == d_v else (f"d_k = {d_k} and d_v = {d_v} differ: swept at head_dim = d_k = {d_k}, a state "
                                  f"{d_k / d_v:g}x the model's")
    return head | {"method": f"{method}:{DEFAULT_LINEAR_CHUNK}", "n_heads": v_heads, "n_kv_heads": k_heads,
                   "head_dim": d_k, "note": note}


def model_geometries(models: tuple[str, ...]) -> list[Geometry]:
    """Each model's attention kinds, with its own mask per layer kind and its score variant; an MLA model's with
    its latent dims; a hybrid's linear layers as their method's geometry."""
    from bench.models.config import attention_shapes
    from bench.models.config_json import load_config  # config files are read only for model sweeps

    out: list[Geometry] = []
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
        sweep = linear_sweep(cfg)
        if sweep and "method" in sweep:
            out.append(ModelLinearGeometry(sweep["n_heads"], sweep["n_kv_heads"], sweep["head_dim"], ("causal",),
                                           cfg.name, linear=sweep["method"]))
    return out


def models_of(parts: list[Any]) -> list[str]:
    """Every model config a sweep's parts run, once each."""
    return list(dict.fromkeys(m for part in parts for m in part.models or ()))


class ModelKind(Kind):
    """Not a kind of case (a model's cases are dense, MLA, sparse or linear ones): its axis, geometries and facts."""

    name = "model"
    axes = ModelAxes

    def geometries(self, sweep: Any, kinds: Registry) -> list[Geometry] | None:
        return model_geometries(sweep.models) if sweep.models else None

    def facts(self, parts: list[Any]) -> dict[str, Any]:
        """Each model's layers per kind and KV bytes per token, in the sweep's dtypes; a hybrid's linear sweep."""
        names = models_of(parts)
        if not names:
            return {}
        from bench.models.config import model_facts
        from bench.models.config_json import load_config

        configs = [load_config(name) for name in names]
        return {"models": {cfg.name: model_facts(cfg, parts[0].dtypes) | _linear_fact(cfg) for cfg in configs}}

    def plan_lines(self, parts: list[Any]) -> list[str]:
        """One line per hybrid: its linear layers' method and sizes, or why they are not swept."""
        from bench.models.config_json import load_config

        lines = []
        for name in models_of(parts):
            cfg = load_config(name)
            sweep = linear_sweep(cfg)
            if sweep is None:
                continue
            if "method" not in sweep:
                lines.append(f"{cfg.name}: {sweep['note']}")
                continue
            note = f"; {sweep['note']}" if sweep["note"] else ""
            keys = f"{sweep['n_kv_heads']} key head{'s' * (sweep['n_kv_heads'] != 1)}"
            lines.append(f"{cfg.name}: {sweep['layers']} {sweep['kind']} layers swept as {sweep['method']} at "
                         f"{sweep['n_heads']} value heads over {keys}, head dim {sweep['head_dim']} (prefill lengths "
                         f"the chunk divides){note}")
        return lines


def _linear_fact(cfg: Any) -> dict[str, Any]:
    sweep = linear_sweep(cfg)
    return {"linear_sweep": sweep} if sweep else {}  # a key only for a hybrid: other models' facts unchanged
