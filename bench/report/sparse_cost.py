"""Sparse attention against dense: each sparse case beside the best dense kernel at its shape (the crossover claim
and the time figure) and beside its own backend's dense run (the speedup claim and the speedup figure).

A sparse row is an ok attention case with a sparsity (bench.sparsity); its dense twins are the ok cases with every
other shape field equal and sparsity none. A method is (sparsity, backend) and its budget is the sparsity's
(`Sparsity.budget_label`: a density, or tokens per query), so every method of one budget is compared on the same
inputs while the length varies. What is compared:
  crossover  a method's whole cost per forward, total_s (median_s, plus topk's indexer and a BlockMask built on every
             forward: bench.kinds.sparse), against the best dense kernel's median_s at the same shape. S* is the
             shortest length from which the method stays at or below SPARSE_BEATS of it at every longer length measured.
  speedup    the kernel alone, median_s, against the same backend's dense median_s (for a kernel that runs only
             sparse attention, the top-K gather, against the best dense kernel's), beside the ideal 1 / density.
Which kernels the speedup claim is about is read from the registry's traits (bench.report.traits.SPARSE_KERNELS).
"""

from __future__ import annotations

import pandas as pd

from bench.claims import (
    IDEAL_SHARE,
    MIN_SPARSE_LENGTHS,
    SPARSE_BEATS,
    SPARSE_LOSES,
    SPARSE_SPAN,
    spec,
)
from bench.meta import RunMeta
from bench.report.frames import attention_rows, ok_rows, serving_rows, shape_keys_but, sparse_rows
from bench.report.interval import ratio_interval, straddles
from bench.report.traits import SPARSE_KERNELS
from bench.report.verdict import FAILS, HOLDS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged, noisy_note, span
from bench.sparsity import Sparsity, fraction_label

TWIN_KEYS = shape_keys_but("sparsity")  # a sparse case and its dense twin differ in the sparsity only
# one method over the lengths: every shape field but the lengths, and the batch where each length has one (a GPU sweep
# at fixed tokens per batch shrinks B as S grows), else one line per batch (bench.engine.questions does the same)
# (and decode's queries per step: `step_q`, 0 for prefill, whose Sq is its length)
LINE_KEYS = ["backend", "sparsity", "step_q", *shape_keys_but("sparsity", "seq_q", "seq_kv", "batch")]
CROSSOVER_CLAIM = spec("sparse").text
SPEEDUP_CLAIM = spec("sparse-ideal").text
COMMAND = spec("sparse").command  # the least that answers both claims (`--profile sparse`: every budget)


def budget_label(sparsity: str) -> str:
    return Sparsity.parse(sparsity).budget_label


def sparse_costs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per ok sparse case with a dense case at its shape: budget, method, length, cost_s (total_s, else
    median_s), best_dense_s and best_dense (the fastest dense backend there), ratio = cost_s / best_dense_s,
    twin_s and twin (the same backend's dense run, else the best dense one), speedup = twin_s / median_s,
    ideal = 1 / density and share = speedup / ideal; each time with its CI (best_dense_ci_low_s .. twin_ci_high_s,
    cost_ci_* = the kernel's CI shifted by its indexer and mask build), for the claims' intervals."""
    if "sparsity" not in df or df.empty:
        return pd.DataFrame()
    ok = ok_rows(attention_rows(df[~serving_rows(df)]))
    is_sparse = sparse_rows(ok)
    sparse, dense = ok[is_sparse], ok[~is_sparse]
    if sparse.empty or dense.empty:
        return pd.DataFrame()
    times = ["median_s", "ci_low_s", "ci_high_s"]
    ok = ok.assign(**{c: ok[c] if c in ok else ok["median_s"] for c in times[1:]})
    sparse, dense = ok[is_sparse], ok[~is_sparse]

    def named(stem: str) -> dict[str, str]:
        return {"median_s": f"{stem}s", "ci_low_s": f"{stem}ci_low_s", "ci_high_s": f"{stem}ci_high_s"}

    best = (dense.sort_values("median_s", kind="stable").drop_duplicates(TWIN_KEYS)[[*TWIN_KEYS, *times, "backend"]]
            .rename(columns={**named("best_dense_"), "backend": "best_dense"}))
    own = dense[["backend", *TWIN_KEYS, *times]].drop_duplicates(["backend", *TWIN_KEYS])
    out = sparse.merge(best, on=TWIN_KEYS, how="inner").merge(own.rename(columns=named("own_dense_")),
                                                               on=["backend", *TWIN_KEYS], how="left")
    if out.empty:
        return pd.DataFrame()
    own_run = out["own_dense_s"].notna()
    out = out.assign(
        length=out["seq_kv"].astype(int),
        step_q=out["seq_q"].where(out["phase"] == "decode", 0).astype(int),
        budget=out["sparsity"].map(budget_label),
        method=out["sparsity"] + " · " + out["backend"],
        cost_s=out["total_s"].fillna(out["median_s"]),
        **{f"twin_{part}": out[f"own_dense_{part}"].where(own_run, out[f"best_dense_{part}"])
           for part in ("s", "ci_low_s", "ci_high_s")},
        twin=out["backend"].where(own_run, out["best_dense"]),
        ideal=1 / out["density"])
    overhead = out["cost_s"] - out["median_s"]  # the indexer and mask build: their noise is not recorded apart
    out["cost_ci_low_s"], out["cost_ci_high_s"] = out["ci_low_s"] + overhead, out["ci_high_s"] + overhead
    out["ratio"] = out["cost_s"] / out["best_dense_s"]
    out["speedup"] = out["twin_s"] / out["median_s"]
    out["share"] = out["speedup"] / out["ideal"]
    return out.reset_index(drop=True)


def crossovers(costs: pd.DataFrame) -> pd.DataFrame:
    """One row per method line (LINE_KEYS): its lengths, S* (or None), state 'beats' / 'loses' / 'close' (at the
    longest length: at most SPARSE_BEATS, at least SPARSE_LOSES, or between; or close when the ratio's 95% interval
    there, each time drawn within its CI, straddles 1), the ratio at the longest length and its interval."""
    rows = []
    for key, line in _lines(costs):
        line = line.sort_values("length")
        lengths, ratios = list(line["length"]), list(line["ratio"])
        s_star = None
        for length, ratio in zip(reversed(lengths), reversed(ratios), strict=True):
            if ratio > SPARSE_BEATS:
                break
            s_star = length
        last = ratios[-1]
        interval = ratio_interval(line.iloc[[-1]], "cost_", "best_dense_")
        state = "beats" if s_star is not None else "loses" if last >= SPARSE_LOSES else "close"
        if straddles(interval, 1.0):  # the timings cannot tell which side of the dense kernel it is on
            state = "close"
        first = line.iloc[0]
        rows.append({**dict(zip(LINE_KEYS, key, strict=True)), "budget": first["budget"], "method": first["method"],
                     "lengths": lengths, "s_star": s_star, "state": state, "last_ratio": float(last),
                     "last_interval": interval,
                     "best_dense": line.iloc[-1]["best_dense"]})
    return pd.DataFrame(rows)


def _lines(costs: pd.DataFrame):
    """(LINE_KEYS values, rows) per method line: split by batch where a length has several."""
    for key, group in costs.groupby(LINE_KEYS, dropna=False, sort=False):
        if group.groupby("length")["batch"].nunique().max() <= 1:
            yield key, group
        else:
            for _, line in group.groupby("batch", sort=True):
                yield key, line


def _length_word(phase: str) -> str:
    return "S" if phase == "prefill" else "KV"


def span_text(lengths: list[int]) -> str:
    return f"{lengths[0]}–{lengths[-1]}" if len(lengths) > 1 else str(lengths[0])


def _decisive(lengths: list[int]) -> bool:
    return len(lengths) >= MIN_SPARSE_LENGTHS and max(lengths) >= SPARSE_SPAN * min(lengths)


def _existential(states: list[tuple[str, str]]) -> tuple[str, str]:
    """Both claims say that some sparse method (kernel) does it: holds where one budget holds (the budgets where
    none does named in `why`); else inconclusive where a budget is undecided (it may yet hold); else does not
    hold."""
    words = [w for w, _ in states]
    if HOLDS in words:
        short = [label for w, label in states if w != HOLDS]
        return HOLDS, (f"holds at {', '.join(label for w, label in states if w == HOLDS)}; not at "
                       f"{', '.join(short)}" if short else "")
    return (INCONCLUSIVE if INCONCLUSIVE in words else FAILS), ""


def sparse_crossover(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Per phase and budget: the methods' S* against the best dense kernel. Holds when some budget has a method that
    beats dense from some length on (the budgets where none does are named); does not hold when at every budget
    every method still loses at the longest of >= MIN_SPARSE_LENGTHS lengths spanning >= SPARSE_SPAN x;
    inconclusive otherwise (a budget too short, or too close, to decide may yet hold)."""
    costs = sparse_costs(df)
    if costs.empty:
        return Verdict(CROSSOVER_CLAIM, NOT_MEASURED, f"no sparse case beside a dense case of its shape (`{COMMAND}`)")
    lines = crossovers(costs)
    parts, states, detail = [], [], []
    for (phase, mask, budget), group in lines.groupby(["phase", "mask", "budget"], sort=True):
        word = _length_word(phase)
        said = []
        for _, line in group.sort_values("last_ratio").iterrows():
            low, high = line["last_interval"]
            longest, ratio = max(line["lengths"]), line["last_ratio"]
            if line["state"] == "beats":
                said.append(f"{line['method']} S*={int(line['s_star'])} ({ratio:.2f}× at {longest}, 95% "
                            f"{low:.2f}–{high:.2f})")
            else:
                close = f", too close to call: 95% {low:.2f}–{high:.2f}" if line["state"] == "close" else ""
                said.append(f"{line['method']} none up to {longest} ({ratio:.2f}×{close})")
        lengths = sorted({int(n) for ls in group["lengths"] for n in ls})
        if (group["state"] == "beats").any():
            state = HOLDS
        elif (group["state"] == "loses").all() and _decisive(lengths):
            state = FAILS
        else:
            state = INCONCLUSIVE
        states.append((state, f"{phase} {mask} {budget}"))
        dense = ", ".join(sorted(group["best_dense"].unique()))
        parts.append(f"{phase} {mask} {budget}, {word} {span_text(lengths)} against {dense}: " + "; ".join(said))
        detail += [{**r, "lengths": list(r["lengths"])} for r in group.to_dict("records")]
    verdict, why = _existential(states)
    if verdict == INCONCLUSIVE:
        longest = max(int(n) for ls in lines["lengths"] for n in ls)
        longer = spec("sparse").command_with(seq=",".join(str(longest * k) for k in (1, 2, SPARSE_SPAN)))
        why = (f"no method beat dense, nor lost over ≥ {MIN_SPARSE_LENGTHS} lengths spanning ≥ {SPARSE_SPAN}× (longer "
               f"lengths decide it: `{longer}`)")
    elif verdict == FAILS:
        why = ("at every budget every method still costs more than the best dense kernel at the longest length: "
               "the work it skips does not yet pay for the keep-set's overheads (its masks, gathers or indexer)")
    numbers = ("each method's cost per forward (kernel + indexer + per-forward mask build) over the best dense "
               f"kernel's, S* = the length from which it stays ≤ {SPARSE_BEATS:g}× (with the 95% interval at the "
               "longest length, each time drawn within its CI; one that straddles 1× is too close to call): "
               + " · ".join(parts) + "." + noisy_note(costs))
    on = judged(span(costs["length"], "length"), ", ".join(sorted(costs["budget"].unique())),
                ", ".join(sorted(costs["backend"].unique())))
    return Verdict(CROSSOVER_CLAIM, verdict, numbers, why=why, detail=tuple(detail), judged_on=on)


def sparse_speedup(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Per phase and budget, each sparse kernel's speedup over its dense run at its longest length, against the
    ideal 1 / density. Holds when at some budget a kernel reaches IDEAL_SHARE of the ideal (the budgets where none
    does are named); inconclusive when none does and at some budget the best kernel's 95% interval (each time drawn
    within its CI) straddles IDEAL_SHARE; does not hold when every budget's best kernel is decided below it."""
    costs = sparse_costs(df)
    if not costs.empty:
        costs = costs[costs["backend"].isin(SPARSE_KERNELS)]
    if costs.empty:
        return Verdict(SPEEDUP_CLAIM, NOT_MEASURED, f"no case of a sparse kernel ({', '.join(SPARSE_KERNELS)}) "
                       f"beside a dense run of its shape (`{COMMAND}`)")
    longest = pd.concat([line[line["length"] == line["length"].max()] for _, line in _lines(costs)])
    parts, states, detail = [], [], []
    for (phase, mask, budget), group in longest.groupby(["phase", "mask", "budget"], sort=True):
        best = group.loc[group["share"].idxmax()]
        said = [f"{r['method']} {r['speedup']:.2f}× of {r['ideal']:.3g}× (density {fraction_label(r['density'])}, "
                f"{_length_word(phase)}={r['length']}, over {r['twin']})" for _, r in group.iterrows()]
        share = float(best["share"])
        low, high = (x / float(best["ideal"]) for x in ratio_interval(group.loc[[best.name]], "twin_", ""))
        states.append((INCONCLUSIVE if straddles((low, high), IDEAL_SHARE) else HOLDS if share >= IDEAL_SHARE
                       else FAILS, f"{phase} {mask} {budget}"))
        parts.append(f"{phase} {mask} {budget}: " + "; ".join(said)
                     + f" (best {best['method']}: {share:.2f} of the ideal, 95% interval {low:.2f}–{high:.2f})")
        detail += [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                   for r in group[["phase", "mask", "budget", "method", "length", "density", "speedup", "ideal",
                                   "share", "twin"]].to_dict("records")]
    verdict, why = _existential(states)
    if verdict == FAILS:
        why = ("no sparse kernel reaches half the ideal speedup at its longest length: its per-block or per-gather "
               "overheads (partial blocks computed whole, gathered K/V rows, short rows per call) eat the work it "
               "skips")
    elif verdict == INCONCLUSIVE:
        why = (f"the best kernel's share of the ideal has a 95% interval (each time drawn within its CI) that "
               f"straddles {IDEAL_SHARE:g}: more rounds per case (a larger --budget) or longer lengths decide it")
    numbers = (f"speedup of the kernel over its dense run at the longest length, of the ideal 1/density (holds at ≥ "
               f"{IDEAL_SHARE:g} of it): "
               + " · ".join(parts) + "." + noisy_note(costs))
    on = judged(span(longest["length"], "length"), ", ".join(sorted(longest["budget"].unique())),
                ", ".join(sorted(longest["backend"].unique())))
    return Verdict(SPEEDUP_CLAIM, verdict, numbers, why=why, detail=tuple(detail), judged_on=on)
