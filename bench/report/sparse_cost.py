"""Sparse attention against dense: each sparse case beside the best dense kernel at its shape (the crossover claim
and the time figure) and beside its own backend's dense run (the speedup claim and the speedup figure).

A sparse row is an ok attention case with a sparsity (bench.problem.sparsity); its dense twins are the ok cases with
every
other shape field equal and sparsity none. A method is (sparsity, backend) and its budget is the sparsity's
(`Sparsity.budget_label`: a density, or tokens per query), so every method of one budget is compared on the same
inputs while the length varies. What is compared:
  crossover  a method's whole cost per forward, total_s (median_s, plus topk's indexer and a BlockMask built on every
             forward: bench.kinds.sparse), against the best dense kernel's median_s at the same shape. S* is the
             shortest length from which the ratio's whole 95% interval stays at or below SPARSE_BEATS at every longer
             length measured.
  speedup    the kernel alone, median_s, against the same backend's dense median_s (for a kernel that runs only
             sparse attention, the top-K gather, against the best dense kernel's), beside the ideal 1 / density.
Which kernels the speedup claim is about is read from the registry's traits (bench.report.traits.SPARSE_KERNELS).
Each claim is judged per condition (bench.report.conditions): one method line (a method at one phase, mask, dtype
and head geometry) at its longest length, its ratio's interval from each time drawn within its own CI.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pandas as pd

from bench.claims import (
    IDEAL_SHARE,
    MIN_SPARSE_LENGTHS,
    SPARSE_BEATS,
    SPARSE_LOSES,
    SPARSE_SPAN,
    spec,
)
from bench.problem.sparsity import Sparsity, fraction_label
from bench.report.conditions import Condition, combine, condition, undecided_why
from bench.report.frames import attention_rows, ok_rows, serving_rows, shape_keys_but, sparse_rows
from bench.report.interval import ROUNDS_DECIDE, ratio_interval
from bench.report.traits import SPARSE_KERNELS
from bench.report.verdict import FAILS, HOLDS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged, noisy_note, span
from bench.results.meta import RunMeta

TWIN_KEYS = shape_keys_but("sparsity")  # a sparse case and its dense twin differ in the sparsity only
# one method over the lengths: every shape field but the lengths, and the batch where each length has one (a GPU sweep
# at fixed tokens per batch shrinks B as S grows), else one line per batch (bench.engine.questions does the same)
# (and decode's queries per step: `step_q`, 0 for prefill, whose Sq is its length)
LINE_KEYS = ["backend", "sparsity", "step_q", *shape_keys_but("sparsity", "seq_q", "seq_kv", "batch")]
CROSSOVER_CLAIM = spec("sparse").text
SPEEDUP_CLAIM = spec("sparse-ideal").text
SPEEDUP_COLUMNS = ["phase", "mask", "dtype", "budget", "method", "length", "density", "speedup", "ideal", "share",
                   "twin"]
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
    """One row per method line (LINE_KEYS), each one condition of the crossover claim: its lengths, its cost over
    the best dense kernel's at each length with a 95% interval (each time drawn within its CI), S* (the shortest
    length from which every longer length's whole interval is ≤ SPARSE_BEATS, else None), the ratio and interval at
    the longest length (last_ratio, last_interval), and `condition`: its bench.report.conditions.Condition."""
    rows = []
    for key, line, split in _lines(costs):
        line = line.sort_values("length")
        lengths = [int(n) for n in line["length"]]
        intervals = [ratio_interval(line.iloc[[i]], "cost_", "best_dense_") for i in range(len(line))]
        s_star = None
        for length, (_, high) in zip(reversed(lengths), reversed(intervals), strict=True):
            if high > SPARSE_BEATS:
                break
            s_star = length
        first, last = line.iloc[0], line.iloc[-1]
        rows.append({**dict(zip(LINE_KEYS, key, strict=True)), "budget": first["budget"], "method": first["method"],
                     "lengths": lengths, "s_star": s_star, "last_ratio": float(last["ratio"]),
                     "last_interval": intervals[-1], "best_dense": last["best_dense"],
                     "condition": _beats(_name(last, split), float(last["ratio"]), intervals[-1], lengths,
                                         _length_word(last["phase"]))})
    return pd.DataFrame(rows)


def _beats(name: str, ratio: float, interval: tuple[float, float], lengths: list[int], word: str) -> Condition:
    """A method line's word at its longest length: holds when the whole interval is ≤ SPARSE_BEATS, does not hold
    when it is wholly ≥ SPARSE_LOSES over lengths that can show it never wins (MIN_SPARSE_LENGTHS spanning
    SPARSE_SPAN×: the crossover moves with length), else open, saying why."""
    low, high = interval
    verdict = HOLDS if high <= SPARSE_BEATS else FAILS if low >= SPARSE_LOSES else INCONCLUSIVE
    found = Condition(name, ratio, low, high, verdict)
    longest = lengths[-1]
    if verdict == INCONCLUSIVE:  # within the spec's band around dense, or straddling one of its edges
        return replace(found, why=f"level with dense at {word} {longest} (its interval reaches into "
                       f"{SPARSE_BEATS:g}–{SPARSE_LOSES:g}×): longer lengths, or more rounds per case, decide it")
    if verdict == FAILS and not _decisive(lengths):
        longer = spec("sparse").command_with(seq=",".join(str(longest * k) for k in (1, 2, SPARSE_SPAN)))
        return replace(found, verdict=INCONCLUSIVE, why=f"loses at {word} {span_text(lengths)} only, too few lengths "
                       f"(≥ {MIN_SPARSE_LENGTHS} spanning ≥ {SPARSE_SPAN}×) to say it never wins (longer lengths "
                       f"decide it: `{longer}`)")
    return found


def _name(row: pd.Series, split: bool) -> str:
    """A condition's name: 'block:128:0.125 · flex (prefill causal fp32 · density 1/8)', with Sq and B where they
    set lines of one method apart."""
    extra = (f" Sq={int(row['step_q'])}" if row["step_q"] > 1 else "") + (f" B={int(row['batch'])}" if split else "")
    return f"{row['method']} ({row['phase']} {row['mask']} {row['dtype']}{extra} · {row['budget']})"


def _lines(costs: pd.DataFrame) -> Iterator[tuple[tuple, pd.DataFrame, bool]]:
    """(LINE_KEYS values, rows, split) per method line: split by batch where a length has several."""
    for key, group in costs.groupby(LINE_KEYS, dropna=False, sort=False):
        if group.groupby("length")["batch"].nunique().max() <= 1:
            yield key, group, False
        else:
            for _, line in group.groupby("batch", sort=True):
                yield key, line, True


def _length_word(phase: str) -> str:
    return "S" if phase == "prefill" else "KV"


def span_text(lengths: list[int]) -> str:
    return f"{lengths[0]}–{lengths[-1]}" if len(lengths) > 1 else str(lengths[0])


def _decisive(lengths: list[int]) -> bool:
    return len(lengths) >= MIN_SPARSE_LENGTHS and max(lengths) >= SPARSE_SPAN * min(lengths)


def _why(found: list[Condition], failing: str, decide: str, bound: float) -> str:
    """The claim's `why`: the conditions that fail and what the numbers say of them, then the open ones."""
    fails = [c.name for c in found if c.verdict == FAILS]
    holds = [c.name for c in found if c.verdict == HOLDS]
    said = (f"{'; '.join(fails)}: {failing}" + (f"; it holds for {'; '.join(holds)}" if holds else "") + "."
            if fails else "")
    return " ".join(p for p in (said, undecided_why(found, bound, decide)) if p)


def sparse_crossover(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Per condition — a sparse method (sparsity × backend, so its budget) × phase, mask and dtype — its cost per
    forward over the best dense kernel's at its longest length, with a 95% interval (each time drawn within its CI):
    holds when the whole interval is ≤ SPARSE_BEATS, does not hold when it is wholly ≥ SPARSE_LOSES over ≥
    MIN_SPARSE_LENGTHS lengths spanning ≥ SPARSE_SPAN×, else inconclusive; S* is reported per condition. The claim's
    word is bench.report.conditions' rule over them (holds, does not hold, depends, inconclusive)."""
    costs = sparse_costs(df)
    if costs.empty:
        return Verdict(CROSSOVER_CLAIM, NOT_MEASURED, f"no sparse case beside a dense case of its shape (`{COMMAND}`)")
    lines = crossovers(costs).sort_values(["phase", "mask", "budget", "last_ratio"], kind="stable")
    found = list(lines["condition"])
    said = []
    for c, (_, line) in zip(found, lines.iterrows(), strict=True):
        word, longest = _length_word(line["phase"]), line["lengths"][-1]
        beats = f"S*={int(line['s_star'])}" if pd.notna(line["s_star"]) else f"none up to {longest}"
        said.append(f"{c.name}, {word} {span_text(line['lengths'])} against {line['best_dense']}: {beats} "
                    f"({c.ratio:.2f}× at {longest}, 95% {c.low:.2f}–{c.high:.2f}): {c.verdict}")
    detail = [{**{k: v for k, v in r.items() if k != "condition"}, "lengths": list(r["lengths"]),
               "s_star": int(r["s_star"]) if pd.notna(r["s_star"]) else None,  # a column with None is float
               **r["condition"].as_dict()} for r in lines.to_dict("records")]
    why = _why(found, f"still costs at least {SPARSE_LOSES:g}× the best dense kernel at its longest length: the work "
               "it skips does not yet pay for the keep-set's overheads (its masks, gathers or indexer)",
               ROUNDS_DECIDE, SPARSE_BEATS)
    numbers = ("each method's cost per forward (kernel + indexer + per-forward mask build) over the best dense "
               f"kernel's at its longest length, 95% interval from each time drawn within its CI (holds ≤ "
               f"{SPARSE_BEATS:g}×, does not hold ≥ {SPARSE_LOSES:g}×); S* = the length from which it stays ≤ "
               f"{SPARSE_BEATS:g}×: " + " · ".join(said) + "." + noisy_note(costs))
    on = judged(span(costs["length"], "length"), ", ".join(sorted(costs["budget"].unique())),
                ", ".join(sorted(costs["backend"].unique())))
    return Verdict(CROSSOVER_CLAIM, combine(found), numbers, why=why, detail=tuple(detail), judged_on=on,
                   conditions=tuple(found))


def sparse_speedup(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Per condition — a sparse kernel's method × phase, mask and dtype, at its longest length — its speedup over
    its dense run as a share of the ideal 1 / density, with a 95% interval (each time drawn within its CI): holds
    when the whole interval is ≥ IDEAL_SHARE, does not hold when it is wholly below, else inconclusive. The claim's
    word is bench.report.conditions' rule over them (holds, does not hold, depends, inconclusive)."""
    costs = sparse_costs(df)
    if not costs.empty:
        costs = costs[costs["backend"].isin(SPARSE_KERNELS)]
    if costs.empty:
        return Verdict(SPEEDUP_CLAIM, NOT_MEASURED, f"no case of a sparse kernel ({', '.join(SPARSE_KERNELS)}) "
                       f"beside a dense run of its shape (`{COMMAND}`)")
    found, said, detail, longest = [], [], [], []
    for _, line, split in _lines(costs):
        r = line.loc[line["length"].idxmax()]
        low, high = (x / float(r["ideal"]) for x in ratio_interval(line.loc[[r.name]], "twin_", ""))
        found.append(condition(_name(r, split), float(r["share"]), (low, high), IDEAL_SHARE, holds_above=True))
        said.append(f"{found[-1].name}: {r['speedup']:.2f}× of {r['ideal']:.3g}× (density "
                    f"{fraction_label(r['density'])}, {_length_word(r['phase'])}={r['length']}, over {r['twin']}), "
                    f"{r['share']:.2f} of the ideal, 95% {low:.2f}–{high:.2f}: {found[-1].verdict}")
        detail.append({**{k: (v.item() if hasattr(v, "item") else v) for k, v in r[SPEEDUP_COLUMNS].items()},
                       **found[-1].as_dict()})
        longest.append(r)
    longest = pd.DataFrame(longest)
    why = _why(found, f"short of {IDEAL_SHARE:g} of the ideal speedup at its longest length: its per-block or "
               "per-gather overheads (partial blocks computed whole, gathered K/V rows, short rows per call) eat the "
               "work it skips", f"{ROUNDS_DECIDE}; longer lengths show where the share is heading", IDEAL_SHARE)
    numbers = (f"speedup of the kernel over its dense run at the longest length, of the ideal 1/density, 95% interval "
               f"from each time drawn within its CI (holds at ≥ {IDEAL_SHARE:g} of it): " + " · ".join(said) + "."
               + noisy_note(costs))
    on = judged(span(longest["length"], "length"), ", ".join(sorted(longest["budget"].unique())),
                ", ".join(sorted(longest["backend"].unique())))
    return Verdict(SPEEDUP_CLAIM, combine(found), numbers, why=why, detail=tuple(detail), judged_on=on,
                   conditions=tuple(found))
