"""Claim: the score matrix costs O(S²) memory, flash-style kernels O(S); backends grouped by their memory trait."""

from __future__ import annotations

import pandas as pd

from bench.claims import LINEAR_MAX, MEMORY_SPAN, QUADRATIC_MIN, spec
from bench.meta import RunMeta
from bench.record import LATER_SHAPE_KEYS
from bench.report.frames import dense_rows, fit_exponent, ok_rows
from bench.report.traits import FLASH_STYLE, MATERIALISING
from bench.report.verdict import FAILS, HOLDS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged, span

CLAIM = spec("memory").text


def memory_scaling(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Fit peak memory ∝ S^k per backend over prefill lengths: ~2 for the score matrix, ~1 for flash-style."""
    ok = ok_rows(dense_rows(df))
    ok = ok[(ok["phase"] == "prefill") & (ok["peak_mem_bytes"].astype("float64") > 0)]
    keys = ["backend", "variant", "dtype", "batch", "n_heads", "n_kv_heads", "head_dim", "mask", "pass",
            *LATER_SHAPE_KEYS]
    detail, short = [], []
    for key, grp in ok.groupby(keys, dropna=False):
        seqs = grp["seq_kv"].astype("float64")
        if seqs.nunique() < 2:
            continue
        if seqs.max() / seqs.min() < MEMORY_SPAN:  # too short a range to tell S from S^2
            short.append(grp)
            continue
        detail.append({**dict(zip(keys, key, strict=True)), "points": len(grp), "seq_min": int(seqs.min()),
                       "seq_max": int(seqs.max()),
                       "exponent": fit_exponent(seqs, grp["peak_mem_bytes"].astype("float64"))})
    if not detail and short:
        rows = pd.concat(short)
        return Verdict(CLAIM, INCONCLUSIVE, f"peak memory was measured over S {int(rows['seq_kv'].min())}–"
                       f"{int(rows['seq_kv'].max())} only: too short a range to tell S from S²; lengths spanning "
                       f"≥{MEMORY_SPAN}× decide it (`{spec('memory').command}`)",
                       judged_on=judged(span(rows["seq_kv"], "S"), ", ".join(sorted(rows["backend"].unique()))))
    if not detail:
        return Verdict(CLAIM, NOT_MEASURED, f"no backend has measured peak memory over a ≥{MEMORY_SPAN}× range "
                       f"of lengths (`{spec('memory').command}`)")
    frame = pd.DataFrame(detail)
    on = judged(f"S {frame['seq_min'].min()}–{frame['seq_max'].max()}", ", ".join(sorted(frame["dtype"].unique())),
                ", ".join(sorted(frame["backend"].unique())))
    per_backend = pd.DataFrame(detail).groupby("backend")["exponent"].median()
    quad = {b: e for b, e in per_backend.items() if b in MATERIALISING}
    lin = {b: e for b, e in per_backend.items() if b in FLASH_STYLE}
    other = {b: e for b, e in per_backend.items() if b not in MATERIALISING + FLASH_STYLE}

    def show(group: dict) -> str:
        return ", ".join(f"{b} S^{e:.2f}" for b, e in group.items()) or "not measured"

    numbers = (f"peak memory ∝ S^k fitted per shape (median per backend): score-matrix backends {show(quad)}; "
               f"flash-style {show(lin)}" + (f"; others {show(other)}" if other else "")
               + f". O(S²) means k ≥ {QUADRATIC_MIN}, O(S) means k ≤ {LINEAR_MAX}. Peak bytes are counted from "
               "the allocator, not timed: the same call allocates the same bytes on every repeat, so no timing "
               "interval applies.")
    if not quad and not lin:
        return Verdict(CLAIM, NOT_MEASURED, numbers, detail=tuple(detail), judged_on=on)
    holds = all(e >= QUADRATIC_MIN for e in quad.values()) and all(e <= LINEAR_MAX for e in lin.values())
    if not (quad and lin):
        numbers += " Only one side measured."
    why = ""
    if not holds:
        off = [f"{b} S^{e:.2f}" for b, e in quad.items() if e < QUADRATIC_MIN]
        off += [f"{b} S^{e:.2f}" for b, e in lin.items() if e > LINEAR_MAX]
        why = f"off its memory model: {', '.join(off)}."
    return Verdict(CLAIM, HOLDS if holds else FAILS, numbers, why, tuple(detail), judged_on=on)
