"""Claims: linear attention beats the best dense kernel from some length S* (`linear`), and a linear decode step costs
the same at every context length where attention's grows with it (`linear-decode`).

A linear case (bench.kinds.linear) has dense twins: the softmax cases of the same batch, heads (Hq = the linear
case's value heads, Hkv = its query/key heads), head dim, dtype, phase and lengths, under the causal mask; the best
dense kernel at a shape is the fastest twin the run measured there. A line is one linear backend's method (its
`linear` field) at one dtype, batch and head geometry, over its lengths (prefill: S; decode: the KV length).

- linear: per line (a condition: method × backend × dtype × geometry), its time over the best dense kernel's at each
  length, with a 95% interval (each time drawn within its own CI, bench.analysis.interval); S* = the shortest length
  from which every longer measured length's whole interval is ≤ LINEAR_BEATS. A condition holds where its longest
  length's interval is ≤ LINEAR_BEATS (S* exists), does not hold where it is wholly ≥ LINEAR_LOSES over ≥
  MIN_LINEAR_LENGTHS lengths spanning ≥ LINEAR_SPAN× (fewer cannot show it never wins), else is inconclusive.
  Published beside it: flash-linear-attention's crossover (FLA_PUBLISHED).
- linear-decode: per decode line, the linear step's time at its longest KV over its shortest (flat: ≤ FLAT_WITHIN
  by the conditions' common rule, at its bound counting as flat: it does not grow with the context; a step that reads
  faster at the longest KV is named, not failed: the same state is read at every KV, so that is a first case's
  warm-up, not the context's doing) and the best dense step's at the same two lengths (growing: the whole interval
  ≥ DENSE_GROWS), over ≥ MIN_LINEAR_LENGTHS KV lengths spanning ≥ LINEAR_SPAN×.
  A condition holds where both hold, does not hold where either is wholly on the wrong side, else is inconclusive.
  Where the dense growth is decided, the flatness's word is the condition's, and its two cases are the pair a
  run re-measures in interleaved blocks (a step of a fraction of a millisecond moved ×1.9 between runs, timed
  minutes apart).
  The KV from which the linear step is faster (its interval below the best dense step's at that and every longer
  KV) is reported with it.
The claims' word is bench.analysis.conditions' rule over the conditions. The questions fund, per linear method, one
line and its dense twins at ≥ MIN_LINEAR_LENGTHS lengths spanning ≥ LINEAR_SPAN× (prefill; decode: KV lengths).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bench.analysis.conditions import (
    MORE_ROUNDS,
    Condition,
    between,
    combine,
    decide_by,
    spans,
    undecided_why,
    word,
)
from bench.analysis.verdict import (
    FAILS,
    INCONCLUSIVE,
    NOT_MEASURED,
    Verdict,
    judged,
    noisy_count,
    noisy_note,
    span,
)
from bench.claims.question import Context, Question, case_key, runs_here
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


LINEAR_BEATS, LINEAR_LOSES = 0.95, 1.05  # a linear line's time over the best dense kernel's: beats / loses
MIN_LINEAR_LENGTHS, LINEAR_SPAN = 3, 4  # a finding over this many lengths spanning this factor (either claim)
FLAT_WITHIN = 1.25  # a linear decode step is flat: its time at its longest KV within this factor of its shortest
DENSE_GROWS = 1.5  # attention's decode step grows: the best dense step's time at the longest KV over the shortest
# flash-linear-attention's published crossover (its README's benchmark of chunk_gdn against FlashAttention-2)
FLA_PUBLISHED = ("flash-linear-attention's benchmark: chunk_gdn overtakes FlashAttention-2 between 2K and 4K tokens "
                 "at head dim 128 on a GB200 (1.58 ms against 2.56 ms at T 4,096)")

# the least that answers both claims (`--profile linear` measures more methods, dtypes and geometries); the CPU default
# runs exactly these (bench.profiles), at a geometry no other part of it has (4 value heads over 2 q/k heads, D 64),
# so that its dense twins change no other claim's least set
LINEAR = {"backend": "hf-gdn,sdpa-flash", "linear": "none,gdn", "heads": "4", "kv-heads": "2", "head-dim": "64",
          "dtype": "fp32", "mask": "causal"}
PREFILL_LENGTHS, DECODE_LENGTHS = "1024,2048,4096,8192", "1024,4096,16384"
SPECS = (ClaimSpec("linear", "Linear attention beats the best dense kernel from some length S*",
                   "bench.claims.linear:linear_crossover", "linear",
                   {**LINEAR, "seq": PREFILL_LENGTHS, "phase": "prefill"}, ratio="linear / best dense kernel"),
         ClaimSpec("linear-decode", "A linear decode step costs the same at every context length, where attention's "
                   "grows with it", "bench.claims.linear:linear_decode", "linear-decode",
                   {**LINEAR, "phase": "decode", "decode-q": "1", "decode-kv": DECODE_LENGTHS},
                   ratio="linear step, longest / shortest KV"))
CROSSOVER_CLAIM, DECODE_CLAIM = SPECS[0].text, SPECS[1].text
TWIN_FIELDS = ("batch", "n_heads", "n_kv_heads", "head_dim", "dtype", "phase", "seq_q", "seq_kv")
# a line's fields: not its batch (a profile may hold the tokens per batch fixed, so the batch falls as the length
# grows); a line with several batches at one length is split by batch (_lines)
LINE_FIELDS = ("backend", "linear", "dtype", "phase", "n_heads", "n_kv_heads", "head_dim")


# -- the questions --------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """Linear cases and the plain causal softmax calls they are compared with."""
    s = c.shape
    return (c.pass_ == "fwd" and s.scope == "attention" and s.serving is None and not s.score.variants
            and not s.sparsity.sparse and s.mla is None and s.model is None and s.mask.label == "causal")


def _least(phase: str) -> Callable[[list[Case], Context], list[Case]]:
    def least(cases: list[Case], ctx: Context) -> list[Case]:
        """Per linear method, its cheapest line at its shortest >= MIN_LINEAR_LENGTHS lengths spanning >=
        LINEAR_SPAN x, with every dense twin the run offers at each length."""
        dense: dict[tuple, list[Case]] = defaultdict(list)
        lines: dict[tuple, list[Case]] = defaultdict(list)
        for c in cases:
            if c.phase != phase or not runs_here(c, ctx):
                continue
            if c.shape.linear.method is None:
                dense[case_key(c, TWIN_FIELDS)].append(c)
            else:
                lines[case_key(c, LINE_FIELDS)].append(c)
        best: dict[str, tuple[float, list[Case]]] = {}
        for line in lines.values():
            line = [c for c in sorted(line, key=lambda c: (c.shape.seq_kv, c.shape.batch))
                    if dense.get(case_key(c, TWIN_FIELDS))]
            seqs = sorted({c.shape.seq_kv for c in line})
            cut = next((seqs[n - 1] for n in range(MIN_LINEAR_LENGTHS, len(seqs) + 1)
                        if seqs[n - 1] >= LINEAR_SPAN * seqs[0]), None)
            if cut is None:
                continue
            chosen = [c for c in line if c.shape.seq_kv <= cut]
            chosen += [t for c in chosen for t in dense[case_key(c, TWIN_FIELDS)] if t not in chosen]
            method, cost = line[0].shape.linear.label, ctx.cost(chosen)
            if method not in best or cost < best[method][0]:
                best[method] = (cost, chosen)
        out: list[Case] = []
        for _, chosen in best.values():
            out += [c for c in chosen if c not in out]
        return out
    return least


QUESTIONS = (Question("linear", picks, _least("prefill")), Question("linear-decode", picks, _least("decode")))


# -- the frames -----------------------------------------------------------------------------------------------------
def linear_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Each measured linear row beside the best dense kernel at its shape: best_dense (its backend) and its
    best_dense_median_s / _ci_low_s / _ci_high_s; linear rows with no twin are left out."""
    import pandas as pd

    ok = df[(df["status"] == "ok") & df["median_s"].notna() & (df["pass"] == "fwd") & (df["mask"] == "causal")
            & (df["scope"].fillna("attention") == "attention") & df["lengths"].isna()
            & (df["score"].fillna("none") == "none") & (df["sparsity"].fillna("none") == "none")
            & df["mla_form"].isna() & df["model"].isna()] if not df.empty and "linear" in df else df.iloc[0:0]
    if ok.empty:
        return pd.DataFrame()
    linear = ok["linear"].fillna("none")
    dense, lin = ok[linear == "none"], ok[linear != "none"]
    if dense.empty or lin.empty:
        return pd.DataFrame()
    keys = list(TWIN_FIELDS)
    best = dense.loc[dense.groupby(keys, dropna=False)["median_s"].idxmin()]
    best = best[keys + ["backend", "median_s", "ci_low_s", "ci_high_s"]].rename(columns={
        "backend": "best_dense", "median_s": "best_dense_median_s", "ci_low_s": "best_dense_ci_low_s",
        "ci_high_s": "best_dense_ci_high_s"})
    return lin.merge(best, on=keys, how="inner").assign(length=lambda f: f["seq_kv"].astype(int))


def _lines(rows: pd.DataFrame, phase: str) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """(condition key, rows by length) per line of `phase`: split by batch where a length has several."""
    rows = rows[rows["phase"] == phase] if not rows.empty else rows
    out = []
    for key, group in rows.groupby(list(LINE_FIELDS), dropna=False, sort=True) if not rows.empty else []:
        backend, method, dtype, _, hq, hk, d = key
        split = bool((group.groupby("length")["batch"].nunique() > 1).any())
        for _, line in group.groupby("batch", sort=True) if split else [(None, group)]:
            batches = sorted({int(b) for b in line["batch"]})
            batch = batches[0] if len(batches) == 1 else f"{batches[0]}–{batches[-1]}"
            key = {"method": method, "backend": backend, "dtype": dtype, "batch": batch, "v_heads": int(hq),
                   "qk_heads": int(hk), "head_dim": int(d)}
            out.append((key, line.sort_values("length").drop_duplicates("length", keep="last")))
    return out


def _interval(top: tuple[float, float, float], bottom: tuple[float, float, float]) -> tuple[float, float]:
    """95% interval of one time over another, each drawn within its CI (bench.analysis.interval.ratio_interval)."""
    import pandas as pd

    from bench.analysis.interval import ratio_interval

    one = pd.DataFrame([{"a_median_s": top[0], "a_ci_low_s": top[1], "a_ci_high_s": top[2],
                         "b_median_s": bottom[0], "b_ci_low_s": bottom[1], "b_ci_high_s": bottom[2]}])
    return ratio_interval(one, "a_", "b_")


def _times(r, prefix: str = "") -> tuple[float, float, float]:
    return tuple(float(r[f"{prefix}{c}"]) if r[f"{prefix}{c}"] == r[f"{prefix}{c}"] else float(r[f"{prefix}median_s"])
                 for c in ("median_s", "ci_low_s", "ci_high_s"))  # type: ignore[return-value]


def faster_from(line: pd.DataFrame, below: float = LINEAR_BEATS) -> int | None:
    """The shortest length from which the linear time's whole interval over the best dense kernel's is ≤ `below` at
    that and every longer length of the line (S* for a prefill line, the faster-from KV for a decode line)."""
    found = None
    for _, r in line.sort_values("length", ascending=False).iterrows():
        if _interval(_times(r), _times(r, "best_dense_"))[1] > below:
            break
        found = int(r["length"])
    return found


def crossover_conditions(rows: pd.DataFrame) -> list[tuple[Condition, dict]]:
    """Each prefill line judged (module docstring), with its detail: lengths, S*, ratio at the longest length."""


    out = []
    for key, line in _lines(rows, "prefill"):
        lengths = [int(n) for n in line["length"]]
        last = line.iloc[-1]
        low, high = _interval(_times(last), _times(last, "best_dense_"))
        ratio = float(last["median_s"]) / float(last["best_dense_median_s"])
        s_star = faster_from(line)
        c = between(key, ratio, (low, high), LINEAR_BEATS, LINEAR_LOSES,
                    facts={"s_star": s_star, "against": str(last["best_dense"]), "length": lengths[-1]})
        verdict, name = c.verdict, c.name
        if verdict == INCONCLUSIVE:
            c = replace(c, why=f"level with the best dense kernel at S {lengths[-1]} (its interval reaches into "
                        f"{LINEAR_BEATS:g}–{LINEAR_LOSES:g}×): {decide_by('longer lengths', MORE_ROUNDS).lower()}")
        elif verdict == FAILS and not spans(lengths, MIN_LINEAR_LENGTHS, LINEAR_SPAN):
            c = replace(c, verdict=INCONCLUSIVE, why=f"loses at S {lengths[0]}–{lengths[-1]} only: fewer than "
                        f"{MIN_LINEAR_LENGTHS} lengths spanning {LINEAR_SPAN}× cannot say it never wins")
        out.append((c, {"condition": name, "lengths": lengths, "s_star": s_star,
                        "best_dense": str(last["best_dense"]), "ratio": ratio, "low": low, "high": high,
                        "verdict": c.verdict, "dtype": str(last["dtype"]), "method": str(last["linear"]),
                        "backend": str(last["backend"]), "head_dim": int(last["head_dim"])}))
    return out


def decode_conditions(rows: pd.DataFrame) -> list[tuple[Condition, dict]]:
    """Each decode line judged (module docstring), with its detail: KV lengths, flatness, dense growth, faster-from."""

    out = []
    for key, line in _lines(rows, "decode"):
        lengths = [int(n) for n in line["length"]]
        first, last = line.iloc[0], line.iloc[-1]
        flat = float(last["median_s"]) / float(first["median_s"])
        flat_low, flat_high = _interval(_times(last), _times(first))
        grows = float(last["best_dense_median_s"]) / float(first["best_dense_median_s"])
        grow_low, grow_high = _interval(_times(last, "best_dense_"), _times(first, "best_dense_"))
        why, on = "", False
        spanned = spans(lengths, MIN_LINEAR_LENGTHS, LINEAR_SPAN)
        flat_word, flat_on = word(flat, flat_low, flat_high, FLAT_WITHIN, holds_above=False)  # the common rule
        if not spanned:
            verdict, why = INCONCLUSIVE, (f"KV {lengths[0]}–{lengths[-1]} only: ≥ {MIN_LINEAR_LENGTHS} KV lengths "
                                          f"spanning ≥ {LINEAR_SPAN}× decide it")
        elif grow_high < DENSE_GROWS or flat_word == FAILS:  # at its bound, the word is never FAILS
            verdict = FAILS
        elif grow_low >= DENSE_GROWS:  # the dense growth decided: the flatness's word is the condition's
            verdict, on = flat_word, flat_on
        else:
            verdict, why = INCONCLUSIVE, (f"its dense growth {grow_low:.2f}–{grow_high:.2f}× straddles its bound "
                                          f"(≥ {DENSE_GROWS:g}×)")
        faster = faster_from(line, 1.0)
        # where the dense step's growth is decided, flatness alone decides the word: the run may re-measure the
        # linear step at the two KV lengths in interleaved blocks (bench.engine.decide), an open one first
        pairs = ((str(last["case_id"]), str(first["case_id"])),) if spanned and grow_low >= DENSE_GROWS else ()
        c = Condition(key, flat, flat_low, flat_high, verdict, FLAT_WITHIN, holds_above=False, why=why, pairs=pairs,
                      at_bound=on,
                      facts={"dense_growth": grows, "dense_growth_low": grow_low, "dense_growth_high": grow_high,
                             "dense_grows_at": DENSE_GROWS, "against": str(last["best_dense"]),
                             "faster_from": faster})
        name = c.name
        note = (f" (its step at KV {lengths[0]} read slower: the same state is read at every KV, so the first case "
                "paid a warm-up)") if flat_high < 1 / FLAT_WITHIN else ""
        out.append((c, {"condition": name, "lengths": lengths, "flat": flat, "flat_low": flat_low, "note": note,
                        "flat_high": flat_high, "dense_growth": grows, "dense_low": grow_low,
                        "dense_high": grow_high, "best_dense": str(last["best_dense"]),
                        "faster_from": faster, "verdict": verdict, "dtype": str(last["dtype"]),
                        "method": str(last["linear"]), "backend": str(last["backend"])}))
    return out


# -- the judges -----------------------------------------------------------------------------------------------------
def linear_crossover(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per condition — a linear method × backend × dtype × head geometry, in prefill — its time over the best dense
    kernel's at its longest length with a 95% interval: holds when the whole interval is ≤ LINEAR_BEATS, does not
    hold when it is wholly ≥ LINEAR_LOSES over ≥ MIN_LINEAR_LENGTHS lengths spanning ≥ LINEAR_SPAN×, else
    inconclusive; S* is reported per condition beside flash-linear-attention's published crossover."""

    rows = linear_pairs(df)
    found = crossover_conditions(rows) if not rows.empty else []
    if not found:
        return Verdict(CROSSOVER_CLAIM, NOT_MEASURED, f"no linear prefill case beside a dense case of its shape "
                       f"(`{SPECS[0].command}`)")
    said = [f"{c.name} against {d['best_dense']}: " + (f"S*={d['s_star']}" if d["s_star"] else
            f"none up to S {d['lengths'][-1]}") + f" ({c.ratio:.2f}× at S {d['lengths'][-1]}, 95% {c.low:.2f}–"
            f"{c.high:.2f}): {c.verdict}" for c, d in found]
    conditions = [c for c, _ in found]
    fails = [c.name for c in conditions if c.verdict == FAILS]
    why = " ".join(p for p in ((f"{'; '.join(fails)}: still at least {LINEAR_LOSES:g}× the best dense kernel at its "
                                "longest length, so its chunked form's extra work per token (the state's d_k x d_v "
                                "products) has not yet paid for itself") if fails else "",
                               undecided_why(conditions, decide_by("longer lengths"))) if p)
    prefill = rows[rows["phase"] == "prefill"]
    numbers = (f"each linear line's time over the best dense kernel's (the fastest softmax twin at the shape), 95% "
               f"interval from each time drawn within its CI (holds ≤ {LINEAR_BEATS:g}×, does not hold ≥ "
               f"{LINEAR_LOSES:g}×); S* = the length from which it stays ≤ {LINEAR_BEATS:g}×: " + " · ".join(said)
               + f". Published: {FLA_PUBLISHED}." + noisy_note(prefill))
    on = judged(span(prefill["length"], "S"), ", ".join(sorted(prefill["dtype"].unique())),
                ", ".join(sorted(prefill["backend"].unique())))
    return Verdict(CROSSOVER_CLAIM, combine(conditions), numbers, why=why, detail=tuple(d for _, d in found),
                   judged_on=on, conditions=tuple(conditions), notes=f"Published: {FLA_PUBLISHED}.",
                   noisy=noisy_count(prefill))


def linear_decode(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per condition — a linear method × backend × dtype × head geometry, decoding — the linear step's time at its
    longest KV over its shortest (flat: ≤ FLAT_WITHIN, it does not grow) and the best dense step's (growing: ≥
    DENSE_GROWS), each with a 95% interval, over ≥ MIN_LINEAR_LENGTHS KV lengths spanning ≥ LINEAR_SPAN×: holds
    when both hold, does not hold when either is wholly on the wrong side, else inconclusive; the KV from which the
    linear step is faster is reported."""

    rows = linear_pairs(df)
    found = decode_conditions(rows) if not rows.empty else []
    if not found:
        return Verdict(DECODE_CLAIM, NOT_MEASURED, f"no linear decode step beside a dense step of its shape "
                       f"(`{SPECS[1].command}`)")
    said = [f"{c.name}: linear {d['flat']:.2f}× (95% {d['flat_low']:.2f}–{d['flat_high']:.2f}) and "
            f"{d['best_dense']} {d['dense_growth']:.2f}× (95% {d['dense_low']:.2f}–{d['dense_high']:.2f}) from KV "
            f"{d['lengths'][0]} to {d['lengths'][-1]}{d['note']}; faster from "
            + (f"KV {d['faster_from']}" if d["faster_from"] else "no measured KV") + f": {c.verdict}"
            for c, d in found]
    conditions = [c for c, _ in found]
    fails = [c.name for c in conditions if c.verdict == FAILS]
    why = " ".join([f"{'; '.join(fails)}: the linear step's time grows with the context (beyond {FLAT_WITHIN:g}×) "
                    f"or the dense step's does not grow by {DENSE_GROWS:g}× over these lengths (a short cache's "
                    "step is bound by its launch, not its reads)"] * bool(fails)
                   + [f"{c.name} is open: {c.why}." for c in conditions if c.why])
    decode = rows[rows["phase"] == "decode"]
    numbers = (f"each decode step's time at the longest KV over the shortest, 95% interval from each time drawn "
               f"within its CI (the linear step flat: ≤ {FLAT_WITHIN:g}×, the best dense "
               f"step growing at ≥ {DENSE_GROWS:g}×): " + " · ".join(said) + "." + noisy_note(decode))
    on = judged(span(decode["length"], "KV"), ", ".join(sorted(decode["dtype"].unique())),
                ", ".join(sorted(decode["backend"].unique())))
    return Verdict(DECODE_CLAIM, combine(conditions), numbers, why=why, detail=tuple(d for _, d in found),
                   judged_on=on, conditions=tuple(conditions), noisy=noisy_count(decode))
