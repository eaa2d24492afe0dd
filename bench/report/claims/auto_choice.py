"""The automatic SDPA choice against the kernels it chooses among, per shape family: the comparisons the auto-choice
claim (bench.claims.auto_choice) judges and the best-backends table reads.
"""

from __future__ import annotations

import math

import pandas as pd

from bench.report.rivals import against_fastest
from bench.report.traits import AUTOMATIC


def losses(df: pd.DataFrame, within: float) -> list[dict]:
    """Per automatic backend and shape family: against_fastest's comparison with the kernels it chooses among, each
    family's verdict against `within` (the claim's AUTO_WITHIN)."""
    return [d for auto, forced in AUTOMATIC.items() for d in against_fastest(df, auto, forced, within)]


def default_loss(df: pd.DataFrame) -> dict[str, float]:
    """family label -> the automatic choice's geomean ratio to the fastest forced kernel (for the best-backends
    table); math.nan where not measured. The ratio alone: no bound judges it here."""
    return {d["family"]: d["ratio"] for d in losses(df, math.inf) if not math.isnan(d["ratio"])}
