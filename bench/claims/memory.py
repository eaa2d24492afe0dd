"""Claim: the score matrix costs O(S²) memory, flash-style kernels O(S); judged per backend, and on both sides.

Question `scaling` (it funds the throughput and latency figures too): per geometry that spans >= MIN_LENGTHS lengths
over >= LENGTH_SPAN x, causal MHA where the plan has it, the textbook backend and the fused kernel at every length;
one such geometry per native dtype, representatives of the emulated ones.

Each backend is one condition: its peak memory fitted as ∝ S^k per shape, the median k against its side's bound
(a materialising kernel's k ≥ QUADRATIC_MIN, a tiled kernel's k ≤ LINEAR_MAX), its range the spread of k over its
shapes. The claim speaks of both kinds of kernel, so it holds only when both sides were measured and every condition
holds; one side alone that holds is inconclusive (naming the side missing), one that fails already refutes it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from bench.analysis.conditions import COUNTED, EXPONENT, Condition, combine, condition, not_judged
from bench.analysis.traits import FLASH_STYLE, MATERIALISING
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, Verdict, judged, span
from bench.claims.question import Context, Question, main_dtypes, pair, plain, with_emulated
from bench.claims.spec import PREFILL, ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta
from bench.results.record import LATER_SHAPE_KEYS

if TYPE_CHECKING:
    import pandas as pd


QUADRATIC_MIN, LINEAR_MAX = 1.7, 1.3  # fitted memory exponents that count as ~S² and ~S
MEMORY_SPAN = 4  # lengths spanning at least this factor tell S from S²
# the throughput and latency figures draw a scaling line over this many lengths spanning this factor (the memory
# claim, which the same cases answer, needs MEMORY_SPAN <= LENGTH_SPAN)
MIN_LENGTHS, LENGTH_SPAN = 4, 8

SPECS = (ClaimSpec("memory", "The naive score matrix costs O(S²) memory; flash-style kernels cost O(S)",
                   "bench.claims.memory:memory_scaling", "scaling",
                   {"backend": "naive,sdpa", "kv-heads": "8", "seq": "256,512,1024,2048", **PREFILL},
                   ratio="peak memory grows as", figures=("peak_memory",)),)
CLAIM = SPECS[0].text


# -- the question ---------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """A plain MHA forward prefill of the attention call alone."""
    s = c.shape
    return (plain(c) and c.phase == "prefill" and c.pass_ == "fwd" and s.scope == "attention"
            and s.n_kv_heads == s.n_heads)


def _lines(cases: list[Case]) -> dict[tuple, list[Case]]:
    """Cases of one geometry (dtype, Hq, D, mask) over lengths: one line where each length has one batch (a GPU
    sweep at fixed tokens per batch shrinks B as S grows), else one line per batch."""
    groups: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        s = c.shape
        groups[(s.dtype, s.n_heads, s.head_dim, s.mask.label)].append(c)
    lines: dict[tuple, list[Case]] = {}
    for key, group in groups.items():
        batches: dict[int, set[int]] = defaultdict(set)
        for c in group:
            batches[c.shape.seq_q].add(c.shape.batch)
        if all(len(b) == 1 for b in batches.values()):
            lines[(*key, None)] = group
        else:
            for c in group:
                lines.setdefault((*key, c.shape.batch), []).append(c)
    return lines


def _shortest_span(group: list[Case]) -> list[Case]:
    """The group's cases at its shortest lengths that still make >= MIN_LENGTHS over >= LENGTH_SPAN x."""
    seqs = sorted({c.shape.seq_q for c in group})
    for n in range(MIN_LENGTHS, len(seqs) + 1):
        if seqs[n - 1] >= LENGTH_SPAN * seqs[0]:
            return [c for c in group if c.shape.seq_q <= seqs[n - 1]]
    return []


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Per geometry that spans >= MIN_LENGTHS lengths over >= LENGTH_SPAN x: the textbook and the fused backend at
    every length, causal where the plan has it; one such geometry per native dtype, representatives of the rest."""
    lines = {k: cut for k, g in _lines(cases).items() if (cut := _shortest_span(g))}
    chosen: list[Case] = []
    for dtype in main_dtypes([c for g in lines.values() for c in g], ctx):
        mine = {k: g for k, g in lines.items() if k[0] == dtype}
        if not mine:
            continue
        # causal first (what decoders run, and what the decode and layer questions use), then the cheapest
        key = min(mine, key=lambda k: (k[3] != "causal", ctx.cost(mine[k])))
        backends = pair(mine[key], ctx, lambda c: c.shape.seq_q)
        chosen += [c for c in mine[key] if c.backend in backends]
    return with_emulated(chosen, cases, ctx)


QUESTIONS = (Question("scaling", picks, least, "the throughput and latency figures"),)


# -- the judge ------------------------------------------------------------------------------------------------------
def _fits(df: pd.DataFrame) -> tuple[list[dict], list[pd.DataFrame]]:
    """Peak memory ∝ S^k fitted per backend and shape over its prefill lengths; the groups whose lengths span less
    than MEMORY_SPAN apart (too short a range to tell S from S²)."""
    from bench.analysis.frames import dense_rows, fit_exponent, ok_rows

    ok = ok_rows(dense_rows(df))
    ok = ok[(ok["phase"] == "prefill") & (ok["peak_mem_bytes"].astype("float64") > 0)]
    keys = ["backend", "variant", "dtype", "batch", "n_heads", "n_kv_heads", "head_dim", "mask", "pass",
            *LATER_SHAPE_KEYS]
    detail, short = [], []
    for key, grp in ok.groupby(keys, dropna=False):
        seqs = grp["seq_kv"].astype("float64")
        if seqs.nunique() < 2:
            continue
        if seqs.max() / seqs.min() < MEMORY_SPAN:
            short.append(grp)
            continue
        detail.append({**dict(zip(keys, key, strict=True)), "points": len(grp), "seq_min": int(seqs.min()),
                       "seq_max": int(seqs.max()),
                       "exponent": fit_exponent(seqs, grp["peak_mem_bytes"].astype("float64"))})
    return detail, short


def _shown(c: Condition) -> str:
    """'naive S^2.00 holds', with the range over its shapes where they differ."""
    spread = f" (S^{c.low:.2f}–{c.high:.2f} over its shapes)" if c.high - c.low >= 0.005 else ""
    return f"{c.fields['backend']} S^{c.ratio:.2f}{spread} {c.verdict}"


def memory_scaling(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per backend (a condition), the median over its shapes of peak memory fitted as ∝ S^k, against its side's
    bound; the claim's word is bench.analysis.conditions' rule over them, and holds only with both sides measured."""
    import pandas as pd


    command = SPECS[0].command
    # the two sides of the claim: (name, backends, bound, the claim's side is above the bound, what it says)
    sides = (("score-matrix", MATERIALISING, QUADRATIC_MIN, True, "O(S²)"),
             ("flash-style", FLASH_STYLE, LINEAR_MAX, False, "O(S)"))
    detail, short = _fits(df)
    if not detail and short:
        rows = pd.concat(short)
        return Verdict(CLAIM, INCONCLUSIVE, f"peak memory was measured over S {int(rows['seq_kv'].min())}–"
                       f"{int(rows['seq_kv'].max())} only: too short a range to tell S from S²; lengths spanning "
                       f"≥{MEMORY_SPAN}× decide it (`{command}`)",
                       judged_on=judged(span(rows["seq_kv"], "S"), ", ".join(sorted(rows["backend"].unique()))))
    if not detail:
        return Verdict(CLAIM, NOT_MEASURED, f"no backend has measured peak memory over a ≥{MEMORY_SPAN}× range "
                       f"of lengths (`{command}`)")
    frame = pd.DataFrame(detail)
    on = judged(f"S {frame['seq_min'].min()}–{frame['seq_max'].max()}", ", ".join(sorted(frame["dtype"].unique())),
                ", ".join(sorted(frame["backend"].unique())))
    exponents = frame.dropna(subset=["exponent"]).groupby("backend")["exponent"]
    found: list[Condition] = []
    parts, missing = [], []
    for side, backends, bound, above, big_o in sides:
        here = [condition({"backend": b, "kernels": side}, float(k.median()), (float(k.min()), float(k.max())),
                          bound, above, unit=EXPONENT, basis=COUNTED, facts={"shapes": len(k)})
                for b, k in exponents if b in backends]
        found += here
        parts.append(f"{side} kernels ({big_o}: k {'≥' if above else '≤'} {bound}) "
                     + ("; ".join(_shown(c) for c in here) if here else "not measured"))
        if not here:
            missing.append(f"the {side} side ({big_o}; a {'materialising' if above else 'tiled'} kernel such as "
                           f"{', '.join(backends[:3])})")
    others = [f"{b} S^{k.median():.2f}" for b, k in exponents if b not in MATERIALISING + FLASH_STYLE]
    # a backend with no memory trait is listed, not judged: the claim names no bound for it
    found += [not_judged({"backend": b, "kernels": "other"}, float(k.median()), (float(k.min()), float(k.max())),
                         LINEAR_MAX, False, "no memory trait to judge it by", unit=EXPONENT, basis=COUNTED,
                         facts={"shapes": len(k)})
              for b, k in exponents if b not in MATERIALISING + FLASH_STYLE]
    notes = ("Peak bytes are counted from the allocator, not timed: the same call allocates the same bytes on every "
             "repeat, so no timing interval applies; a backend's range is its k over its shapes.")
    numbers = (f"peak memory ∝ S^k fitted per shape, the median per backend: {'; '.join(parts)}"
               + (f"; others (no memory trait to judge) {', '.join(others)}" if others else "") + ". " + notes)
    verdict = combine(found)
    if verdict == NOT_MEASURED:
        return Verdict(CLAIM, NOT_MEASURED, f"{numbers} (`{command}`)", detail=tuple(detail), judged_on=on,
                       conditions=tuple(found), notes=notes)
    why = ""
    off = [c for c in found if c.verdict == FAILS]
    straddling = [c for c in found if c.verdict == INCONCLUSIVE]
    if off:
        why = "off its memory model: " + ", ".join(f"{c.fields['backend']} S^{c.ratio:.2f}" for c in off) + "."
    if straddling:
        why += (" Open: " + ", ".join(f"{c.fields['backend']} (S^{c.low:.2f}–{c.high:.2f})" for c in straddling)
                + ": its shapes fit on both sides of its bound.")
    if missing and verdict == HOLDS:
        verdict = INCONCLUSIVE  # one side holding cannot show the other: the claim needs both
    if missing:
        why += f" Not measured: {' and '.join(missing)}; `{command}` measures both sides."
    return Verdict(CLAIM, verdict, numbers, why.strip(), tuple(detail), judged_on=on, conditions=tuple(found),
                   notes=notes)
