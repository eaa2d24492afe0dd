"""Renderers of a Comparison: a text table for terminals, markdown for CI summaries, one JSON object for tools."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

from bench.regress.noise import OP_BY_OP, RAGGED
from bench.regress.verdicts import VERDICTS, CaseVerdict, Comparison, Summary
from bench.results import json_safe
from bench.results.meta import RunMeta

# the classes of cases with a noise of their own within their timing mode, as the noise line names them
APART = {f"cold, {RAGGED}": "cold ragged batches", f"warm, {OP_BY_OP}": "warm op-by-op kernels' cases"}


def _time(value: float | None, normalized: bool) -> str:
    if value is None:
        return "-"
    if normalized:  # seconds x FLOP/s: the GEMM work the machine could have done meanwhile
        return f"{value / 1e9:.3g} GFLOP-eq"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"x{value:.2f}"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.1g}"


def _counts(s: Summary) -> str:
    failing = f"{s.n_failing} failing; " if s.n_failing else ""
    return failing + ", ".join(f"{s.counts[v]} {v}" for v in VERDICTS if s.counts[v]) + f" ({s.n_matched} matched)"


def _noise_line(s: Summary) -> str:
    n = s.noise
    if n.kind == "prior":
        return (f"run-to-run noise: only {n.n_cases} cases timed in both runs, too few to measure it; assumed sigma "
                f"{n.sigma:.0%} per case, so a case must move by {_ratio(n.floor_ratio)} to count; to decide a smaller "
                "move, measure it interleaved: python -m bench ab REV")
    text = (f"run-to-run noise (from {n.n_cases} cases): sigma {n.sigma:.1%} per case; the run as a whole moved "
            f"{_ratio(n.center_ratio)}; alone a case must stand out of the others by {_ratio(n.floor_ratio)}; past the "
            f"threshold: {n.n_slower} clean cases slower, {n.n_faster} faster (lean p={n.group_p:.2g})")
    if n.classes:  # each timing mode (cold ragged batches apart) with enough cases has its own noise
        names = {name for name, *_ in n.classes}
        apart = "".join(f", {what} apart" for name, what in APART.items() if name in names)
        text += f"; by timing mode{apart}: " + ", ".join(
            f"{c.name} sigma {c.sigma:.1%} ({c.cases} cases, stand out by {_ratio(n.floor_ratio_of(c.name))}"
            + (f", GROUP: lean {'slower' if c.group_shift > 0 else 'faster'}" if c.group_shift else "") + ")"
            for c in n.classes)
    if n.group_shift:
        text += f"; GROUP: the cases lean {'slower' if n.group_shift > 0 else 'faster'}"
    if n.global_shift:
        text += f"; GLOBAL: the whole run is {'slower' if n.global_shift > 0 else 'faster'} ({_ratio(n.center_ratio)})"
    return text


def _blocks_line(s: Summary) -> str:
    r, n = s.rule, s.noise
    text = (f"verdicts from each case's own ABBA blocks: the Hodges-Lehmann estimate of its per-block B/A ratios, "
            f"their {1 - 2 * r.alpha:.0%} signed-rank interval and a one-sided signed-rank test at alpha {r.alpha}; "
            "regressed when the interval "
            f"lies above x{1 + r.threshold:.2f}, inconclusive when it straddles it")
    if n.kind == "prior":
        return text + f"; cross-case guard off ({n.n_cases} timed cases, fewer than {r.min_cases}: the blocks carry " \
                      "the noise)"
    return text + (f"; cross-case guard ({n.n_cases} cases): sigma {n.sigma:.1%} per case, the median case moved "
                   f"{_ratio(n.center_ratio)}; a case must stand out by {_ratio(n.floor_ratio)}, lean with a group, "
                   "or move with the whole A/B")


def _gemm(run: RunMeta) -> float:
    return run.control_gemm() or math.nan  # set whenever the summary says it normalized or controlled


def _context_lines(s: Summary) -> list[str]:
    lines = [_blocks_line(s) if s.method == "blocks" else _noise_line(s)]
    if s.normalized:
        gb, gc = _gemm(s.baseline) / 1e9, _gemm(s.current) / 1e9
        lines.append(f"normalized: times x each run's own GEMM speed (baseline {gb:.4g}, current {gc:.4g} GFLOP/s), "
                     "i.e. compared in GEMM units")
        lines += [f"machines differ: {d}" for d in s.fingerprint_diffs]
    if s.controlled:
        gb, gc = _gemm(s.baseline) / 1e9, _gemm(s.current) / 1e9
        own, timed = s.locally_controlled, s.noise.n_cases
        runs = f"each run's GEMM speed at its start and end (baseline {gb:.4g}, current {gc:.4g} GFLOP/s)"
        cold = (f" ({s.read_controlled} cold cases against a read from their own copies instead)"
                if s.read_controlled else "")
        if not own:
            against = runs
        elif own >= timed:
            against = f"each timed case against its own GEMM probe{cold}, timed between its rounds (and {runs})"
        else:
            against = (f"{own} of {timed} timed cases against their own GEMM probe{cold}, timed between their "
                       f"rounds; the rest against {runs}")
        lines.append(f"in-run control: {against}; a timing change must hold in seconds and in units of its control")
    lines += [f"warning: {w}" for w in s.warnings]
    if s.counts.get("inconclusive"):
        lines.append(f"{s.counts['inconclusive']} inconclusive: their intervals straddle the threshold, so they are "
                     "neither passed nor failed; more blocks decide them (--blocks auto with a longer --ab-time)")
    return lines


def _title(s: Summary) -> str:
    b, c = s.baseline, s.current
    passes = f", {b.passes} passes" if b.passes > 1 else ""
    return (f"baseline {b.run_id} ({b.profile}{passes}) vs current {c.run_id} ({c.profile}); metric {s.rule.metric}, "
            f"threshold {s.rule.threshold:.0%}, alpha {s.rule.alpha}")


STRIP_MAX = 12  # block ratios shown one by one; past this, the first ones and a count


def strip(blocks: tuple[float, ...]) -> str:
    """The per-block B/A ratios in block order, e.g. '1.12 1.09 1.15 1.10 1.11', so a reader sees why a case was
    called; '-' for a comparison without blocks."""
    if not blocks:
        return "-"
    shown = " ".join(f"{b:.2f}" for b in blocks[:STRIP_MAX])
    return shown + (f" +{len(blocks) - STRIP_MAX} more" if len(blocks) > STRIP_MAX else "")


def _interval(v: CaseVerdict) -> str:
    if v.interval is None or not all(x == x for x in v.interval):  # nan: one block
        return "-"
    return f"[{v.interval[0]:.2f}, {v.interval[1]:.2f}]"


def _row(v: CaseVerdict, normalized: bool, blocks: bool = False) -> list[str]:
    status = v.cur_status if v.base_status == v.cur_status else f"{v.base_status or '-'} -> {v.cur_status or '-'}"
    cells = [v.verdict + (" (fails)" if v.failing and v.verdict != "regressed" else ""), _ratio(v.ratio),
             _p(v.p_value), _ratio(v.mem_ratio), _time(v.base_value, normalized), _time(v.cur_value, normalized),
             status or "-", v.case_id, v.reason]
    return cells[:2] + [_interval(v), strip(v.blocks)] + cells[2:] if blocks else cells


_HEAD = ["verdict", "time", "p", "memory", "baseline", "current", "status", "case", "note"]
_HEAD_BLOCKS = [*_HEAD[:2], "interval", "blocks B/A", *_HEAD[2:]]


def _head(s: Summary) -> list[str]:
    return _HEAD_BLOCKS if s.method == "blocks" else _HEAD


def render_text(cmp: Comparison) -> str:
    s = cmp.summary
    head = _head(s)
    rows = [head] + [_row(v, s.normalized, s.method == "blocks") for v in cmp.cases]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]
    verdict = "REGRESSION" if s.exit_code else "no regression"
    command = "ab" if s.method == "blocks" else "compare"
    return "\n".join([f"attnbench {command}: {_title(s)}", *_context_lines(s), f"result: {verdict}: {_counts(s)}", "",
                      *(line.rstrip() for line in table)]) + "\n"


def _md(cell: str) -> str:
    return cell.replace("|", "\\|")


def render_markdown(cmp: Comparison) -> str:
    s = cmp.summary
    mark = ":x: **regression**" if s.exit_code else ":white_check_mark: no regression"
    lines = [f"### attnbench: {mark}: {_counts(s)}", "", _title(s) + "  ", *(line + "  " for line in _context_lines(s)),
             ""]
    # an A/B shows every case: its block ratios are why it was called, unchanged ones included
    shown = [v for v in cmp.cases if v.verdict != "unchanged" or s.method == "blocks"]
    if not shown:
        lines.append(f"All {s.n_matched} cases are within the threshold of the baseline.")
        return "\n".join(lines) + "\n"
    head = _head(s)
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in shown:
        cells = _row(v, s.normalized, s.method == "blocks")
        cells[head.index("case")] = f"`{cells[head.index('case')]}`"
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _side(run: RunMeta) -> dict:
    """A side of the comparison in the JSON's layout (what the verdict table heads it with)."""
    return {"run_id": run.run_id, "profile": run.profile, "complete": run.complete, "passes": run.passes,
            "fingerprint": run.fingerprint if isinstance(run.fingerprint, dict) else None,
            "gemm_flops_per_s": run.control_gemm()}


def render_json(cmp: Comparison) -> str:
    s = cmp.summary
    noise = {**dataclasses.asdict(s.noise), "center_ratio": s.noise.center_ratio, "floor_ratio": s.noise.floor_ratio}
    summary = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)} | {
        "rule": dataclasses.asdict(s.rule), "baseline": _side(s.baseline), "current": _side(s.current)}
    doc = {"result": "regression" if s.exit_code else "ok", "exit_code": s.exit_code, **summary,
           "noise": noise, "cases": [dataclasses.asdict(v) for v in cmp.cases]}
    return json.dumps(json_safe(doc), indent=1, allow_nan=False) + "\n"


RENDERERS: dict[str, Callable[[Comparison], str]] = {
    "text": render_text, "markdown": render_markdown, "json": render_json,
}


def emit(comparison: Comparison, fmt: str, output: str | Path | None) -> int:
    """Print the comparison in `fmt` (and write it to `output` when given); the exit code its verdicts call for."""
    report = RENDERERS[fmt](comparison)
    print(report, end="")
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(report)
    return comparison.summary.exit_code
