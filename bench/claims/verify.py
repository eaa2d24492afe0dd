"""Claim: verifying a draft of N tokens costs about one decode step (within VERIFY_WITHIN), up to a draft size N*.

Speculative decoding verifies a draft (a chain or a token tree, bench.problem.draft) in one attention call over the
cache. A one-query step reads the cache and does about one FLOP per byte, so the draft's extra queries ride on that
read until the call turns compute-bound (the roofline's ridge, `ridge_tokens`); N* is where the engines' draft size
stops being nearly free.

Question `verify`: each draft's verification step and its one-query twin (the dense decode step of the same
backend, dtype, batch, heads and cache length), at the longest cache length a backend and dtype ran, in the dtypes
this machine runs natively. The judge: per condition (backend × dtype × batch × draft) the draft's time over its
twin's against VERIFY_WITHIN (at or below holds), its interval from the two cases' own timings; N* per backend, dtype
and batch is the largest draft size up to which every draft holds.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING

from bench.claims.question import Context, Question, main_dtypes, runs_here
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.problem.columns import dense_family

if TYPE_CHECKING:
    import pandas as pd

    from bench.analysis.verdict import Verdict
    from bench.results.meta import Calibration, RunMeta

VERIFY_WITHIN = 1.25  # a draft's verification within this factor of a one-query decode step counts as one step

SPECS = (ClaimSpec("verify", f"Verifying a draft of N tokens costs about one decode step (within {VERIFY_WITHIN:g}×) "
                   "up to a draft size N*", "bench.claims.verify:verify_cost", "verify", {"profile": "spec"},
                   ratio="draft step / one-query step", figures=("verify_steps",)),)
CLAIM, COMMAND = SPECS[0].text, SPECS[0].command


def _one_query(c: Case) -> bool:
    s = c.shape
    return (c.phase == "decode" and s.seq_q == 1 and dense_family(s) and s.mask.label == "causal"
            and not s.score.variants and s.mla is None and s.model is None and s.scope == "attention")


def picks(c: Case) -> bool:
    """A draft's verification step, and a one-query decode step it may be judged against."""
    return c.shape.draft is not None or _one_query(c)


def _twin_key(c: Case) -> tuple:
    s = c.shape
    return (c.backend, s.dtype, s.batch, s.n_heads, s.n_kv_heads, s.head_dim, s.seq_kv)


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Each backend's drafts at the longest cache length it verifies them at, in the native dtypes, each beside its
    one-query twin (a draft without its twin cannot be judged, so it is left out)."""
    dtypes = main_dtypes([c for c in cases if c.shape.draft is not None], ctx)
    twins = {_twin_key(c): c for c in cases if _one_query(c)}
    drafts = [c for c in cases if c.shape.draft is not None and c.shape.dtype in dtypes and runs_here(c, ctx)
              and _twin_key(c) in twins]
    longest: dict[tuple, int] = defaultdict(int)
    for c in drafts:
        longest[c.backend, c.shape.dtype] = max(longest[c.backend, c.shape.dtype], c.shape.seq_kv)
    chosen = [c for c in drafts if c.shape.seq_kv == longest[c.backend, c.shape.dtype]]
    return chosen + list({id(t): t for t in (twins[_twin_key(c)] for c in chosen)}.values())


QUESTIONS = (Question("verify", picks, least, "the verification figure: step time against draft size"),)


def draft_steps(df: pd.DataFrame) -> pd.DataFrame:
    """One row per draft case with its one-query twin: backend, the shape keys, draft, tokens (N), median_s,
    step_s (the twin's median) and ratio (draft time / one-query step time), the twin's timings as step_*."""
    import pandas as pd

    from bench.analysis.frames import attention_rows, dense_rows, ok_rows

    if "draft" not in df:
        return pd.DataFrame()
    ok = ok_rows(attention_rows(df))
    drafts = ok[(ok["phase"] == "decode") & (ok["draft"].fillna("none") != "none")].copy()
    steps = dense_rows(ok)
    steps = steps[(steps["phase"] == "decode") & (steps["seq_q"] == 1) & (steps["mask"] == "causal")]
    if "score" in steps:
        steps = steps[steps["score"].fillna("none") == "none"]
    if drafts.empty or steps.empty:
        return pd.DataFrame()
    keys = ["backend", "dtype", "batch", "n_heads", "n_kv_heads", "head_dim", "seq_kv"]
    timings = [c for c in ("median_s", "ci_low_s", "ci_high_s", "case_id") if c in steps]
    twin = steps[keys + timings].rename(columns={c: f"step_{c}" for c in timings})
    out = drafts.merge(twin, on=keys, how="inner")
    out["tokens"] = out["seq_q"].astype(int)
    out["step_s"] = out["step_median_s"]
    out["ratio"] = out["median_s"] / out["step_s"]
    return out


def ridge_tokens(row: pd.Series | dict, calibration: Calibration | None) -> float | None:
    """The draft size at the roofline's ridge: where the step's FLOPs over the machine's GEMM ceiling equal its
    cache read over the read ceiling (4·Hq·N·L·D FLOPs against 2·Hkv·L·D·bytes: N = ridge · Hkv · bytes / (2·Hq));
    None without the ceilings."""
    from bench.counts.metrics import ELEMENT_BYTES

    if calibration is None:
        return None
    gemm, read = calibration.gemm(str(row["dtype"])), calibration.read_bytes_per_s
    if not gemm or not read:
        return None
    return gemm / read * int(row["n_kv_heads"]) * ELEMENT_BYTES[str(row["dtype"])] / (2 * int(row["n_heads"]))


def verify_cost(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per condition — backend × dtype × batch × draft, at the longest cache length — the draft's time over its
    one-query twin's against VERIFY_WITHIN; N* per backend, dtype and batch; the claim's word is
    bench.report.conditions' rule over the conditions."""
    from bench.analysis.conditions import combine, condition, listing, pairs_of, undecided_why
    from bench.analysis.interval import ratio_interval
    from bench.analysis.verdict import NOT_MEASURED, Series, Verdict, judged, noisy_count, noisy_note, span

    steps = draft_steps(df)
    if steps.empty:
        return Verdict(CLAIM, NOT_MEASURED, f"no draft verified beside its one-query decode step (`{COMMAND}`)")
    longest = steps.groupby(["backend", "dtype", "batch"])["seq_kv"].transform("max")
    steps = steps[steps["seq_kv"] == longest]
    found, detail, lines, stars = [], [], [], []
    calibration = run.calibration if run is not None else None
    for (backend, dtype, batch), group in steps.groupby(["backend", "dtype", "batch"], sort=False):
        group = group.sort_values(["tokens", "draft"])
        judged_here = []
        for _, row in group.iterrows():
            one = group[group["case_id"] == row["case_id"]] if "case_id" in group else group.loc[[row.name]]
            key = {"backend": backend, "dtype": dtype, "batch": int(batch), "draft": str(row["draft"]),
                   "tokens": int(row["tokens"]), "seq_kv": int(row["seq_kv"])}
            c = condition(key, float(row["ratio"]), ratio_interval(one, "", "step_"), VERIFY_WITHIN,
                          holds_above=False, pairs=pairs_of(one, "case_id", "step_case_id"))
            judged_here.append((int(row["tokens"]), c))
        n_star = star(judged_here)
        # N* rides on each condition of its group as a fact, so claims.csv holds it beside the ratios
        found += [dataclasses.replace(c, facts=(("n_star", n_star),)) for _, c in judged_here]  # type: ignore[type-var]
        beyond = past(n_star, judged_here)
        ridge = ridge_tokens(group.iloc[0], calibration)
        detail.append({"backend": backend, "dtype": dtype, "batch": int(batch), "seq_kv": int(group["seq_kv"].iloc[0]),
                       "n_star": n_star, "ridge_tokens": ridge, "past": beyond and (beyond[0], beyond[1].ratio),
                       "ratios": {str(r["draft"]): float(r["ratio"]) for _, r in group.iterrows()}})
        stars.append(({"backend": backend, "dtype": dtype, "batch": int(batch), "seq_kv": int(group["seq_kv"].iloc[0])},
                      n_star))
        lines.append(f"{backend} · {dtype} · B {int(batch)}: {star_text(n_star, judged_here)}"
                     + (f" (roofline ridge near N {ridge:.0f})" if ridge else ""))
    numbers = (f"draft verification / one-query decode step at the longest cache length, N* (the largest draft "
               f"size up to which every draft is within {VERIFY_WITHIN:g}×): {'; '.join(lines)}. Judged per draft "
               f"(within {VERIFY_WITHIN:g}× holds): {listing(found)}." + noisy_note(steps))
    why = undecided_why(found)
    on = judged(span(steps["seq_kv"], "KV"), ", ".join(sorted(steps["dtype"].unique())),
                ", ".join(sorted(steps["backend"].unique())))
    series = Series(f"N*, the largest draft size up to which every draft is within {VERIFY_WITHIN:g}× of the "
                    "one-query step (0: not even the smallest)", "tokens", tuple(stars))
    ridges = sorted({round(d["ridge_tokens"], 1) for d in detail if d["ridge_tokens"]})
    notes = (f"The roofline puts the ridge, where N queries turn the step compute-bound, near N "
             f"{', '.join(f'{r:g}' for r in ridges)} here (GEMM ceiling over read ceiling × Hkv × bytes / 2Hq)."
             if ridges else "")
    return Verdict(CLAIM, combine(found), numbers, why, tuple(detail), on, conditions=tuple(found), notes=notes,
                   noisy=noisy_count(steps), series=(series,), answer=star_answer(detail))


def star_answer(detail: list[dict]) -> str:
    """The claim's answer in one sentence: N* per backend and dtype (and batch where several ran). One backend and
    dtype: 'sdpa · fp32 at KV 4,096: drafts up to N* = 16 verify within 1.25× of one step; N 64 costs 1.60×.' or
    '...: no draft verifies within 1.25× of one step; the smallest, N 16, costs 4.27×.'; several: 'N* (the largest
    draft within 1.25× of one step) at KV 16,384: sdpa fp32 none, bf16 32; naive fp32 2.'"""
    batches = len({d["batch"] for d in detail}) > 1
    by_backend: dict[str, list[str]] = defaultdict(list)
    for d in detail:
        at = f" B {d['batch']}" if batches else ""
        by_backend[d["backend"]].append(f"{d['dtype']}{at} {d['n_star'] or 'none'}")
    kv = sorted({d["seq_kv"] for d in detail})
    where = f"KV {kv[0]:,}" if len(kv) == 1 else f"KV {kv[0]:,}–{kv[-1]:,}"
    if len(detail) == 1 and detail[0]["past"]:  # one backend and dtype: the size past N* and what it costs too
        d, (n, ratio) = detail[0], detail[0]["past"]
        who = f"{d['backend']} · {d['dtype']} at {where}: "
        if d["n_star"]:
            return who + (f"drafts up to N* = {d['n_star']} verify within {VERIFY_WITHIN:g}× of one step; N {n} costs "
                          f"{ratio:.2f}×.")
        return who + (f"no draft verifies within {VERIFY_WITHIN:g}× of one step; the smallest, N {n}, costs "
                      f"{ratio:.2f}×.")
    return (f"N* (the largest draft within {VERIFY_WITHIN:g}× of one step) at {where}: "
            + "; ".join(f"{b} {', '.join(parts)}" for b, parts in by_backend.items()) + ".")


def star(judged_here: list[tuple[int, object]]) -> int | None:
    """N*: the largest draft size up to which every draft judged holds (0: the smallest does not)."""
    from bench.analysis.verdict import HOLDS

    n_star = 0
    for n in sorted({n for n, _ in judged_here}):
        if any(c.verdict != HOLDS for m, c in judged_here if m == n):  # type: ignore[attr-defined]
            break
        n_star = n
    return n_star


def past(n_star: int | None, judged_here: list[tuple[int, object]]) -> tuple[int, object] | None:
    """The first draft size past N* and its costliest condition there, or None where none is past it."""
    beyond = [(n, c) for n, c in judged_here if n > (n_star or 0)]
    if not beyond:
        return None
    first = min(n for n, _ in beyond)
    return first, max((c for n, c in beyond if n == first), key=lambda c: c.ratio)  # type: ignore[attr-defined]


def star_text(n_star: int | None, judged_here: list[tuple[int, object]]) -> str:
    """'N* 16 (N 32: 1.41×, does not hold)': N*, and the ratio and word at the first size past it."""
    sizes = sorted({n for n, _ in judged_here})
    head = f"N* {n_star}" if n_star else f"no draft within (the smallest, N {sizes[0]}, is not)"
    beyond = past(n_star, judged_here)
    if beyond is None:
        return f"{head}, every draft up to the largest judged (N {sizes[-1]})"
    n, c = beyond
    return f"{head} (N {n}: {c.ratio:.2f}×, {c.verdict})"  # type: ignore[attr-defined]
