"""Which `attn_implementation` a model should use on this machine: transformers' implementations (the hf-* backends)
side by side at the model's own attention shapes, per phase and length, the fastest, and what transformers' default
(its sdpa path) loses to it.

What one implementation costs a model per forward: every layer's kernel (layers of a kind x that kind's per-layer
time) plus the masks transformers builds once per forward, one per layer kind (the records' mask_build_s). Pure
analysis: the model section's time rows (bench.report.model_section.time_rows) in, plain rows out.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bench.backends import TRANSFORMERS_DEFAULT, TRANSFORMERS_IMPLEMENTATIONS
from bench.claims import TIED

KEYS = ("dtype", "phase", "batch", "seq_q", "seq_kv", "pass")


def forward_s(row: dict[str, Any]) -> float | None:
    """One forward's attention: all layers' kernels (per token x the call's tokens) plus its masks."""
    per_token = row.get("all_layers_s_per_token")
    if not per_token:
        return None
    return per_token * row["batch"] * row["seq_q"] + (row.get("mask_s_per_forward") or 0.0)


def implementation_rows(times: list[dict[str, Any]], layers: dict[str, int]) -> list[dict[str, Any]]:
    """Per dtype, phase and lengths where an implementation ran: each one's per-layer kernel time (per
    layer kind), mask time and forward time, the fastest, and the default's loss to it (None if it did not run)."""
    groups: dict[tuple, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in times:
        if r["backend"] in TRANSFORMERS_IMPLEMENTATIONS and forward_s(r) is not None:
            groups[tuple(r[k] for k in KEYS)][r["backend"]] = r
    out = []
    # prefill first, then by dtype, batch and lengths (numbers as numbers)
    for key, by_impl in sorted(groups.items(), key=lambda kv: (kv[0][1] != "prefill", str(kv[0][0]), kv[0][2:5])):
        forward = {b: forward_s(r) for b, r in by_impl.items()}
        fastest = min(forward, key=forward.get)  # type: ignore[arg-type]
        tokens = key[2] * key[3]
        per_layer = {b: {k: r[f"{k}_layer_s_per_token"] * tokens for k in layers
                         if layers.get(k) and r.get(f"{k}_layer_s_per_token")} for b, r in by_impl.items()}
        default = forward.get(TRANSFORMERS_DEFAULT)
        out.append(dict(zip(KEYS, key, strict=True)) | {
            "forward_s": forward, "per_layer_s": per_layer,
            "mask_s": {b: r.get("mask_s_per_forward") for b, r in by_impl.items()},
            "fastest": fastest, "default_loss": default / forward[fastest] if default else None})
    return out


def name(backend: str) -> str:
    return f"'{TRANSFORMERS_IMPLEMENTATIONS[backend]}'"


def where(row: dict[str, Any]) -> str:
    """'S 1,024', 'KV 4,096', or '256 queries over KV 1,024' (a chunked prefill against its cache)."""
    if row["phase"] == "prefill":
        return f"S {row['seq_kv']:,}"
    return f"KV {row['seq_kv']:,}" if row["seq_q"] == 1 else f"{row['seq_q']:,} queries over KV {row['seq_kv']:,}"


def advice(model: str, rows: list[dict[str, Any]]) -> str | None:
    """One sentence: per phase, the implementation to use and what the default loses where it is not that one."""
    parts = []
    for phase in dict.fromkeys(r["phase"] for r in rows):
        mine = [r for r in rows if r["phase"] == phase]
        losses = [r for r in mine if r["default_loss"] is not None]
        every = "at the one length measured" if len(losses) == 1 else f"at all {len(losses)} lengths measured"
        if losses and all(r["fastest"] == TRANSFORMERS_DEFAULT for r in losses):
            parts.append(f"{phase}: keep the default {name(TRANSFORMERS_DEFAULT)} (the fastest {every})")
            continue
        if losses and all(r["default_loss"] < TIED for r in losses):
            worst = max(losses, key=lambda r: r["default_loss"])
            parts.append(f"{phase}: keep the default {name(TRANSFORMERS_DEFAULT)} (within {TIED - 1:.0%} of the "
                         f"fastest {every}; at worst {worst['default_loss']:.2f}× {name(worst['fastest'])})")
            continue
        wins: dict[str, int] = defaultdict(int)
        for r in mine:
            wins[r["fastest"]] += 1
        best = max(wins, key=wins.get)  # type: ignore[arg-type]
        text = f"{phase}: {name(best)} (fastest at {wins[best]} of {len(mine)} lengths"
        if not losses:
            text += f"; the default {name(TRANSFORMERS_DEFAULT)} did not run here: see the cases not run"
        else:
            worst_row = max(losses, key=lambda r: r["default_loss"])
            text += (f"; the default {name(TRANSFORMERS_DEFAULT)} loses up to {worst_row['default_loss']:.2f}×, "
                     f"at {where(worst_row)}")
        parts.append(text + ")")
    if not parts:
        return None
    return f"Advice for {model} on this machine — " + "; ".join(parts) + "."
