"""Attention's share of the whole layer (W_Q, W_K, W_V, attention, W_O) as S grows: tidy frame -> plain data.

A run with `--scope attention,layer` times every prefill shape twice: the attention call alone and the layer
around it (bench.kinds.mha_layer). The share of one shape is attention's median over the layer's, both from the same
run,
backend, dtype and pass. The tutorials say attention dominates at long S (its cost grows as S², the
projections' as S); `attention_dominates` says from which S that holds on this machine, as a claim of the
registry (bench.report.claims). Like the claims, both functions take the frame of ONE run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.claims import DOMINANT, LAYER_SPAN, MIN_LAYER_LENGTHS, RISING, spec
from bench.report.frames import shape_keys_but
from bench.report.interval import SEED, drawn, median_over
from bench.report.load import INT_COLUMNS
from bench.report.verdict import FAILS, HOLDS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged, span
from bench.results.meta import RunMeta

# What pairs an attention-alone case with its layer twin: the backend and every shape field but the scope (the one
# thing this analysis varies), so cases that differ in any other field, one added later included, stay apart.
VARIED = ("scope",)
SHARE_KEYS = ["backend", *shape_keys_but(*VARIED)]
# A geometry: one shape measured over lengths (seq_q = seq_kv = seq in prefill), by one or more backends.
GEOMETRY_KEYS = [k for k in SHARE_KEYS if k not in ("backend", "seq_q", "seq_kv")]
INT_KEYS = (*INT_COLUMNS, "seq")
COMMAND = spec("layer").command
CLAIM = spec("layer").text


def _timed(df: pd.DataFrame) -> pd.DataFrame:
    """Ok prefill rows with a positive median, a `seq` column, an explicit scope and a model name ('' for none)."""
    ok = df[(df["status"] == "ok") & (df["phase"] == "prefill")]
    ok = ok[pd.to_numeric(ok["median_s"], errors="coerce") > 0]
    return ok.assign(seq=ok["seq_kv"].astype("int64"), scope=ok["scope"].fillna("attention"),
                     model=ok["model"].fillna("").astype(str), noisy=ok["noisy"].fillna(False).astype(bool))


def attention_share(df: pd.DataFrame) -> list[dict]:
    """One row per shape where both the attention-alone and the layer case are ok: share = attention / layer.

    Each row holds SHARE_KEYS (None where a field is unset, e.g. the model when the run named none), seq (= seq_kv),
    attention_s and layer_s (medians, seconds) with their CIs (attention_ci_low_s ... layer_ci_high_s; the median
    where a run recorded none), share (a fraction; above 1 only if the layer ran faster than its own
    attention, i.e. noise) and noisy (either timing flagged). Ordered by SHARE_KEYS (backend first, then S).
    """
    ok = _timed(df)
    cols = [*SHARE_KEYS, "seq", "median_s", "ci_low_s", "ci_high_s", "noisy"]
    ok = ok.assign(**{c: ok[c] if c in ok else ok["median_s"] for c in ("ci_low_s", "ci_high_s")})

    def scoped(scope: str, short: str) -> pd.DataFrame:
        return ok[ok["scope"] == scope][cols].rename(columns={
            "median_s": f"{scope}_s", "ci_low_s": f"{scope}_ci_low_s", "ci_high_s": f"{scope}_ci_high_s",
            "noisy": f"noisy_{short}"})

    attn, layer = scoped("attention", "a"), scoped("layer", "l")
    merged = attn.merge(layer, on=[*SHARE_KEYS, "seq"], how="inner").sort_values(SHARE_KEYS, kind="stable")
    out = []
    for _, row in merged.iterrows():
        rec = {k: _plain(k, row[k]) for k in (*SHARE_KEYS, "seq")}
        rec["model"] = rec["model"] or None
        times = {c: float(row[c]) if pd.notna(row[c]) else float(row[c.replace("_ci_low", "").replace("_ci_high", "")])
                 for c in ("attention_s", "attention_ci_low_s", "attention_ci_high_s", "layer_s", "layer_ci_low_s",
                           "layer_ci_high_s")}
        out.append({**rec, **times, "share": times["attention_s"] / times["layer_s"],
                    "noisy": bool(row["noisy_a"] or row["noisy_l"])})
    return out


def _plain(key: str, value: object) -> object:
    """A frame cell as plain Python: None for a missing one, int for integer fields, else str."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value) if key in INT_KEYS else str(value)


def _family_label(key: dict) -> str:
    geometry = key["model"] or f"Hq={key['n_heads']} Hkv={key['n_kv_heads']} D={key['head_dim']}"
    shown = {"model", "n_heads", "n_kv_heads", "head_dim", "dtype", "mask", "batch", "pass", "phase", "variant"}
    rest = "".join(f" · {k}={v}" for k, v in key.items() if k not in shown and v not in (None, ""))
    return f"{geometry} · {key['dtype']} · {key['mask']} · B={key['batch']} · {key['pass']}{rest}"


def _pct(x: float) -> str:
    """A share in percent, truncated to 0.1 so that one just under half never reads as 50%."""
    return f"{math.floor(1000 * x) / 10:.1f}%"


def attention_dominates(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Does attention take at least half of the layer's time at the longest S measured?

    Per family (one geometry, dtype, mask, batch and pass), the share at each S is the median over the backends
    that ran both scopes there. The claim holds when, at each family's longest S, that median's 95% interval (each
    time drawn within its CI, the backends resampled) lies at or above 50%; a family whose interval straddles 50% is
    too close to call (inconclusive, unless another family decides against it). numbers
    gives the share at each S and the smallest S from which attention takes half or more (at that S and every
    longer one measured), or says it never does on this machine. detail: one dict per family and S.
    """
    scope = df["scope"].fillna("attention") if "scope" in df else pd.Series("attention", index=df.index)
    if not (scope == "layer").any():
        return _result(NOT_MEASURED, f"no layer-scope cases in this run (run `{COMMAND}`)")
    shares = pd.DataFrame(attention_share(df))
    if shares.empty:
        return _result(NOT_MEASURED, "layer-scope cases ran, but none is ok beside an ok attention-alone case of the "
                                     f"same shape and backend (run `{COMMAND}`)")
    shares["model_key"] = shares["model"].fillna("")  # groupby drops None keys
    families = shares.groupby([k if k != "model" else "model_key" for k in GEOMETRY_KEYS], sort=True, dropna=False)
    detail, parts, verdicts, short, open_, undecided = [], [], [], [], [], []
    for _, fam in families:
        first = fam.iloc[0]
        key = {k: _plain(k, first[k]) for k in GEOMETRY_KEYS if k != "model"}  # the frame made ints of None floats
        key = {"model": first["model_key"] or None, **key}
        per_seq = []
        for seq, at in fam.groupby("seq", sort=True):
            median = float(at["share"].median())
            per_seq.append((int(seq), median))
            detail.append({**key, "family": _family_label(key), "seq": int(seq), "median_share": median,
                           "backends": {str(b): float(s) for b, s in zip(at["backend"], at["share"], strict=True)},
                           "noisy": int(at["noisy"].sum())})
        from_seq = None
        for seq, median in reversed(per_seq):  # the shortest S from which every longer one is dominated too
            if median < DOMINANT:
                break
            from_seq = seq
        longest, at_longest = per_seq[-1]
        interval = share_interval(fam[fam["seq"] == longest])
        verdicts.append(interval[0] >= DOMINANT)
        if interval[0] < DOMINANT <= interval[1]:  # too close to call either way
            undecided.append(f"{_family_label(key)} ({_pct(interval[0])}–{_pct(interval[1])} at S={longest})")
        elif at_longest < DOMINANT:
            crossing = projected_crossing(per_seq)
            if crossing is not None:  # still rising, or too few lengths to tell: longer lengths decide it
                open_.append(f"{_family_label(key)} ({_pct(at_longest)} at S={longest}; "
                             + (f"the trend reaches half near S≈{crossing:,}" if crossing else
                                "too few lengths to see a trend") + ")")
            else:
                short.append(f"{_family_label(key)} ({_pct(at_longest)} at S={longest})")
        where = (f"attention takes half or more from S={from_seq}" if from_seq is not None else
                 f"attention never takes half on this machine (up to S={longest})")
        label = f"{_family_label(key)}: " if families.ngroups > 1 else ""
        parts.append(f"{label}attention's share of the layer (median over "
                     f"{', '.join(sorted(fam['backend'].unique()))}): "
                     + ", ".join(f"S={s} {_pct(m)}" for s, m in per_seq)
                     + f" (95% interval at S={longest}: {_pct(interval[0])}–{_pct(interval[1])}); {where}")
    numbers = "; ".join(parts) + "."
    noisy = int(shares["noisy"].sum())
    if noisy:
        numbers += f" {noisy} of {len(shares)} shares rest on a timing flagged noisy."
    holds = all(verdicts)
    on = judged(span(shares["seq"], "S"), ", ".join(sorted(shares["dtype"].unique())),
                ", ".join(sorted(shares["backend"].unique())))
    if holds:
        return _result(HOLDS, numbers, detail, "", on)
    if undecided and not short:  # a family that decides against it outweighs one too close to call
        why = ("at the longest S, attention's share is within the noise of its timings and the spread of its "
               f"backends from half: its 95% interval (each time drawn within its CI, the backends resampled) "
               f"straddles {_pct(DOMINANT)} in " + "; ".join(undecided) + ". More rounds per case (a larger "
               f"--budget) or longer lengths (`{spec('layer').command_with(seq=_longer(shares))}`) decide it.")
        return _result(INCONCLUSIVE, numbers, detail, why, on)
    if short:
        why = ("attention takes under half the layer at the longest S measured, and its share does not rise across "
               f"≥{LAYER_SPAN}× of lengths, in " + "; ".join(short) + ".")
        return _result(FAILS, numbers, detail, why, on)
    why = ("attention takes under half the layer at the longest S measured, but its share is still rising in "
           + "; ".join(open_) + ": the projections grow as S and attention as S², so longer sequences decide it "
           f"(`{spec('layer').command_with(seq=_longer(shares))}`).")
    return _result(INCONCLUSIVE, numbers, detail, why, on)


def share_interval(at: pd.DataFrame) -> tuple[float, float]:
    """95% interval of the median over backends of attention's share at one S (rows of attention_share)."""
    def frame(scope: str) -> pd.DataFrame:
        return pd.DataFrame({"median_s": at[f"{scope}_s"], "ci_low_s": at[f"{scope}_ci_low_s"],
                             "ci_high_s": at[f"{scope}_ci_high_s"]})

    rng = np.random.default_rng(SEED)
    return median_over(drawn(frame("attention"), rng=rng) / drawn(frame("layer"), rng=rng), rng)


def projected_crossing(per_seq: list[tuple[int, float]]) -> int | None:
    """Where attention's share would reach half, from its trend: None when the data decide that it does not
    (>= MIN_LAYER_LENGTHS lengths over >= LAYER_SPAN x and a share that does not rise), 0 when too few lengths
    show no trend, else the length at which attention's time over the rest's, fitted as ∝ S^k over the measured
    lengths, reaches 1."""
    seqs = [s for s, _ in per_seq]
    odds = [min(max(m, 1e-6), 1 - 1e-6) for _, m in per_seq]
    odds = [m / (1 - m) for m in odds]
    if len(seqs) < 2:
        return 0
    k = float(pd.Series(odds).map(math.log).cov(pd.Series(seqs).map(math.log))
              / pd.Series(seqs).map(math.log).var())
    if k <= RISING:
        enough = len(seqs) >= MIN_LAYER_LENGTHS and seqs[-1] >= LAYER_SPAN * seqs[0]
        return None if enough else 0
    return int(seqs[-1] * (1 / odds[-1]) ** (1 / k))


def _longer(shares: pd.DataFrame) -> str:
    """Lengths that would decide it: the longest measured and the next three doublings."""
    longest = int(shares["seq"].max())
    return ",".join(str(longest * 2 ** i) for i in range(4))


def _result(verdict: str, numbers: str, detail: list[dict] | None = None, why: str = "", on: str = "") -> Verdict:
    return Verdict(CLAIM, verdict, numbers, why, tuple(detail or ()), judged_on=on)
