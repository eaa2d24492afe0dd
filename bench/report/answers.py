"""A claim as a reader meets it: the sentence that answers it (its verdict, the condition that carries it, with its
number and where it was measured) and its conditions as a table, one column per key field that differs between them,
the fields they share said once above it.

The condition that carries a verdict: where it holds, the one nearest its bound (it holds even there); where it does
not, the one nearest holding (even that one falls short); where it depends, the one where it holds best; where it is
open, the one the claim waits on. Its label is written whole where the sentence stays within a table cell
(bench.report.blocks.CELL_LIMIT), else from the fields that set it apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.analysis.conditions import (
    COUNTED,
    FIELD_NAMES,
    FROM_BLOCKS,
    TIME_RATIO,
    Condition,
    amount,
    bound_text,
    interval_text,
    label,
    value_text,
)
from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, INCONCLUSIVE, NOT_JUDGED, NOT_MEASURED, Series, Verdict
from bench.claims.spec import ClaimSpec
from bench.report.blocks import CELL_LIMIT, Block, Fold, Para, Table, sentence

JUDGED = (HOLDS, FAILS, INCONCLUSIVE)
FOLD_ROWS = 8  # a conditions table longer than this folds away in HTML under a line that says how many
# facts a conditions table shows beside the ratio (the others are in claims.csv): their headers, and the unit of
# those that are ratios
SHOWN_FACTS = {"s_star": "S*", "against": "vs", "faster_from": "faster from KV", "dense_growth": "dense step growth",
               "grid_winner": "grid's winner", "shapes": "shapes", "speedup": "speedup", "ideal": "ideal speedup",
               "estimator": "estimated by"}
FACT_UNITS = {"dense_growth": TIME_RATIO, "speedup": TIME_RATIO, "ideal": TIME_RATIO}


def _margin(c: Condition) -> float:
    """How far a condition is on its holding side of its bound, as a log factor (negative: on the other side)."""
    if c.within:  # the band's room left on its nearer side
        return math.log(c.band) - abs(math.log(c.ratio / c.bound))
    if not (c.ratio > 0 and c.bound > 0) or math.isinf(c.ratio):
        return -math.inf if c.holds_above == (c.ratio <= 0) else math.inf if c.ratio > 0 else -math.inf
    m = math.log(c.ratio / c.bound)
    return m if c.holds_above else -m


def carrier(v: Verdict) -> Condition | None:
    """The condition that carries the verdict (module docstring); None without a judged one."""
    judged = [c for c in v.conditions if c.verdict in JUDGED]
    by_word = {w: [c for c in judged if c.verdict == w] for w in JUDGED}
    if v.verdict == HOLDS and by_word[HOLDS]:
        return min(by_word[HOLDS], key=_margin)
    if v.verdict == FAILS and by_word[FAILS]:
        return max(by_word[FAILS], key=_margin)
    if v.verdict == DEPENDS and by_word[HOLDS]:
        return max(by_word[HOLDS], key=_margin)
    if v.verdict == INCONCLUSIVE and by_word[INCONCLUSIVE]:
        return min(by_word[INCONCLUSIVE], key=lambda c: abs(_margin(c)))
    return None


def shared(conditions: Sequence[Condition]) -> dict[str, object]:
    """The key fields every one of these conditions has, with the same value."""
    if not conditions:
        return {}
    first = conditions[0].fields
    return {f: v for f, v in first.items() if all(c.fields.get(f, object()) == v for c in conditions)}


def _lead(v: Verdict, judged: list[Condition]) -> str:
    """'All 5 hold; the narrowest', 'None of 8 holds; the closest', '2 of 8 hold; the clearest', '1 of 4 open;
    waiting on', 'Its one condition'."""
    n, holds = len(judged), sum(c.verdict == HOLDS for c in judged)
    if n == 1:
        return "Its one condition"
    if v.verdict == HOLDS:
        return f"All {n} hold; the narrowest"
    if v.verdict == FAILS:  # a condition holding only at its bound does not sway such a claim (analysis.conditions)
        at = sum(c.holds_by_tolerance for c in judged)
        return f"None of {n} holds" + (f" clearly ({at} only at its bound)" if at else "") + "; the closest"
    if v.verdict == DEPENDS:
        return f"{holds} of {n} hold; the clearest"
    return f"{sum(c.verdict == INCONCLUSIVE for c in judged)} of {n} open; waiting on"


def answer(v: Verdict, spec: ClaimSpec, limit: int = CELL_LIMIT) -> str:
    """The sentence that answers a claim on one run, within `limit` characters."""
    if v.verdict == NOT_MEASURED:
        return "Not measured in this run: its section names the command that measures it."
    if v.answer and len(v.answer) <= limit:  # the claim's own sentence (Verdict.answer)
        return v.answer
    judged = [c for c in v.conditions if c.verdict in JUDGED]
    c = carrier(v)
    if c is None:  # judged without conditions (too few lengths, a short sweep): what it says first
        return sentence(v.why or v.numbers, limit)
    spread = "" if c.basis == COUNTED or c.low == c.high else f" (95% {interval_text(c.low, c.high, c.unit)})"
    bound = f"at its bound, {bound_text(c)}" if c.at_bound else f"bound {bound_text(c)}"
    apart = {f: x for f, x in c.key if f not in shared(judged)} or dict(c.key)
    for name, interval in ((c.name, spread), (label(apart), spread), (label(apart), "")):
        said = f"{_lead(v, judged)}: {name}, {spec.ratio} {amount(c.ratio, c.unit)}{interval}; {bound}."
        if len(said) <= limit:
            return said
    return said[:limit - 1] + "…"


def basis_text(c: Condition) -> str:
    if c.basis == FROM_BLOCKS:
        return f"{c.blocks} interleaved blocks"
    if c.basis == COUNTED:
        return "counted"
    return "case CIs" + (f" ({c.blocks} block{'s' * (c.blocks > 1)})" if c.blocks else "")


def conditions_blocks(spec: ClaimSpec, conditions: Sequence[tuple[str, Condition]],
                      several: bool = False) -> list[Block]:
    """A claim's conditions as a table, one row per (run, condition) (the run's column in a report of `several`
    runs), one column per key field that differs between them, then the ratio in its unit, its 95% interval, the
    bound, the word, the basis and the facts worth a column; what every row shares (key fields, bound, basis) said
    once above it. Folded away in HTML when long."""
    if not conditions:
        return []
    conds = [c for _, c in conditions]
    same = shared(conds) if len(conds) > 1 else {}
    fields = [f for f in dict.fromkeys(f for c in conds for f, _ in c.key) if f not in same]
    facts = [f for f in SHOWN_FACTS if any(f in dict(c.facts) for c in conds)]
    columns = {  # the judgment's columns, each a cell per condition
        "95% interval": ["—" if c.basis == COUNTED or c.low == c.high else interval_text(c.low, c.high, c.unit)
                         for c in conds],
        "bound": [bound_text(c) + (", at it" if c.at_bound else "") for c in conds],
        "word": [c.verdict for c in conds],
        "basis": [basis_text(c) for c in conds]}
    common = {name: cells[0] for name, cells in columns.items()
              if name in ("bound", "basis") and len(set(cells)) == 1 and len(conds) > 1}
    if set(columns["95% interval"]) == {"—"}:  # counted: no interval to show
        del columns["95% interval"]
    kept = [name for name in columns if name not in common]
    headers = [*(["run"] if several else []), *(FIELD_NAMES.get(f, f) for f in fields), spec.ratio, *kept,
               *(SHOWN_FACTS[f] for f in facts)]
    rows = [[*([run] if several else []), *(value_text(c.fields.get(f)) for f in fields), amount(c.ratio, c.unit),
             *(columns[name][i] for name in kept), *(_fact(f, dict(c.facts).get(f)) for f in facts)]
            for i, (run, c) in enumerate(conditions)]
    table = Table(headers, rows, verdict_columns=(headers.index("word"),))
    said = [" · ".join(f"{FIELD_NAMES.get(f, f)} {value_text(v)}" for f, v in same.items())] if same else []
    said += [f"{name} {text}" if name == "bound" else f"intervals from {text}" for name, text in common.items()
             if text != "counted"] + (["counted, not timed"] if common.get("basis") == "counted" else [])
    blocks: list[Block] = [Para(f"Every condition: {'; '.join(said)}.")] if said else []
    if len(rows) > FOLD_ROWS:
        return [*blocks, Fold(f"The {len(rows)} conditions ({_tally(conds)})", (table,))]
    return [*blocks, table]


def _fact(name: str, value: object) -> str:
    if name in FACT_UNITS and isinstance(value, (int, float)):
        return amount(float(value), FACT_UNITS[name])
    return value_text(value)


def _tally(conds: Sequence[Condition]) -> str:
    """'5 hold, 12 do not, 1 open, 2 not judged'."""
    words = [c.verdict for c in conds]
    said = {HOLDS: "hold", FAILS: "do not", INCONCLUSIVE: "open", NOT_JUDGED: "not judged"}
    return ", ".join(f"{words.count(w)} {said.get(w, w)}" for w in dict.fromkeys(words))


def series_blocks(series: Sequence[tuple[str, Series]], several: bool = False) -> list[Block]:
    """Each series (run, Series) as a small table under the sentence that says what its numbers are (the run's column
    in a report of `several` runs); with two fields that vary, the first one's values are its columns (KV lengths
    down, GQA and MQA across)."""
    blocks: list[Block] = []
    for what in dict.fromkeys(s.what for _, s in series):
        points = [(run, dict(k), value, s.unit) for run, s in series if s.what == what for k, value in s.points]
        if not points:
            continue
        keys = list(dict.fromkeys(f for _, k, _, _ in points for f in k))
        fields = [f for f in keys if len({value_text(k.get(f)) for _, k, _, _ in points}) > 1] or keys[-1:]

        def shown(value: float, unit: str) -> str:
            return value_text(value if math.isfinite(value) else None) if unit == "tokens" else amount(value, unit)

        across, down = (fields[0], fields[1:]) if len(fields) == 2 else (None, fields)
        heads = list(dict.fromkeys(value_text(k.get(across)) for _, k, _, _ in points)) if across else ["value"]
        table: dict[tuple, dict[str, str]] = {}
        for run, k, value, unit in points:
            row = (*([run] if several else []), *(value_text(k.get(f)) for f in down))
            table.setdefault(row, {})[value_text(k.get(across)) if across else "value"] = shown(value, unit)
        rows = [[*row, *(cells.get(h, "—") for h in heads)] for row, cells in table.items()]
        headers = [*(["run"] if several else []), *(FIELD_NAMES.get(f, f) for f in down),
                   *((f"{FIELD_NAMES.get(across, across)} {h}" if across in FIELD_NAMES else h) for h in heads)]
        blocks += [Para(f"{what[0].upper()}{what[1:]}:"), Table(headers, rows)]
    return blocks
