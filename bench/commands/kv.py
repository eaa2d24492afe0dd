"""`python -m bench kv`: KV cache size for a config.json, a preset or a custom geometry, MHA vs GQA vs MQA, and what
fits. --config and --model are read by bench.models.config_json.load_config, whose docstring states the rules.

A hybrid (linear layers beside attention ones: Qwen3-Next, Kimi Linear, Bamba, Jamba, ...) is shown per layer kind:
the attention layers' KV bytes per token and at the context, the linear layers' fixed state per sequence (its
recurrent and convolution parts, bench.models.linear), both together, and the same model with every layer full
attention: its KV cache, what the hybrid saves against it, and the context at which the linear layers' state equals
the KV cache they would hold as full layers. Fitting --memory counts the state too."""

from __future__ import annotations

import argparse
import json
from typing import Any

from bench.errors import UsageError
from bench.models.config import DTYPE_BYTES, ModelConfig, linear_state_group
from bench.models.config_json import PRESET_NAMES, load_config, preset_config
from bench.models.kvsize import (
    check_dtype,
    estimate,
    format_bytes,
    max_batch,
    max_context,
    parse_count,
    parse_memory,
)

help = "KV cache bytes per token and at context x batch, the model as MHA / GQA / MQA, and what fits in --memory"

_CUSTOM = ("layers", "kv_heads", "head_dim", "heads")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Sizes are read as text and parsed here, so every bad value gets the same one-line error and exit 2.
    model = parser.add_argument_group("model: --config PATH, --model PRESET, or --layers, --kv-heads and --head-dim")
    model.add_argument("--config", metavar="PATH", help="a HuggingFace-style config.json (or its folder), read "
                                                        "locally: layers, heads, KV heads, head_dim, sliding and "
                                                        "full layers, MLA, a hybrid's linear layers, text_config")
    model.add_argument("--model", metavar="PRESET", help=f"one of: {', '.join(PRESET_NAMES)}")
    model.add_argument("--layers", metavar="L", help="layers that cache K and V")
    model.add_argument("--kv-heads", metavar="G", help="K/V heads per layer (Hkv)")
    model.add_argument("--head-dim", metavar="D", help="head dimension")
    model.add_argument("--heads", metavar="H", help="query heads (Hq); with it the custom config is also shown as "
                                                    "MHA and MQA, without it only the given config is shown")
    parser.add_argument("--context", default="8k", metavar="N",
                        help="tokens per sequence: 8192, 8k, 128k (k = 1024, m = 1024^2); default 8k")
    parser.add_argument("--batch", default="1", metavar="B", help="sequences; default 1")
    parser.add_argument("--dtype", metavar="DTYPE",
                        help="fp32 | bf16 | fp16 | fp8 (4, 2, 2, 1 bytes per element); default: the config's "
                             "torch_dtype with --config or --model (bf16 when it has none), else bf16")
    parser.add_argument("--memory", metavar="SIZE",
                        help="a budget for the KV cache alone (weights and activations not counted): 80GiB, "
                             "80GB (10^9), 512MiB, 1.5TiB or bytes; prints the largest context at --batch and "
                             "the largest batch at --context that fit. A model whose layers all slide fits any "
                             "context once its windows fit")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def model_from_args(args: argparse.Namespace) -> ModelConfig:
    custom = [f"--{name.replace('_', '-')}" for name in _CUSTOM if getattr(args, name) is not None]
    given = [flag for flag, value in (("--config", args.config), ("--model", args.model)) if value is not None]
    if len(given) > 1 or (given and custom):
        raise UsageError(f"{given[0]} cannot be combined with {', '.join(given[1:] + custom)}; give a config, a "
                         "preset or a custom geometry")
    if args.config is not None:
        return load_config(args.config)
    if args.model is not None:
        return preset_config(args.model)
    missing = [flag for flag in ("--layers", "--kv-heads", "--head-dim") if flag not in custom]
    if missing:
        raise UsageError(f"give --model PRESET or --config PATH, or a custom config (missing {', '.join(missing)})")
    heads = None if args.heads is None else parse_count(args.heads, "heads")
    return ModelConfig.from_geometry("custom", parse_count(args.layers, "layers"),
                                     parse_count(args.kv_heads, "kv-heads"), parse_count(args.head_dim, "head-dim"),
                                     heads)


def build_report(model: ModelConfig, context: int, batch: int, dtype: str, memory: int | None) -> dict[str, Any]:
    """Everything the command prints, as plain data (the --json object)."""
    est = estimate(model, context, batch, dtype)
    report: dict[str, Any] = {
        "model": model.name, "source": model.source, "layers": model.layers, "n_heads": model.n_heads,
        "n_kv_heads": model.n_kv_heads, "head_dim": model.head_dim, "variant": model.variant, "window": model.window,
        "full_layers": model.full_layers, "sliding_layers": model.sliding_layers, "kv_latent_dim": model.kv_latent_dim,
        "chunked_layers": model.chunked_layers, "chunk": model.chunk, "score": model.score,
        "index_head_dim": model.index_head_dim, "index_topk": model.index_topk, "ignored": list(model.ignored),
        "encoder_only": model.encoder_only, "has_kv_cache": not model.encoder_only,
        "context": context, "tokens": est.tokens, "batch": batch, "dtype": dtype,
        "element_bytes": DTYPE_BYTES[dtype], "bytes_per_token": est.bytes_per_token, "total_bytes": est.total_bytes,
        "layer_groups": [{**g.as_dict(), "tokens": g.cached_tokens(context),
                          "total_bytes": g.total_bytes(context, batch)} for g in est.groups],
    }
    if model.assumed:
        report["assumed"] = list(model.assumed)
    group = linear_state_group(model)
    if group is not None:
        report.update(_hybrid(model, est, group.as_dict(), context, batch, dtype))
    if model.encoder_only:
        report["note"] = f"{model.name} is encoder-only: no decoding, so no KV cache"
    if model.is_mla and not model.encoder_only:
        report["variants_note"] = (f"MHA / GQA / MQA do not apply to MLA: all {model.n_heads} heads share one cached "
                                   f"latent of {model.kv_lora_rank} + {model.qk_rope_head_dim} = "
                                   f"{model.kv_latent_dim} elements per token and layer")
    rows = [] if model.encoder_only else [(v, model.as_variant(v)) for v in model.variants()] or [(None, model)]
    report["variants"] = [_variant_row(v, m, m.n_kv_heads == model.n_kv_heads, context, batch, dtype, memory)
                          for v, m in rows]
    if memory is not None:
        fit_context = max_context(model, batch, dtype, memory)
        report.update(memory_bytes=memory, max_context=fit_context, max_batch=max_batch(model, context, dtype, memory),
                      any_context_fits=fit_context is None)
    return report


def _hybrid(model: ModelConfig, est: Any, group: dict[str, Any], context: int, batch: int, dtype: str) \
        -> dict[str, Any]:
    """A hybrid's linear state, its KV cache and state together, and the model with every layer full attention."""
    twin = estimate(model.all_attention(), context, batch, dtype)
    replaced = twin.bytes_per_token - est.bytes_per_token  # what the linear layers would cache per token as attention
    state = group["bytes_per_sequence"]
    return {"linear_layers": model.linear_layers, "state_groups": [group], "state_bytes": est.state_bytes,
            "cache_bytes": est.cache_bytes,
            "all_attention": {"bytes_per_token": twin.bytes_per_token, "total_bytes": twin.total_bytes},
            "saving_bytes": twin.total_bytes - est.cache_bytes,
            "break_even_context": -(-state // replaced) if replaced > 0 else None}


def _variant_row(variant: str | None, m: ModelConfig, this_model: bool, context: int, batch: int, dtype: str,
                 memory: int | None) -> dict[str, Any]:
    est = estimate(m, context, batch, dtype)
    row: dict[str, Any] = {"variant": variant, "n_kv_heads": None if m.is_mla else m.n_kv_heads,
                           "bytes_per_token": est.bytes_per_token, "total_bytes": est.total_bytes,
                           "this_model": this_model}
    if memory is not None:
        row.update(max_context=max_context(m, batch, dtype, memory), max_batch=max_batch(m, context, dtype, memory))
    return row


def render(r: dict[str, Any]) -> str:
    if not r["has_kv_cache"]:
        return f"{r['note']} (0 bytes at any context and batch)."
    hybrid = r["full_layers"] and r["sliding_layers"]
    states = r.get("state_groups", [])
    kinds = [f"{r[k + '_layers']} {k}" for k in ("full", "sliding", "chunked") if r.get(k + "_layers")]
    kinds += [f"{g['layers']} {g['name']}" for g in states]
    layers = f"{r['layers']} layers" + (f" ({', '.join(kinds)})" if len(kinds) > 1 or states else "")
    heads = f"Hq={r['n_heads']}, " if r["n_heads"] else ""
    if r["kv_latent_dim"] and r["layer_groups"]:
        g = r["layer_groups"][0]
        geometry = (f"{heads}MLA: one latent of {g['latent_dim']:,} elements per token and layer, shared by all heads")
    else:
        variant = f" ({r['variant'].upper()})" if r["variant"] else ""
        geometry = f"{heads}Hkv={r['n_kv_heads']}{variant}, D={r['head_dim']}"
    window = f", sliding window {r['window']:,}" if r["window"] else ""
    window += f", attention chunk {r['chunk']:,}" if r.get("chunk") else ""
    window += f", score {r['score']}" if r.get("score", "none") != "none" else ""
    if r.get("index_head_dim"):
        window += (f", and its top-{r['index_topk']:,} indexer's key of {r['index_head_dim']:,} elements per token and "
                   "layer (DSA)")
    per_token = f"KV cache per token: {format_bytes(r['bytes_per_token'])} ({r['bytes_per_token']:,} bytes)"
    if hybrid:
        growing = sum(g["bytes_per_token"] for g in r["layer_groups"] if g["kind"] == "full")
        per_token += (f"; past the {r['window']:,}-token window only the {r['full_layers']} full layers grow: "
                      f"{format_bytes(growing)} ({growing:,} bytes)")
    if states:
        linear = " and ".join(f"{g['layers']} {g['name']}" for g in states)
        per_token += f"; the {linear} layers cache none"
    lines = [
        f"{r['model']}: {layers}, {geometry}{window}, {r['dtype']} ({r['element_bytes']} bytes/element)",
        per_token,
        f"at context {r['context']:,} x batch {r['batch']}: {format_bytes(r['total_bytes'])} "
        f"({r['total_bytes']:,} bytes)",
    ]
    if r["tokens"] < r["context"] and r["layer_groups"]:  # (a model of linear layers only caches no tokens)
        lines[-1] += f"; the sliding window caps the cache at {r['tokens']:,} tokens"
    if len(r["layer_groups"]) > 1 or states:
        for g in r["layer_groups"]:
            capped = f" (the {'chunk' if g['kind'] == 'chunked' else 'window'})" if g["tokens"] < r["context"] else ""
            lines.append(f"  {g['layers']} {g['kind']} layers: {format_bytes(g['bytes_per_token'])}/token x "
                         f"{g['tokens']:,} tokens{capped} x batch {r['batch']} = {format_bytes(g['total_bytes'])}")
    if states:
        lines += [*map(_state_line, states, [r["batch"]] * len(states)), *_hybrid_lines(r)]
    lines += [f"({note})" for note in r.get("ignored", []) + r.get("assumed", [])]
    if "variants_note" in r:
        lines += ["", r["variants_note"]]
    elif len(r["variants"]) > 1 and r["layer_groups"]:
        lines += ["", *(["the attention layers' KV cache as MHA / GQA / MQA (the linear state unchanged):"]
                        if "state_groups" in r else []), *_variant_table(r)]
    elif r["n_heads"] is None:
        lines.append("(give --heads to compare MHA / GQA / MQA)")
    if "memory_bytes" in r:
        lines += ["", *_memory_lines(r)]
    return "\n".join(lines)


def _state_line(g: dict[str, Any], batch: int) -> str:
    shape = " x ".join(f"{n:,}" for n in g["state_shape"])
    return (f"  {g['layers']} {g['name']} layers: a fixed state per sequence at any context, per layer: recurrent "
            f"{shape} {g['state_dtype']} = {format_bytes(g['state_bytes'])},\n    convolution {g['conv_channels']:,} "
            f"channels x {g['conv_tokens']} (kernel {g['conv_kernel']} - 1) {g['conv_dtype']} = "
            f"{format_bytes(g['conv_bytes'])}; x {g['layers']} layers x batch {batch} = "
            f"{format_bytes(g['bytes_per_sequence'] * batch)}")


def _hybrid_lines(r: dict[str, Any]) -> list[str]:
    twin, saving = r["all_attention"], r["saving_bytes"]
    at = f"at context {r['context']:,} x batch {r['batch']}"
    lines = [f"KV cache and linear state {at}: {format_bytes(r['cache_bytes'])} ({r['cache_bytes']:,} bytes)",
             f"every layer full attention instead: {format_bytes(twin['bytes_per_token'])}/token, "
             f"{format_bytes(twin['total_bytes'])} {at}; this model "
             + (f"saves {format_bytes(saving)} ({saving / twin['total_bytes']:.1%})" if saving >= 0
                else f"holds {format_bytes(-saving)} more (its linear state outweighs the KV cache it replaces)")]
    if r["break_even_context"]:
        lines.append(f"(the linear layers' state equals the KV cache they would hold as full attention at "
                     f"{r['break_even_context']:,} tokens)")
    return lines


def _variant_table(r: dict[str, Any]) -> list[str]:
    fits = "memory_bytes" in r
    head = f"{'variant':<8} {'Hkv':>4} {'per token':>10} {'total':>10}"
    if fits:
        head += f" {'max context':>12} {'max batch':>10}"
    lines = [head]
    for row in r["variants"]:
        line = (f"{row['variant'].upper():<8} {row['n_kv_heads']:>4} {format_bytes(row['bytes_per_token']):>10} "
                f"{format_bytes(row['total_bytes']):>10}")
        if fits:
            ctx = "any" if row["max_context"] is None else f"{row['max_context']:,}"
            line += f" {ctx:>12} {row['max_batch']:>10,}"
        lines.append(line + ("  <- this model" if row["this_model"] else ""))
    return lines


def _memory_lines(r: dict[str, Any]) -> list[str]:
    alone = "KV cache and linear state alone" if "state_groups" in r else "KV cache alone"
    lines = [f"memory {format_bytes(r['memory_bytes'])} ({r['memory_bytes']:,} bytes), {alone} "
             "(weights and activations not counted):"]
    if r["max_context"] is None and not r["window"]:  # every layer linear: a state that does not grow
        ctx = "any (the linear layers' state fits, and it does not grow with the context)"
    elif r["max_context"] is None:
        ctx = f"any (the {r['window']:,}-token window fits; a longer context reuses it)"
    elif r["max_context"] == 0:
        one = r["bytes_per_token"] * r["batch"] + r.get("state_bytes", 0)  # a hybrid's linear state comes first
        ctx = f"none (one token needs {format_bytes(one)})"
    else:
        ctx = f"{r['max_context']:,} tokens"
    lines.append(f"  largest context at batch {r['batch']}: {ctx}")
    per_sequence = r.get("cache_bytes", r["total_bytes"]) // r["batch"]  # the cache is linear in the batch
    batch = f"{r['max_batch']:,}" if r["max_batch"] else f"none (one sequence needs {format_bytes(per_sequence)})"
    lines.append(f"  largest batch at context {r['context']:,}: {batch}")
    return lines


def run(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    context, batch = parse_count(args.context, "context"), parse_count(args.batch, "batch")
    memory = None if args.memory is None else parse_memory(args.memory)
    dtype = check_dtype(args.dtype if args.dtype is not None else model.dtype)  # the config's dtype by default
    report = build_report(model, context, batch, dtype, memory)
    print(json.dumps(report) if args.json else render(report))
    return 0
