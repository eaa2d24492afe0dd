"""Claims: sparse attention beats the best dense kernel from some length S* at its budget (`sparse`), and a sparse
kernel gets within 2× of the ideal speedup 1/density over its dense run (`sparse-ideal`).

A line, its dense twins, the best dense kernel and a kernel's speedup twin are bench.analysis.sparse_line's. The
questions (every sparse kernel: the claims hold on one that wins; prefill first, then the cheapest line):
- sparse:       per sparse kernel, one line at its shortest >= MIN_SPARSE_LENGTHS lengths spanning >= SPARSE_SPAN x,
                with every dense twin the run offers at each length (the best dense kernel is among them);
- sparse-ideal: per sparse kernel, one line's case at its longest length, with its dense twins.
Each claim is judged per condition (bench.analysis.conditions): one method line of a kernel that executes its keep-set
sparsely (bench.analysis.traits.SPARSE_KERNELS; a dense kernel given the keep-set as a mask skips no work, and no
question funds its lines) at one phase, mask, dtype and head geometry, at its longest length, its ratio's interval from
each time drawn within its own CI (sparse-ideal: its speedup twin's case over the kernel's is the pair a run re-measures
in interleaved blocks, the block's time ratio over the ideal 1/density its share); the data are
bench.analysis.sparse_cost's (each sparse case beside the best dense kernel and its speedup twin, and each line's S*).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bench.analysis import sparse_line
from bench.analysis.conditions import (
    MORE_ROUNDS,
    OF_IDEAL,
    Condition,
    between,
    combine,
    condition,
    decide_by,
    spans,
    undecided_why,
)
from bench.analysis.traits import SPARSE_KERNELS
from bench.analysis.verdict import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_MEASURED,
    Verdict,
    judged,
    noisy_count,
    noisy_note,
    span,
)
from bench.claims.question import Context, Question, runs_here
from bench.claims.spec import PREFILL, ClaimSpec
from bench.problem.case import Case
from bench.problem.sparsity import fraction_label
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


SPARSE_BEATS, SPARSE_LOSES = 0.95, 1.05  # a sparse method's cost over the best dense kernel's: beats / loses
MIN_SPARSE_LENGTHS, SPARSE_SPAN = 3, 4  # "sparse never wins" is a finding over this many lengths spanning this factor
IDEAL_SHARE = 0.5  # "within 2× of the ideal speedup 1/density"

# the least of both sparse claims (`--profile sparse` measures every budget, in about half an hour on 2 cores)
# (the default profile runs exactly these: bench.profiles builds its sparse part from this spec)
SPARSE = {"backend": "sdpa-flash,flex,topk-gather", "kv-heads": "2", "seq": "512,1024,2048,4096",
          "sparsity": "none,block:128:0.125,topk:256", **PREFILL}
SPECS = (ClaimSpec("sparse", "Sparse attention beats the best dense kernel from some length S* at its budget",
                   "bench.claims.sparse:sparse_crossover", "sparse", SPARSE, ratio="cost / best dense kernel",
                   figures=("sparse_time",)),
         ClaimSpec("sparse-ideal", f"A sparse kernel gets within {1 / IDEAL_SHARE:g}× of the ideal speedup 1/density "
                   "over its dense run", "bench.claims.sparse:sparse_speedup", "sparse-ideal", SPARSE,
                   ratio="speedup over its dense run", figures=("sparse_speedup", "indexer_share")))
CROSSOVER_CLAIM, SPEEDUP_CLAIM = SPECS[0].text, SPECS[1].text
COMMAND = SPECS[0].command  # the least that answers both claims (`--profile sparse`: every budget)


# -- the questions --------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """Sparse cases, and the dense attention calls they are compared with."""
    s = c.shape
    return s.scope == "attention" and s.serving is None and not s.score.variants and c.pass_ == "fwd"


def _lines(cases: list[Case], ctx: Context) -> tuple[list[list[Case]], dict[tuple, list[Case]]]:
    """The sparse kernels' lines (shortest first) and the dense cases that run here, by twin key."""
    dense: dict[tuple, list[Case]] = defaultdict(list)
    methods: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        if not runs_here(c, ctx):
            continue
        fields = sparse_line.case_fields(c)
        if not c.shape.sparsity.sparse:
            dense[sparse_line.twin_key(fields)].append(c)
        elif sparse_line.executes_sparsely(c.backend):
            methods[sparse_line.line_key(fields)].append(c)
    lines = [line for cases_ in methods.values()
             for line in sparse_line.split(cases_, lambda c: c.shape.seq_kv, lambda c: c.shape.batch)]
    return [sorted(line, key=lambda c: c.shape.seq_kv) for line in lines], dense


def _with_twins(line: list[Case], dense: dict[tuple, list[Case]]) -> list[Case] | None:
    """The line's cases and every dense twin of each, or None when a length has none to compare with."""
    twins = [dense.get(sparse_line.twin_key(sparse_line.case_fields(c)), []) for c in line]
    if not all(twins):
        return None
    return line + [t for ts in twins for t in ts]


def _cheapest_per_kernel(found: list[tuple[str, bool, float, list[Case]]]) -> list[Case]:
    """Of (backend, not prefill, cost, cases) candidates, each sparse kernel's first (prefill, then cheapest)."""
    best: dict[str, tuple[bool, float, list[Case]]] = {}
    for backend, later, cost, chosen in found:
        if backend not in best or (later, cost) < best[backend][:2]:
            best[backend] = (later, cost, chosen)
    out: list[Case] = []
    for _, _, chosen in best.values():
        out += [c for c in chosen if c not in out]
    return out


def crossover_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Per sparse kernel, one line at its shortest >= MIN_SPARSE_LENGTHS lengths spanning >= SPARSE_SPAN x, with the
    dense twins at each length; prefill first, then the cheapest (every kernel: the claim holds on one that wins)."""
    lines, dense = _lines(cases, ctx)
    found = []
    for line in lines:
        seqs = sorted({c.shape.seq_kv for c in line})
        cut = next((seqs[n - 1] for n in range(MIN_SPARSE_LENGTHS, len(seqs) + 1)
                    if seqs[n - 1] >= SPARSE_SPAN * seqs[0]), None)
        if cut is None:
            continue
        chosen = _with_twins([c for c in line if c.shape.seq_kv <= cut], dense)
        if chosen is not None:
            found.append((line[0].backend, line[0].phase != "prefill", ctx.cost(chosen), chosen))
    return _cheapest_per_kernel(found)


def speedup_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Per sparse kernel, one case at the longest length of a line, with its dense twins; prefill first, then the
    cheapest."""
    lines, dense = _lines(cases, ctx)
    found = []
    for line in lines:
        chosen = _with_twins(line[-1:], dense)
        if chosen is not None:
            found.append((line[0].backend, line[0].phase != "prefill", ctx.cost(chosen), chosen))
    return _cheapest_per_kernel(found)


QUESTIONS = (Question("sparse", picks, crossover_least), Question("sparse-ideal", picks, speedup_least))


# -- the judges -----------------------------------------------------------------------------------------------------
def length_word(phase: str) -> str:
    return "S" if phase == "prefill" else "KV"


def span_text(lengths: list[int]) -> str:
    return f"{lengths[0]}–{lengths[-1]}" if len(lengths) > 1 else str(lengths[0])


def beats(key: dict[str, Any], ratio: float, interval: tuple[float, float], lengths: list[int], word: str,
          **more: Any) -> Condition:
    """A method line's word at its longest length: holds when the whole interval is ≤ SPARSE_BEATS, does not hold
    when it is wholly ≥ SPARSE_LOSES over lengths that can show it never wins (MIN_SPARSE_LENGTHS spanning
    SPARSE_SPAN×: the crossover moves with length), else open, saying why."""


    found = between(key, ratio, interval, SPARSE_BEATS, SPARSE_LOSES, **more)
    longest = lengths[-1]
    if found.verdict == INCONCLUSIVE:  # within the spec's band around dense, or straddling one of its edges
        return replace(found, why=f"level with dense at {word} {longest} (its interval reaches into "
                       f"{SPARSE_BEATS:g}–{SPARSE_LOSES:g}×): {decide_by('longer lengths', MORE_ROUNDS).lower()}")
    if found.verdict == FAILS and not spans(lengths, MIN_SPARSE_LENGTHS, SPARSE_SPAN):
        longer = SPECS[0].command_with(seq=",".join(str(longest * k) for k in (1, 2, SPARSE_SPAN)))
        return replace(found, verdict=INCONCLUSIVE, why=f"loses at {word} {span_text(lengths)} only, too few lengths "
                       f"(≥ {MIN_SPARSE_LENGTHS} spanning ≥ {SPARSE_SPAN}×) to say it never wins (longer lengths "
                       f"decide it: `{longer}`)")
    return found


def crossover_lines(costs: pd.DataFrame) -> pd.DataFrame:
    """bench.analysis.sparse_cost.crossovers at SPARSE_BEATS, each method line judged: its `condition` (beats) in
    place of its name."""
    from bench.analysis.sparse_cost import crossovers

    lines = crossovers(costs, SPARSE_BEATS)
    if lines.empty:
        return lines
    found = [beats(r["key"], float(r["last_ratio"]), r["last_interval"], r["lengths"], length_word(r["phase"]),
                   facts={"s_star": r["s_star"], "against": r["best_dense"], "lengths": span_text(r["lengths"])})
             for r in lines.to_dict("records")]
    return lines.drop(columns="key").assign(condition=found)


def _why(found: list[Condition], failing: str, decide: str) -> str:
    """The claim's `why`: the conditions that fail and what the numbers say of them, then the open ones."""

    fails = [c.name for c in found if c.verdict == FAILS]
    holds = [c.name for c in found if c.verdict == HOLDS]
    said = (f"{'; '.join(fails)}: {failing}" + (f"; it holds for {'; '.join(holds)}" if holds else "") + "."
            if fails else "")
    return " ".join(p for p in (said, undecided_why(found, decide)) if p)


def kernels_costs(df: pd.DataFrame) -> pd.DataFrame:
    """bench.analysis.sparse_cost.sparse_costs of the kernels that execute their keep-set sparsely."""
    from bench.analysis.sparse_cost import sparse_costs

    costs = sparse_costs(df)
    return costs if costs.empty else costs[costs["backend"].isin(SPARSE_KERNELS)]


def sparse_crossover(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per condition — a sparse method (sparsity × backend, so its budget) × phase, mask and dtype — its cost per
    forward over the best dense kernel's at its longest length, with a 95% interval (each time drawn within its CI):
    holds when the whole interval is ≤ SPARSE_BEATS, does not hold when it is wholly ≥ SPARSE_LOSES over ≥
    MIN_SPARSE_LENGTHS lengths spanning ≥ SPARSE_SPAN×, else inconclusive; S* is reported per condition. The claim's
    word is bench.analysis.conditions' rule over them (holds, does not hold, depends, inconclusive)."""
    import pandas as pd


    costs = kernels_costs(df)
    if costs.empty:
        return Verdict(CROSSOVER_CLAIM, NOT_MEASURED, f"no case of a sparse kernel beside a dense case of its shape "
                       f"(`{COMMAND}`)")
    lines = crossover_lines(costs).sort_values(["phase", "mask", "budget", "last_ratio"], kind="stable")
    found = list(lines["condition"])
    said = []
    for c, (_, line) in zip(found, lines.iterrows(), strict=True):
        word, longest = length_word(line["phase"]), line["lengths"][-1]
        beat = f"S*={int(line['s_star'])}" if pd.notna(line["s_star"]) else f"none up to {longest}"
        said.append(f"{c.name}, {word} {span_text(line['lengths'])} against {line['best_dense']}: {beat} "
                    f"({c.ratio:.2f}× at {longest}, 95% {c.low:.2f}–{c.high:.2f}): {c.verdict}")
    detail = [{**{k: v for k, v in r.items() if k != "condition"}, "lengths": list(r["lengths"]),
               "s_star": int(r["s_star"]) if pd.notna(r["s_star"]) else None,  # a column with None is float
               **r["condition"].as_dict()} for r in lines.to_dict("records")]
    why = _why(found, f"still costs at least {SPARSE_LOSES:g}× the best dense kernel at its longest length: the work "
               "it skips does not yet pay for the keep-set's overheads (its masks, gathers or indexer)",
               decide_by(MORE_ROUNDS))
    numbers = ("each method's cost per forward (kernel + indexer + per-forward mask build) over the best dense "
               f"kernel's at its longest length, 95% interval from each time drawn within its CI (holds ≤ "
               f"{SPARSE_BEATS:g}×, does not hold ≥ {SPARSE_LOSES:g}×); S* = the length from which it stays ≤ "
               f"{SPARSE_BEATS:g}×: " + " · ".join(said) + "." + noisy_note(costs))
    on = judged(span(costs["length"], "length"), ", ".join(sorted(costs["budget"].unique())),
                ", ".join(sorted(costs["backend"].unique())))
    return Verdict(CROSSOVER_CLAIM, combine(found), numbers, why=why, detail=tuple(detail), judged_on=on,
                   conditions=tuple(found), noisy=noisy_count(costs))


def sparse_speedup(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per condition — a sparse kernel's method × phase, mask and dtype, at its longest length — its speedup over
    its dense run as a share of the ideal 1 / density, with a 95% interval (each time drawn within its CI): holds
    when the whole interval is ≥ IDEAL_SHARE, does not hold when it is wholly below, else inconclusive. The claim's
    word is bench.analysis.conditions' rule over them (holds, does not hold, depends, inconclusive)."""
    import pandas as pd

    from bench.analysis.interval import ratio_interval
    from bench.analysis.sparse_cost import SPEEDUP_COLUMNS, condition_key, method_lines

    costs = kernels_costs(df)
    if costs.empty:
        return Verdict(SPEEDUP_CLAIM, NOT_MEASURED, f"no case of a sparse kernel ({', '.join(SPARSE_KERNELS)}) "
                       f"beside a dense run of its shape (`{COMMAND}`)")
    found, said, detail, longest = [], [], [], []
    for _, line, split in method_lines(costs):
        r = line.loc[line["length"].idxmax()]
        low, high = (x / float(r["ideal"]) for x in ratio_interval(line.loc[[r.name]], "twin_", ""))
        found.append(condition(condition_key(r, split), float(r["share"]), (low, high), IDEAL_SHARE,
                               holds_above=True, unit=OF_IDEAL, pairs=((r["twin_case_id"], r["case_id"]),),
                               pair_scale=1 / float(r["ideal"]),
                               facts={"speedup": float(r["speedup"]), "ideal": float(r["ideal"]),
                                      "length": int(r["length"]), "against": r["twin"]}))
        said.append(f"{found[-1].name}: {r['speedup']:.2f}× of {r['ideal']:.3g}× (density "
                    f"{fraction_label(r['density'])}, {length_word(r['phase'])}={r['length']}, over {r['twin']}), "
                    f"{r['share']:.2f} of the ideal, 95% {low:.2f}–{high:.2f}: {found[-1].verdict}")
        detail.append({**{k: (v.item() if hasattr(v, "item") else v) for k, v in r[SPEEDUP_COLUMNS].items()},
                       **found[-1].as_dict()})
        longest.append(r)
    longest = pd.DataFrame(longest)
    why = _why(found, f"short of {IDEAL_SHARE:g} of the ideal speedup at its longest length: its per-block or "
               "per-gather overheads (partial blocks computed whole, gathered K/V rows, short rows per call) eat the "
               "work it skips", decide_by(MORE_ROUNDS, "longer lengths"))
    numbers = (f"speedup of the kernel over its dense run at the longest length, of the ideal 1/density, 95% interval "
               f"from each time drawn within its CI (holds at ≥ {IDEAL_SHARE:g} of it): " + " · ".join(said) + "."
               + noisy_note(costs))
    on = judged(span(longest["length"], "length"), ", ".join(sorted(longest["budget"].unique())),
                ", ".join(sorted(longest["backend"].unique())))
    return Verdict(SPEEDUP_CLAIM, combine(found), numbers, why=why, detail=tuple(detail), judged_on=on,
                   conditions=tuple(found), noisy=noisy_count(costs))
