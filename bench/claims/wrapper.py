"""Claim: transformers' attention paths cost little over the torch kernels they call — its sdpa path (a model's
default attn_implementation) within 1.2× of torch SDPA's fastest kernel at the same shapes.

Question `wrapper`: each wrapper's case (a backend with the `wraps` trait) beside the torch kernels it calls at the
same shape and phase: the one it wraps and those that one chooses among; a wrapper without them cannot be judged.

Judged per condition: each wrapper (hf-sdpa wraps sdpa, hf-flex wraps flex, hf-eager the textbook naive) × the kind
of shape it ran at (bench.backends.hf.mask_kind): where transformers skips its mask (its sdpa path at one query or a
square call, where it makes the same is_causal call torch's sdpa makes) and where it builds one (a chunked prefill,
Sq < Skv; a window shorter than the keys; eager and flex everywhere). A condition's ratio is the geometric mean, over
its shapes, of the wrapper's time over the fastest of the backend it wraps and the kernels that one chooses among at
the same shape, with its interval from the cases' CIs (bench.analysis.rivals, per shape family, merged); the claim's
word is combine() over the conditions, so holding where the mask is skipped and failing where it is built reads
depends, naming which. The mask transformers builds is built once per forward and kept, so the ratio is one layer's
attention: what the wrapper's mask (a boolean or additive tensor where torch's kernel takes its causal path) and its
K/V handling cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.analysis.conditions import Condition, combine, condition, listing, undecided_why
from bench.analysis.traits import WRAPPED
from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, NOT_MEASURED, Verdict, judged, span
from bench.backends import BACKENDS, get_backend
from bench.backends.hf import BUILDS, SKIPS, mask_kind
from bench.claims.question import Context, Question, runs_here
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.problem.masks import Mask
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


WRAPPER_WITHIN = 1.2  # transformers' paths within this factor of the torch kernels they call
TIED = 1.05  # transformers' default implementation within this factor of the fastest is tied with it (the timings'
# own noise on a shared machine), so the advice keeps the default (bench.report.hf_choice)

SPECS = (ClaimSpec("wrapper", f"transformers' attention paths run within {WRAPPER_WITHIN:g}× of the torch kernels "
                   "they call (its sdpa path: torch SDPA's)", "bench.claims.wrapper:wrapper_cost", "wrapper",
                   # a square prefill and a one-query decode, where transformers' sdpa path skips its mask, and a
                   # chunked prefill (256 queries against a 1,024-token cache), where every path builds one
                   {"backend": "hf-eager,naive,hf-sdpa,sdpa,hf-flex,flex", "model-config": "llama-3-8b",
                    "dtype": "fp32", "seq": "1024", "phase": "prefill,decode", "decode-q": "1,256",
                    "decode-kv": "1024"}, ratio="transformers path / fastest kernel it calls"),)
CLAIM, COMMAND = SPECS[0].text, SPECS[0].command


# -- the question ---------------------------------------------------------------------------------------------------
def _rivals(name: str) -> tuple[str, ...]:
    """The torch kernels a wrapping backend (transformers' paths) calls: the one it wraps and those that one picks
    among; () for a backend that wraps none."""
    wraps = get_backend(name).wraps
    return (wraps, *get_backend(wraps).chooses) if wraps else ()


def picks(c: Case) -> bool:
    """A model's attention through a wrapping backend, or through a torch kernel some wrapper calls."""
    return c.shape.model is not None and c.phase in ("prefill", "decode") and (
        bool(_rivals(c.backend)) or any(c.backend in _rivals(n) for n in BACKENDS))


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Each wrapper's case beside the kernels it calls at the same shape and phase (a wrapper without them cannot
    be judged, so it is left out)."""
    def key(c: Case) -> tuple:
        return (c.shape, c.phase, c.pass_)

    out: dict[str, Case] = {}
    for c in cases:
        twins = [t for t in cases if t.backend in _rivals(c.backend) and key(t) == key(c) and runs_here(t, ctx)]
        if twins and runs_here(c, ctx):
            out.update({x.id: x for x in (c, *twins)})
    return list(out.values())


QUESTIONS = (Question("wrapper", picks, least),)


# -- the judge ------------------------------------------------------------------------------------------------------
def _kinds(df: pd.DataFrame, wrapper: str) -> pd.Series:
    """Each row's shape kind (SKIPS or BUILDS) for `wrapper`'s path: a shape's kind, so its rivals' rows share it."""
    import pandas as pd


    return pd.Series([mask_kind(wrapper, int(q), int(kv), Mask.parse(str(m)))
                      for q, kv, m in zip(df["seq_q"], df["seq_kv"], df["mask"], strict=True)], index=df.index,
                     dtype=object)


def overheads(df: pd.DataFrame) -> list[dict]:
    """Per wrapper, shape kind ("kind") and shape family: its time against the fastest kernel it could have called
    directly, with the shapes' query and key lengths ("sizes")."""
    from bench.analysis.rivals import against_fastest

    out = []
    for wrapper, rivals in WRAPPED.items():
        kinds = _kinds(df, wrapper)
        for kind in (SKIPS, BUILDS):
            mine = df[kinds == kind]
            ran = mine[(mine["backend"] == wrapper) & (mine["status"] == "ok")]
            sizes = sorted({(int(q), int(kv)) for q, kv in zip(ran["seq_q"], ran["seq_kv"], strict=True)})
            out += [{k: v for k, v in d.items() if k != "condition"} | {"kind": kind, "sizes": sizes}
                    for d in against_fastest(mine, wrapper, rivals, WRAPPER_WITHIN)]
    return out


def by_kind(found: list[dict]) -> list[Condition]:
    """One condition per wrapper × shape kind: the geometric mean of its families' ratios and interval ends, each
    family weighted by its shapes (the geometric mean over all the kind's shapes), and the (wrapper, fastest kernel)
    case pairs behind it, for a run to re-measure."""
    import pandas as pd

    from bench.analysis.frames import geomean

    def mean(families: list[dict], key: str) -> float:
        return geomean([d[key] for d in families], [d["shapes"] for d in families])

    out = []
    for subject, kind in dict.fromkeys((d["subject"], d["kind"]) for d in found):
        mine = [d for d in found if (d["subject"], d["kind"]) == (subject, kind)]
        sizes = ", ".join(f"{q:,}×{kv:,}" for q, kv in mine[0]["sizes"])
        fastest = pd.Series([d["fastest"] for d in mine]).mode().iloc[0]
        out.append(condition({"backend": subject, "where": f"transformers {kind}"}, mean(mine, "ratio"),
                             (mean(mine, "low"), mean(mine, "high")), WRAPPER_WITHIN, holds_above=False,
                             pairs=[p for d in mine for p in d["pairs"]],
                             facts={"against": fastest, "sizes": f"Sq×Skv {sizes}"}))
    return out


def _short(c: Condition) -> str:
    """'hf-sdpa where transformers builds the mask'."""
    return f"{c.fields['backend']} where {c.fields['where']}"


def wrapper_cost(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Is each transformers path within WRAPPER_WITHIN of the kernel it wraps, where transformers skips its mask and
    where it builds one?"""

    found = overheads(df)
    if not found:
        return Verdict(CLAIM, NOT_MEASURED, "no transformers path timed beside the kernel it calls "
                       f"(`{COMMAND}`, with `pip install 'attnbench[hf]'`)")
    found_conditions = by_kind(found)
    verdict = combine(found_conditions)
    numbers = (f"a transformers path's time over the fastest torch kernel it calls at the same shape, geometric mean "
               f"per path and shape kind (within {WRAPPER_WITHIN:g}× holds): {listing(found_conditions)}.")
    if all(d["kind"] == SKIPS for d in found):  # judged only where transformers makes torch's own is_causal call
        numbers += (" Nothing was timed where transformers builds its mask (a chunked prefill: "
                    f"`{COMMAND}`).")
    holding = [_short(c) for c in found_conditions if c.verdict == HOLDS]
    failing = [c for c in found_conditions if c.verdict == FAILS]
    why = ""
    if failing:
        worst = max(failing, key=lambda c: c.ratio)
        if BUILDS in worst.fields["where"]:
            cause = "transformers hands the kernel its mask tensor where torch's kernel takes its causal path"
            if worst.fields["backend"] == "hf-sdpa":  # sdpa_attention_forward: no enable_gqa beside a mask
                cause += ", and repeats K/V to every query head to go with it"
        else:
            cause = "transformers makes torch's own call here, so the cost is its own K/V handling and copies"
        why = f"{_short(worst)} takes {worst.ratio:.2f}× the kernel's time: {cause}."
        if verdict == DEPENDS:
            why = f"Holds for {'; '.join(holding)}; does not for {'; '.join(_short(c) for c in failing)}. " + why
    open_why = undecided_why(found_conditions)
    why = " ".join(w for w in (why, open_why) if w)
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(found), conditions=tuple(found_conditions),
                   judged_on=judged(span([s for d in found for s in d["seq_kv"]], "S"),
                                    ", ".join(sorted({d["subject"] for d in found} | {d["fastest"] for d in found}))))
