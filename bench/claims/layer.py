"""Claim: attention dominates the layer at long sequence lengths.

Question `layer`: both scopes (the attention call alone and the layer around it) of one geometry, for the textbook
and the fused backend, at every length up to the first one where the cost model says the fused kernel's attention
passes DOMINANT of the layer on this machine, and the next one (to see it pass), at least MIN_LAYER_LENGTHS lengths.
The judge: attention's share of the layer per family at its longest length, against DOMINANT, from the shares
bench.analysis.layer_share pairs (read lazily, in the judge).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from bench.analysis.conditions import MORE_ROUNDS, SHARE, amount, combine, condition, decide_by, interval_text, listing
from bench.analysis.verdict import FAILS, INCONCLUSIVE, NOT_MEASURED, Series, Verdict, judged, span
from bench.backends import get_backend
from bench.claims.question import Context, Question, main_dtypes, pair, plain
from bench.claims.spec import PREFILL, ClaimSpec
from bench.counts.metrics import projection_flops
from bench.plan.cost import call_s
from bench.problem.case import Case
from bench.results.meta import RunMeta
from bench.results.record import new_record

if TYPE_CHECKING:
    import pandas as pd


DOMINANT = 0.5  # attention "dominates" the layer when it takes at least this share of the layer's time
MIN_LAYER_LENGTHS, LAYER_SPAN = 3, 4  # "does not hold" needs this many lengths over this span, the share not rising
RISING = 0.2  # attention's time over the rest's, fitted as ∝ S^k: k above this is a share still on its way up

SPECS = (ClaimSpec("layer", "Attention dominates the layer at long sequence lengths",
                   "bench.claims.layer:attention_dominates", "layer",
                   {"backend": "naive,sdpa-flash", "kv-heads": "8", "seq": "256,512,1024,2048,4096",
                    "scope": "attention,layer", **PREFILL}, ratio="attention's share of the layer"),)
CLAIM, COMMAND = SPECS[0].text, SPECS[0].command


# -- the question ---------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """A plain prefill, of the attention call alone or of the layer around it."""
    return plain(c) and c.phase == "prefill" and c.shape.scope in ("attention", "layer")


def predicted_share(case: Case, ctx: Context) -> float:
    """The cost model's share of attention in the layer at this case's shape: attention's predicted call over it
    plus the projections' FLOPs at the GEMM ceiling (they are GEMMs)."""

    b = get_backend(case.backend)
    alone = Case(case.backend, dataclasses.replace(case.shape, scope="attention"), case.phase, case.pass_, case.device)
    attention = call_s(new_record(alone, b.memory, threads=0), ctx.calibration, b.memory)
    gemm = ctx.calibration.gemm(case.shape.dtype)
    projections = projection_flops(case.shape, case.pass_) / (gemm or 1e10)
    return attention / (attention + projections)


def crossing_length(cases: list[Case], backend: str, ctx: Context) -> int | None:
    """The shortest length of these cases at which the cost model puts `backend`'s attention at half the layer or
    more, on this machine's ceilings; None when it never does within them."""
    for c in sorted((c for c in cases if c.backend == backend), key=lambda c: c.shape.seq_q):
        if predicted_share(c, ctx) >= DOMINANT:
            return c.shape.seq_q
    return None


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Both scopes of one geometry, for the textbook and the fused backend, at every length up to where the fused
    kernel's attention is predicted to pass half the layer (at least MIN_LAYER_LENGTHS lengths)."""
    def geometry(c: Case) -> tuple:
        s = c.shape
        return (c.backend, s.dtype, s.n_heads, s.n_kv_heads, s.head_dim, s.batch, s.mask.label)

    layered = {geometry(c) for c in cases if c.shape.scope == "layer"}
    twins = [c for c in cases if geometry(c) in layered]
    dtypes = main_dtypes(twins, ctx)
    twins = [c for c in twins if c.shape.dtype == dtypes[0]] if dtypes else []
    if not twins:
        return []
    backends = pair(twins, ctx, lambda c: c.shape.seq_q * 2 + (c.shape.scope == "layer"))
    twins = [c for c in twins if c.backend in backends]
    seqs = sorted({c.shape.seq_q for c in twins if c.shape.scope == "layer"})
    judge = backends[-1]  # the fused kernel: attention reaches half the layer latest with it
    cross = crossing_length([c for c in twins if c.shape.scope == "layer"], judge, ctx)
    # every length up to the predicted crossing and the next one (to see it pass), at least MIN_LAYER_LENGTHS
    upto = len(seqs) if cross is None else seqs.index(cross) + 2
    keep = seqs[:max(upto, MIN_LAYER_LENGTHS)]
    return [c for c in twins if c.shape.seq_q in keep]


QUESTIONS = (Question("layer", picks, least),)


# -- the judge ------------------------------------------------------------------------------------------------------
def attention_dominates(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Does attention take at least half of the layer's time at the longest S measured?

    Judged per condition: a backend in a family (one geometry, dtype, mask, batch and pass) at that backend's longest
    S there, its share (attention alone over the layer around it) with a 95% interval from those two cases' own
    timings (each drawn within its CI), against DOMINANT; bench.analysis.conditions' rule gives each condition's word
    and the claim's. A condition under half whose share is still rising with S, or measured at too few lengths to
    tell (projected_crossing), is inconclusive: longer lengths decide it. numbers gives the median share over the
    backends at each S and the smallest S from which attention takes half or more (at that S and every longer one
    measured), or says it never does on this machine. detail: one dict per family and S.
    """
    import pandas as pd

    from bench.analysis.layer_share import GEOMETRY_KEYS, attention_share, plain_value

    scope = df["scope"].fillna("attention") if "scope" in df else pd.Series("attention", index=df.index)
    if not (scope == "layer").any():
        return _result(NOT_MEASURED, f"no layer-scope cases in this run (run `{COMMAND}`)")
    shares = pd.DataFrame(attention_share(df))
    if shares.empty:
        return _result(NOT_MEASURED, "layer-scope cases ran, but none is ok beside an ok attention-alone case of the "
                                     f"same shape and backend (run `{COMMAND}`)")
    shares["model_key"] = shares["model"].fillna("")  # groupby drops None keys
    families = shares.groupby([k if k != "model" else "model_key" for k in GEOMETRY_KEYS], sort=True, dropna=False)
    detail, parts, found, points, wheres = [], [], [], [], []
    for _, fam in families:
        first = fam.iloc[0]
        key = {k: plain_value(k, first[k]) for k in GEOMETRY_KEYS if k != "model"}  # the frame made ints of None floats
        key = {"model": first["model_key"] or None, **key}
        per_seq = []
        for seq, at in fam.groupby("seq", sort=True):
            median = float(at["share"].median())
            per_seq.append((int(seq), median))
            points.append(({**_fields(key), "seq": int(seq)}, median))
            detail.append({**key, "family": _family_label(key), "seq": int(seq), "median_share": median,
                           "backends": {str(b): float(s) for b, s in zip(at["backend"], at["share"], strict=True)},
                           "noisy": int(at["noisy"].sum())})
        from_seq = None
        for seq, median in reversed(per_seq):  # the shortest S from which every longer one is dominated too
            if median < DOMINANT:
                break
            from_seq = seq
        found += [_condition(mine, key) for _, mine in fam.groupby("backend", sort=True)]
        where = (f"attention takes half or more from S={from_seq}" if from_seq is not None else
                 f"attention never takes half on this machine (up to S={per_seq[-1][0]})")
        label = f"{_family_label(key)}: " if families.ngroups > 1 else ""
        wheres.append(label + where)
        parts.append(f"{label}attention's share of the layer (median over "
                     f"{', '.join(sorted(fam['backend'].unique()))}): "
                     + ", ".join(f"S={s} {amount(m, SHARE)}" for s, m in per_seq) + f"; {where}")
    notes = ". ".join(w[0].upper() + w[1:] for w in wheres) + "."
    numbers = ("; ".join(parts) + ". Judged per backend at its longest S, as attention's time over the layer's "
               f"(half or more holds): {listing(found)}.")
    noisy = int(shares["noisy"].sum())
    if noisy:
        numbers += f" {noisy} of {len(shares)} shares rest on a timing flagged noisy."
    series = Series("median share of the layer over its backends, per length", SHARE, tuple(points))
    on = judged(span(shares["seq"], "S"), ", ".join(sorted(shares["dtype"].unique())),
                ", ".join(sorted(shares["backend"].unique())))
    why = []
    short = [c for c in found if c.verdict == FAILS]
    if short:
        why.append("attention takes under half the layer at the longest S measured, and its share does not rise "
                   f"across ≥{LAYER_SPAN}× of lengths, in " + "; ".join(f"{c.name} ({amount(c.ratio, SHARE)})"
                                                                        for c in short) + ".")
    rising = [c for c in found if c.verdict == INCONCLUSIVE and c.why]
    if rising:
        why.append("attention takes under half the layer at the longest S measured, but its share is still rising in "
                   + "; ".join(f"{c.name} ({c.why})" for c in rising) + ": the projections grow as S and attention "
                   f"as S², so longer sequences decide it (`{SPECS[0].command_with(seq=_longer(shares))}`).")
    close = [c for c in found if c.verdict == INCONCLUSIVE and not c.why]
    if close:
        why.append(f"at the longest S, attention's share straddles {amount(DOMINANT, SHARE)} within its own timings' "
                   "interval in " + "; ".join(f"{c.name} ({interval_text(c.low, c.high, SHARE)})" for c in close)
                   + f". {decide_by(MORE_ROUNDS, f'longer lengths (`{SPECS[0].command_with(seq=_longer(shares))}`)')}.")
    return _result(combine(found), numbers, detail, " ".join(why), on, tuple(found), notes=notes,
                   noisy=(noisy, len(shares)), series=(series,))


def _fields(family: dict) -> dict[str, Any]:
    """A family's key fields: its model or its heads, then dtype, mask, batch, pass and what else sets it apart."""
    heads = ({"model": family["model"]} if family["model"] else
             {"n_heads": family["n_heads"], "n_kv_heads": family["n_kv_heads"], "head_dim": family["head_dim"]})
    shown = {"model", "n_heads", "n_kv_heads", "head_dim", "dtype", "mask", "batch", "pass", "phase", "variant"}
    rest = {k: v for k, v in family.items() if k not in shown and v not in (None, "", "none")}
    return {**heads, "dtype": family["dtype"], "mask": family["mask"], "batch": family["batch"],
            "pass": family["pass"], **rest}


def _condition(mine: pd.DataFrame, family: dict) -> Any:
    """One backend's condition in a family: its share at its longest S, with its interval, against DOMINANT; under
    half but still rising (or at too few lengths to tell), inconclusive with the reason."""
    from bench.analysis.layer_share import share_interval

    mine = mine.sort_values("seq")
    last = mine.iloc[[-1]]
    row = last.iloc[0]
    c = condition({"backend": row["backend"], **_fields(family), "seq": int(row["seq"])}, float(row["share"]),
                  share_interval(last), DOMINANT, holds_above=True, unit=SHARE,
                  pairs=[(row["attention_case_id"], row["layer_case_id"])])
    if c.verdict == FAILS:
        crossing = projected_crossing([(int(s), float(v)) for s, v in zip(mine["seq"], mine["share"], strict=True)])
        if crossing is not None:
            c = dataclasses.replace(c, verdict=INCONCLUSIVE, why=f"the trend reaches half near S≈{crossing:,}"
                                    if crossing else "too few lengths to see a trend")
    return c


def projected_crossing(per_seq: list[tuple[int, float]]) -> int | None:
    """Where attention's share would reach half, from its trend: None when the data decide that it does not
    (>= MIN_LAYER_LENGTHS lengths over >= LAYER_SPAN x and a share that does not rise), 0 when too few lengths
    show no trend, else the length at which attention's time over the rest's, fitted as ∝ S^k over the measured
    lengths, reaches 1."""
    import pandas as pd

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


def _family_label(key: dict) -> str:
    geometry = key["model"] or f"Hq={key['n_heads']} Hkv={key['n_kv_heads']} D={key['head_dim']}"
    shown = {"model", "n_heads", "n_kv_heads", "head_dim", "dtype", "mask", "batch", "pass", "phase", "variant"}
    rest = "".join(f" · {k}={v}" for k, v in key.items() if k not in shown and v not in (None, "", "none"))
    return f"{geometry} · {key['dtype']} · {key['mask']} · B={key['batch']} · {key['pass']}{rest}"


def _longer(shares: pd.DataFrame) -> str:
    """Lengths that would decide it: the longest measured and the next three doublings."""
    longest = int(shares["seq"].max())
    return ",".join(str(longest * 2 ** i) for i in range(4))


def _result(verdict: str, numbers: str, detail: list[dict] | None = None, why: str = "", on: str = "",
            conditions: tuple = (), **more: Any) -> Verdict:

    return Verdict(CLAIM, verdict, numbers, why, tuple(detail or ()), judged_on=on, conditions=conditions, **more)
