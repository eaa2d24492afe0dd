"""Row selectors, keys and labels over one run's tidy frame: what every analysis of the report starts from.

Plain pandas and numpy, no verdicts and no matplotlib, so claims, tables and figures all build on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from bench.problem.case import FAMILY_FIELDS
from bench.results.record import SHAPE_KEYS as RECORD_SHAPE_KEYS

# Everything that makes two cases the same shape except the backend: bench.results.record owns the list (shape fields
# included, so a new axis keeps its cases apart here without an edit).
SHAPE_KEYS: list[str] = list(RECORD_SHAPE_KEYS)
FAMILY_KEYS: list[str] = list(FAMILY_FIELDS)  # bench.problem.case owns the family (family_key, FAMILY_FIELDS)


def shape_keys_but(*varied: str) -> list[str]:
    """SHAPE_KEYS less the fields an analysis deliberately varies: what pairs a case with its twin."""
    unknown = set(varied) - set(SHAPE_KEYS)
    if unknown:
        raise ValueError(f"not shape fields: {sorted(unknown)}")
    return [k for k in SHAPE_KEYS if k not in varied]


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["status"] == "ok") & (df["median_s"] > 0)]


def trace_rows(df: pd.DataFrame) -> pd.Series:
    """True where a row is a replayed trace's bucket: a serving batch with explicit rows (lengths rows:...);
    bench.analysis.time_to_serve reads them, the serving analyses (length distributions, paging) leave them out."""
    if "lengths" not in df:
        return pd.Series(False, index=df.index)
    return df["lengths"].map(lambda v: isinstance(v, str) and v.startswith("rows:")).astype(bool)


def serving_rows(df: pd.DataFrame) -> pd.Series:
    """True where a row is a serving batch (`lengths` or `page_size` set; old files have neither column).

    The dense analyses (best backend per family, headline speedups, the tutorials' claims) leave these rows
    out: a ragged or paged batch is not a shape of a dense family; bench.analysis.serving reads them."""
    lengths = df["lengths"] if "lengths" in df else pd.Series(None, index=df.index)
    pages = df["page_size"] if "page_size" in df else pd.Series(None, index=df.index)
    return lengths.notna() | pages.notna()


def sparse_rows(df: pd.DataFrame) -> pd.Series:
    """True where a row is a sparse case (`sparsity` set and not none; old files have no such column)."""
    if "sparsity" not in df:
        return pd.Series(False, index=df.index)
    return df["sparsity"].fillna("none") != "none"


def dense_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The dense families' rows: every column a kind apart declares (bench.problem.columns.APART: a serving batch,
    sparse or linear attention) at its default or absent (old files); those kinds read their rows beside these."""
    from bench.problem.columns import APART

    keep = pd.Series(True, index=df.index)
    for column in APART:
        if column.name in df:
            keep &= df[column.name].isna() if column.default is None else df[column.name].fillna(column.default) \
                == column.default
    return df[keep]


def attention_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows timing the attention call alone: a layer-scope timing (projections included) is another quantity."""
    scope = df["scope"].fillna("attention") if "scope" in df else pd.Series("attention", index=df.index)
    return df[scope == "attention"]


def fit_exponent(x: pd.Series | np.ndarray, y: pd.Series | np.ndarray) -> float | None:
    """Slope of log y against log x (y ∝ x^k); None without two distinct positive x."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(np.unique(x)) < 2:
        return None
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def geomean(values: Iterable[float | None], weights: Iterable[float] | None = None) -> float | None:
    """The geometric mean of the positive, finite values (each weighted, where weights are given); None for none."""
    values = list(values)
    weights = list(weights) if weights is not None else [1.0] * len(values)
    pairs = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None and v > 0 and math.isfinite(v)]
    if not pairs:
        return None
    logs, ws = np.log([v for v, _ in pairs]), np.array([w for _, w in pairs], dtype=float)
    return float(np.exp(np.sum(logs * ws) / np.sum(ws)))


def shape_label(row: pd.Series | dict) -> str:
    """A case without its backend, short enough for a table cell."""
    seq = f"S={row['seq_kv']}" if row["phase"] == "prefill" else f"Sq={row['seq_q']} KV={row['seq_kv']}"
    return (f"{row['phase']} {str(row['variant']).upper()} {row['dtype']} {row['mask']} {row['pass']} "
            f"B={row['batch']} Hq={row['n_heads']} Hkv={row['n_kv_heads']} D={row['head_dim']} {seq}")
