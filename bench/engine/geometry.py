"""A sweep's head geometries: from its heads x KV heads (or --variant) x head dims, or from each model's attention
kinds (config.json sweeps). A sweep (bench.engine.sweeps) crosses each geometry with its dtypes, masks, lengths.

MLA geometries (--variant mla, or a config with kv_lora_rank) carry the latent dims; their head_dim is D_qk =
qk_nope + rope. From the axes, --head-dim is qk_nope and v_head_dim (DeepSeek-V3: 128 both) and --rope-dim is added.
A model with a top-K indexer (DeepSeek-V3.2's DSA) carries its sparsity: it is swept beside the dense cases, at the
contexts longer than its K (shorter ones keep every key: the dense case is what runs there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.errors import UsageError
from bench.problem.shapes import head_dim_for


@dataclass(frozen=True)
class Geometry:
    """The heads of one attention shape, the masks it is swept with, and the model it comes from (if any)."""

    n_heads: int
    n_kv_heads: int
    head_dim: int
    masks: tuple[str, ...]
    model: str | None = None
    score: str | None = None  # a model's score variant (softcap, sinks, ALiBi): its only one
    v_head_dim: int | None = None  # MLA: the latent dims (all three set, or none)
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    sparsity: str | None = None  # a model's own sparse attention (DSA's topk:K:HxD), swept beside dense

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def mla_fields(self, form: str) -> dict[str, Any]:
        """The AttentionShape fields of this MLA geometry in `form` (expanded: Hkv = Hq; absorbed: one latent)."""
        return {"n_kv_heads": self.n_heads if form == "expanded" else 1, "v_head_dim": self.v_head_dim,
                "kv_lora_rank": self.kv_lora_rank, "rope_dim": self.rope_dim, "mla_form": form}


def _variant_kv_heads(kv_heads: tuple[int, ...] | None, n_heads: int, variant: str) -> tuple[int, ...]:
    """--variant's KV heads for Hq: MHA Hq, MQA 1, GQA each --kv-heads value that groups Hq (1 < Hkv < Hq)."""
    if variant == "mha":
        return (n_heads,)
    if variant == "mqa":
        return (1,)
    grouped = tuple(k for k in kv_heads or () if 1 < k < n_heads and n_heads % k == 0)
    if not grouped:
        raise UsageError(f"--variant gqa: no --kv-heads value groups --heads {n_heads} (GQA needs 1 < Hkv < Hq "
                         f"with Hq % Hkv == 0; given {', '.join(map(str, kv_heads or ())) or 'none'})")
    return grouped


def axis_geometries(sweep: Any) -> list[Geometry]:
    """The geometries of the heads / kv_heads (or variants) / head-dim axes, duplicates dropped (MHA and MQA
    coincide at Hq = 1)."""
    out: list[Geometry] = []
    for n_heads in sweep.heads:
        dims = (head_dim_for(sweep.d_model, n_heads),) if sweep.d_model else sweep.head_dims
        if sweep.variants is None:
            kv_all = (n_heads,) if sweep.kv_heads is None else sweep.kv_heads
            out += [Geometry(n_heads, n_kv, head_dim, sweep.masks) for n_kv in kv_all for head_dim in dims]
            continue
        for variant in sweep.variants:
            if variant == "mla":
                found = [Geometry(n_heads, n_heads, head_dim + rope, sweep.masks, v_head_dim=head_dim,
                                  kv_lora_rank=rank, rope_dim=rope)
                         for head_dim in dims for rank in sweep.kv_lora_ranks for rope in sweep.rope_dims]
            else:
                found = [Geometry(n_heads, n_kv, head_dim, sweep.masks)
                         for n_kv in _variant_kv_heads(sweep.kv_heads, n_heads, variant) for head_dim in dims]
            out += [g for g in found if g not in out]
    return out


def model_geometries(models: tuple[str, ...]) -> list[Geometry]:
    """Each model's attention kinds, with its own mask per layer kind and its score variant; an MLA model's with
    its latent dims (its prefill expanded, its decode absorbed, as DeepSeek runs them)."""
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
