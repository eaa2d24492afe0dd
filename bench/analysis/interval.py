"""The interval of a judged ratio: how far a claim's number could move with its timings' own noise and the cases
behind it.

A claim that judges the median (or geometric mean) over cases of a ratio (one time over its twin's) gets a 95%
interval by resampling: each round draws the cases with replacement and each case's two times uniformly within their
own confidence intervals (ci_low_s .. ci_high_s, the median where a run recorded none), and takes the statistic of
the ratios. The 2.5th and 97.5th percentiles of those statistics are the interval. Seeded, so a report reads the
same every time. A verdict whose interval straddles its threshold is inconclusive: the numbers cannot tell which
side it is on.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ROUNDS = 2000
SEED = 0


def _bounds(df: pd.DataFrame, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """Each row's CI under a column prefix: {prefix}ci_low_s .. {prefix}ci_high_s around {prefix}median_s (or
    {prefix}s, where a frame names its median so), the median where a CI is missing."""
    name = f"{prefix}median_s" if f"{prefix}median_s" in df else f"{prefix}s"
    median = pd.to_numeric(df[name], errors="coerce")
    low, high = (pd.to_numeric(df[c], errors="coerce").fillna(median) if c in df else median
                 for c in (f"{prefix}ci_low_s", f"{prefix}ci_high_s"))
    return low.to_numpy(float), high.to_numpy(float)


def drawn(df: pd.DataFrame, prefix: str = "", rng: np.random.Generator | None = None) -> np.ndarray:
    """ROUNDS draws of each row's time, uniformly within its own CI: shape (ROUNDS, len(df))."""
    low, high = _bounds(df, prefix)
    rng = rng or np.random.default_rng(SEED)
    return low + (high - low) * rng.random((ROUNDS, len(df)))


def median_over(stats: np.ndarray, rng: np.random.Generator | None = None) -> tuple[float, float]:
    """95% interval of the median over groups of a per-group statistic: stats has one column per group and one
    row per round of draws; each round also resamples the groups (columns) with replacement."""
    if stats.size == 0:
        return float("nan"), float("nan")
    rng = rng or np.random.default_rng(SEED)
    picks = rng.integers(0, stats.shape[1], size=stats.shape)
    medians = np.median(np.take_along_axis(stats, picks, axis=1), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)


def ratio_interval(df: pd.DataFrame, top: str, bottom: str, statistic: str = "median") -> tuple[float, float]:
    """95% interval of the median (or "geomean") of top time / bottom time over df's rows, where `top` and
    `bottom` are column prefixes ("" for median_s / ci_low_s / ci_high_s, "mha_" for mha_median_s ...)."""
    if df.empty:
        return float("nan"), float("nan")
    (tl, th), (bl, bh) = _bounds(df, top), _bounds(df, bottom)
    rng = np.random.default_rng(SEED)
    picks = rng.integers(0, len(df), size=(ROUNDS, len(df)))
    tops = tl[picks] + (th - tl)[picks] * rng.random(picks.shape)
    bottoms = bl[picks] + (bh - bl)[picks] * rng.random(picks.shape)
    ratios = tops / bottoms
    medians = np.exp(np.log(ratios).mean(axis=1)) if statistic == "geomean" else np.median(ratios, axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)


def straddles(interval: tuple[float, float], threshold: float) -> bool:
    """The interval holds values on both sides of the threshold."""
    low, high = interval
    return bool(low < threshold <= high)
