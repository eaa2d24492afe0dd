"""The shared-prefix section: per (P, B) point of each cascade line, the best plain step (every request over its
whole context) against the cascade's, with the ratio's 95% interval and its word, the region P*(B) where the cascade
wins beside FlashInfer's published figure, the suffixes' prefill the same way where the run has it, and both methods'
minimum bytes (plain reads the prefix B times, cascade once). bench.claims.cascade pairs and judges the rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.claims.cascade import CASCADE_BEATS, FLASHINFER_PUBLISHED, cascade_pairs, points, region
from bench.report.blocks import Block, Heading, Para, Table, times
from bench.report.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    from bench.report.sections import Report


def _table(found: list) -> Table:
    return Table(["line", "P", "B", "best plain", "cascade", "plain / cascade", "cascade / plain (95%)", "verdict"],
                 [[d["line"], f"{d['prefix']:,}", str(d["batch"]), f"{d['plain_backend']} {fmt_seconds(d['plain_s'])}",
                   fmt_seconds(d["cascade_s"]), times(1 / c.ratio), f"{times(c.ratio)} ({c.low:.2f}–{c.high:.2f})",
                   c.verdict] for c, d in found], verdict_columns=(7,))


def _found(rows: pd.DataFrame) -> list:
    """points() with each point's two times added, for the table."""
    out = []
    for c, d in points(rows):
        r = rows[(rows["backend"] == d["backend"]) & (rows["prefix"] == d["prefix"]) & (rows["batch"] == d["batch"])
                 & (rows["dtype"] == d["dtype"]) & (rows["suffix"] == d["suffix"])].iloc[0]
        out.append((c, d | {"plain_s": float(r["plain_median_s"]), "cascade_s": float(r["median_s"])}))
    return out


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block] | None:
    """None for a run without a cascade case beside a plain twin; the heading is the section's own."""
    decode, prefill = cascade_pairs(df, "decode"), cascade_pairs(df, "prefill")
    if decode.empty and prefill.empty:
        return None
    blocks: list[Block] = [Heading("Shared-prefix batches")]
    if not decode.empty:
        found = _found(decode)
        lines = []
        for line in dict.fromkeys(d["line"] for _, d in found):
            stars = region([(d["prefix"], d["batch"], c.verdict) for c, d in found if d["line"] == line])
            lines.append(f"{line}: " + ", ".join(f"B {b} " + (f"from P {p:,}" if p else "nowhere")
                                                 for b, p in stars.items()))
        blocks += [Para("Each decode step of a batch sharing a prefix of P tokens: the best plain kernel (each request "
                        "reads its own copy of the prefix) against the cascade (the prefix read once for the batch, "
                        f"each suffix apart, merged by log-sum-exp). The cascade wins at a point whose interval is "
                        f"≤ {CASCADE_BEATS:g}× the plain step; where it wins, by batch: " + "; ".join(lines)
                        + ". At B 1 there is nothing to share: a cascade that wins there wins by its grouped rows "
                        "(a KV head's query heads as rows of one product), not by reading the prefix once. "
                        f"Published: {FLASHINFER_PUBLISHED}."),
                   _table(found)]
    if not prefill.empty:
        blocks += [Para("The suffixes' prefill over the cached prefix (each request's L suffix tokens as queries), the "
                        "same comparison: the prefix part is then a matrix product of B × L rows, not one row per "
                        "request."), _table(_found(prefill))]
    both = pd.concat([decode, prefill])
    bytes_rows = both.drop_duplicates(["phase", "prefix", "batch", "suffix", "dtype", "n_heads", "n_kv_heads",
                                       "head_dim"]).sort_values(["phase", "batch", "prefix"])
    blocks += [Para("Minimum memory traffic of one call (bench.prefix.counts): Q and O, then the K/V each method "
                    "reads; the FLOPs are the same for both."),
               Table(["phase", "P", "B", "suffix", "plain bytes", "cascade bytes", "plain / cascade"],
                     [[r["phase"], f"{int(r['prefix']):,}", str(int(r["batch"])), str(int(r["suffix"])),
                       fmt_bytes(r["plain_bytes"]), fmt_bytes(r["cascade_bytes"]),
                       times(float(r["plain_bytes"]) / float(r["cascade_bytes"]))] for _, r in bytes_rows.iterrows()])]
    return blocks
