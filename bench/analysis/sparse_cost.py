"""Sparse attention against dense: each sparse case beside the best dense kernel at its shape (the crossover claim
and the time figure) and beside its speedup twin (the speedup claim and the speedup figure).

A sparse row is an ok attention case with a sparsity (bench.problem.sparsity). Its dense twins, the best dense
kernel among them, its speedup twin and its method line are bench.analysis.sparse_line's: the best dense kernel is the
fastest dense kernel measured ok at the sparse case's shape, of any backend the run ran there (the planner funds every
one it offers); the speedup twin is the same backend's dense run, else (a kernel that runs only sparse attention) the
best dense kernel. A method is (sparsity, backend) and its budget is the sparsity's (`Sparsity.budget_label`: a
density, or tokens per query), so every method of one budget is compared on the same inputs while the length varies.
What is compared:
  crossover  a method's whole cost per forward, total_s (median_s, plus topk's indexer and a BlockMask built on every
             forward: bench.kinds.sparse), against the best dense kernel's median_s at the same shape. S* is the
             shortest length from which the ratio's whole 95% interval stays at or below the claim's bound (its
             SPARSE_BEATS, passed in) at every longer length measured.
  speedup    the kernel alone, median_s, against its speedup twin's median_s, beside the ideal 1 / density.
Which kernels the speedup claim is about is read from the registry's traits (bench.analysis.traits.SPARSE_KERNELS).
Each claim (bench.claims.sparse, whose judges read these) is judged per condition (bench.analysis.conditions): one
method line (a method at one phase, mask, dtype and head geometry) at its longest length, its ratio's interval from
each time drawn within its own CI.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from bench.analysis.frames import attention_rows, ok_rows, serving_rows, sparse_rows
from bench.analysis.interval import ratio_interval
from bench.analysis.sparse_line import LINE_FIELDS, TWIN_FIELDS, fastest, one_line, step_q
from bench.problem.sparsity import Sparsity

TWIN_KEYS = list(TWIN_FIELDS)  # a sparse case and its dense twin differ in the sparsity only
LINE_KEYS = list(LINE_FIELDS)  # one method over the lengths (split by batch unless sparse_line.one_line)
SPEEDUP_COLUMNS = ["phase", "mask", "dtype", "budget", "method", "length", "density", "speedup", "ideal", "share",
                   "twin"]
TIMES = ["median_s", "ci_low_s", "ci_high_s"]


def budget_label(sparsity: str) -> str:
    return Sparsity.parse(sparsity).budget_label


def _named(stem: str) -> dict[str, str]:
    return {"median_s": f"{stem}s", "ci_low_s": f"{stem}ci_low_s", "ci_high_s": f"{stem}ci_high_s"}


def _best_dense(dense: pd.DataFrame, sparse: pd.DataFrame) -> pd.DataFrame:
    """Per twin shape of a sparse row: the best dense kernel's row (sparse_line.fastest over the dense rows there),
    as best_dense (its backend) and best_dense_s .. best_dense_ci_high_s."""
    at = dense.merge(sparse[TWIN_KEYS].drop_duplicates(), on=TWIN_KEYS, how="inner")
    picked = [fastest(list(rows.index), lambda i, rows=rows: float(rows.at[i, "median_s"]))
              for _, rows in at.groupby(TWIN_KEYS, dropna=False, sort=False)]
    return at.loc[picked, [*TWIN_KEYS, *TIMES, "backend", "case_id"]].rename(columns={
        **_named("best_dense_"), "backend": "best_dense", "case_id": "best_dense_case_id"})


def sparse_costs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per ok sparse case with a dense case at its shape: budget, method, length, cost_s (total_s, else
    median_s), best_dense_s and best_dense (the best dense kernel there), ratio = cost_s / best_dense_s, twin_s, twin
    and twin_case_id (its speedup twin), speedup = twin_s / median_s, ideal = 1 / density and share = speedup /
    ideal; each time with its CI (best_dense_ci_low_s .. twin_ci_high_s, cost_ci_* = the kernel's CI shifted by its
    indexer and mask build), for the claims' intervals."""
    if "sparsity" not in df or df.empty:
        return pd.DataFrame()
    ok = ok_rows(attention_rows(df[~serving_rows(df)]))
    is_sparse = sparse_rows(ok)
    if not is_sparse.any() or is_sparse.all():
        return pd.DataFrame()
    ok = ok.assign(**{c: ok[c] if c in ok else ok["median_s"] for c in TIMES[1:]})
    sparse, dense = ok[is_sparse], ok[~is_sparse]
    own = dense[["backend", *TWIN_KEYS, *TIMES, "case_id"]].drop_duplicates(["backend", *TWIN_KEYS])
    out = sparse.merge(_best_dense(dense, sparse), on=TWIN_KEYS, how="inner").merge(
        own.rename(columns={**_named("own_dense_"), "case_id": "own_dense_case_id"}), on=["backend", *TWIN_KEYS],
        how="left")
    if out.empty:
        return pd.DataFrame()
    own_run = out["own_dense_s"].notna()  # the speedup twin: its own dense run, else the best dense kernel
    out = out.assign(
        length=out["seq_kv"].astype(int),
        step_q=[step_q(p, q) for p, q in zip(out["phase"], out["seq_q"], strict=True)],
        budget=out["sparsity"].map(budget_label),
        method=out["sparsity"] + " · " + out["backend"],
        cost_s=out["total_s"].fillna(out["median_s"]),
        **{f"twin_{part}": out[f"own_dense_{part}"].where(own_run, out[f"best_dense_{part}"])
           for part in ("s", "ci_low_s", "ci_high_s")},
        twin=out["backend"].where(own_run, out["best_dense"]),
        twin_case_id=out["own_dense_case_id"].where(own_run, out["best_dense_case_id"]),
        ideal=1 / out["density"])
    overhead = out["cost_s"] - out["median_s"]  # the indexer and mask build: their noise is not recorded apart
    out["cost_ci_low_s"], out["cost_ci_high_s"] = out["ci_low_s"] + overhead, out["ci_high_s"] + overhead
    out["ratio"] = out["cost_s"] / out["best_dense_s"]
    out["speedup"] = out["twin_s"] / out["median_s"]
    out["share"] = out["speedup"] / out["ideal"]
    return out.reset_index(drop=True)


def crossovers(costs: pd.DataFrame, beats_at: float) -> pd.DataFrame:
    """One row per method line (LINE_KEYS), each one condition of the crossover claim: its lengths, its cost over
    the best dense kernel's at each length with a 95% interval (each time drawn within its CI), S* (the shortest
    length from which every longer length's whole interval is ≤ `beats_at`, the claim's SPARSE_BEATS, else None),
    the ratio and interval at the longest length (last_ratio, last_interval) and `key`: its condition's key fields
    (bench.claims.sparse.crossover_lines judges each line)."""
    rows = []
    for key, line, split in method_lines(costs):
        line = line.sort_values("length")
        lengths = [int(n) for n in line["length"]]
        intervals = [ratio_interval(line.iloc[[i]], "cost_", "best_dense_") for i in range(len(line))]
        s_star = None
        for length, (_, high) in zip(reversed(lengths), reversed(intervals), strict=True):
            if high > beats_at:
                break
            s_star = length
        first, last = line.iloc[0], line.iloc[-1]
        rows.append({**dict(zip(LINE_KEYS, key, strict=True)), "budget": first["budget"], "method": first["method"],
                     "lengths": lengths, "s_star": s_star, "last_ratio": float(last["ratio"]),
                     "last_interval": intervals[-1], "best_dense": last["best_dense"],
                     "key": condition_key(last, split)})
    return pd.DataFrame(rows)


def condition_key(row: pd.Series, split: bool) -> dict[str, object]:
    """A condition's key fields: sparsity, backend, phase, mask, dtype, then Sq and B where they set lines of one
    method apart, then the budget ('block:128:0.125 · flex · prefill · causal · fp32 · density 1/8')."""
    return {"sparsity": row["sparsity"], "backend": row["backend"], "phase": row["phase"], "mask": row["mask"],
            "dtype": row["dtype"], **({"seq_q": int(row["step_q"])} if row["step_q"] > 1 else {}),
            **({"batch": int(row["batch"])} if split else {}), "budget": row["budget"]}


def method_lines(costs: pd.DataFrame) -> Iterator[tuple[tuple, pd.DataFrame, bool]]:
    """(LINE_KEYS values, rows, split) per method line: split by batch unless sparse_line.one_line."""
    for key, group in costs.groupby(LINE_KEYS, dropna=False, sort=False):
        if one_line(group.groupby("length")["batch"].unique()):
            yield key, group, False
        else:
            for _, line in group.groupby("batch", sort=True):
                yield key, line, True
