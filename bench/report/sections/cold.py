"""The cold-and-warm section: which cases were timed cold (their cache read from memory, as a model's layer meets
it), against what cache, and what that did to their time beside the warm mode (bench.report.cold)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.measure.caches import CPU_CACHE_FLOOR
from bench.report import cold
from bench.report.blocks import Block, Para, Table
from bench.report.units import fmt_bytes

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block] | None:
    """None for a run with no case timed cold (a file from before cold CPU timing, or --cold-multiple 0)."""
    rows = cold.summary(df)
    if not rows:
        return None
    ok = cold.cold_rows(df)
    cache = ok["cache_bytes"].dropna()
    copies = ok["cold_copies"].dropna().astype(int)
    where = f"{fmt_bytes(cache.max())} of cache" if len(cache) else "the cache"
    blocks: list[Block] = [
        Para(f"{len(ok)} cases read a cache a model's layer meets cold (a decode step's KV cache, a paged pool, a "
             f"shared prefix, MLA's latent cache, a linear layer's state): their headline time is cold, each call "
             f"reading the next of {copies.min()}–{copies.max()} copies of those inputs, which add up to past "
             f"{where} several times over (CPU: L2 + L3 as the OS reports them, at least "
             f"{fmt_bytes(CPU_CACHE_FLOOR)}; CUDA: its L2, "
             "flushed too). "
             "Prefills are timed warm: their Q, K and V are what the layer has just computed. The warm time (the "
             "same inputs every call) is recorded beside; cold / warm is how much a warm cache would flatter them."),
        Table(["step", "backend", "dtype", "cases", "cold inputs", "warm → cold, largest inputs",
               "cold / warm (range)"], rows)]
    short = cold.partly_warm(df)
    if short:
        blocks.append(Para(f"Partly warm ({len(short)}): their copies fell short of the target (by count or free "
                           f"memory), so their cold time may be flattered: {', '.join(short[:5])}"
                           + (" …" if len(short) > 5 else "")))
    return blocks
