"""A trace's time to serve per backend, estimated from its buckets' times (known for every step of the trace) and its
sampled real steps timed exactly (bench.traces.sample: drawn uniformly within each kind of step, prefill, decode or
mixed, so each stands for its kind's steps over the kind's sampled steps): survey sampling's model-assisted
estimators, unbiased however far the buckets are off.

- regression (the generalised regression estimator, GREG), where at least FIT_STEPS steps were sampled and the
  workload gives its steps' counted work: per backend, each sampled step's time is fitted as b_packed x its buckets'
  time scaled to its own packed work + b_padded x the same for padded work (time_to_serve's predicted_packed_s and
  predicted_padded_s; no intercept; each step weighted by the steps it stands for over its size, as a larger step
  strays further). The estimate: the fit over every step of the trace (the same covariates summed over all steps,
  time_to_serve's time_packed_s and time_padded_s, from the steps' work the replay counted) plus the weighted
  residuals over the sample. The buckets price every step of a bucket alike, though a decode step of 4 rows and one
  of 40 fall in neighbouring cells of its grid; the steps' own work carries most of that difference, and which work a
  backend pays for is its layout's (a padded decode pays for the longest row, a varlen one for each row's keys): the
  fit finds it. Over 63 saved default runs of azure-conv (2-core AMD EPYC, torch 2.13), a sampled decode step's
  error against its bucket followed its padded work's with correlation 0.98 for sdpa-flash and its packed work's
  with 0.89 for naive (the medians within a run);
- difference (otherwise): the buckets' time plus, per kind, the kind's steps times the mean of (measured -
  predicted) over its sampled steps.

Their draws, for a 95% interval: the buckets' draws (each bucket within its CI) plus the sample resampled within
each kind and the estimate made again (the fit too), the same steps for every backend (the pair's error is what
varies); a kind sampled whole, or with one step, is kept as it is; each step's deviation from its kind's mean error
is first scaled by sqrt(n / (n - 1)), the bootstrap's small-sample correction.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where used: the claims' specs import this module's FIT_STEPS, the planner too
    import numpy as np
    import pandas as pd

FIT_STEPS = 8  # sampled steps at least for the regression's two coefficients (fewer: the difference estimator)
COVARIATES = ("predicted_packed_s", "predicted_padded_s")  # time_to_serve.step_checks' columns, in this order
TOTALS = ("time_packed_s", "time_padded_s")  # their sums over every step: time_to_serve.trace_times' columns
TINY = 1e-9  # a correction past the buckets' whole time: the sample says little, the estimate stays positive


def estimated(served: dict[str, float], draws: dict[str, np.ndarray], sample: pd.DataFrame, kinds: dict[str, int],
              totals: dict[str, tuple[float, float]] | None = None
              ) -> tuple[dict[str, float], dict[str, np.ndarray], str] | None:
    """Each backend's time to serve (the module docstring): ({backend: estimate}, {backend: draws}, the estimator's
    name). served: the buckets' times to serve; draws: theirs drawn (trace.served_draws); sample: step_checks' rows
    of these backends; kinds: the trace's steps per kind; totals: {backend: (time_packed_s, time_padded_s) summed over
    its buckets}. None where some backend lacks a sampled step the others have (the caller widens instead)."""
    import numpy as np

    backends = list(served)
    if sample.empty or set(backends) - set(sample["backend"]):
        return None
    columns = ["measured_s", "predicted_s", *COVARIATES]
    wide = sample[sample["backend"].isin(backends)].pivot_table(index=["index", "kind"], columns="backend",
                                                                values=columns)
    if wide[["measured_s", "predicted_s"]].isna().any().any():
        return None
    kind = [str(k) for k in wide.index.get_level_values("kind")]
    n = Counter(kind)
    weight = np.array([max(1.0, kinds.get(k, n[k]) / n[k]) for k in kind])
    fit = (len(kind) >= FIT_STEPS and totals is not None and not wide[list(COVARIATES)].isna().any().any()
           and all(b in totals and all(math.isfinite(t) and t > 0 for t in totals[b]) for b in backends))
    rounds = len(next(iter(draws.values())))
    picks = _picks(kind, kinds, rounds)
    points, more = {}, {}
    for b in backends:
        y = wide["measured_s"][b].to_numpy(float)
        size = wide["predicted_s"][b].to_numpy(float)
        if fit:
            z = np.stack([wide[c][b].to_numpy(float) for c in COVARIATES], axis=1)
            known = np.array(totals[b], float)
        else:  # the buckets' own prediction, its coefficient 1: the difference estimator
            z, known = size[:, None], np.array([served[b]])
        point, residual = _greg(y[None], z[None], known, weight[None], size[None], fit)
        y_wide = y + _widen(residual[0], kind, kinds)
        again, _ = _greg(y_wide[picks], z[picks], known, weight[picks], size[picks], fit)
        points[b] = max(float(point[0]), TINY)
        more[b] = np.maximum(again + (np.asarray(draws[b], float) - served[b]), TINY)
    return points, more, "regression on counted work" if fit else "difference"


def work_totals(times: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """{backend: its TOTALS summed over its buckets} from time_to_serve.trace_times' rows (NaN where a bucket lacks
    its steps' work: the difference estimator then)."""
    return {str(b): tuple(float(g[c].to_numpy(float).sum()) for c in TOTALS) for b, g in times.groupby("backend")}


def _greg(y: np.ndarray, z: np.ndarray, known: np.ndarray, weight: np.ndarray, size: np.ndarray, fit: bool
          ) -> tuple[np.ndarray, np.ndarray]:
    """Per row of (rounds, steps): the estimate sum(b x known) + sum(weight x (y - z b)) and the residuals, b fitted
    by least squares weighted by weight / size (fit) or 1 (the difference estimator)."""
    import numpy as np

    if fit:
        w = weight / np.maximum(size, TINY)
        a = np.einsum("rn,rnp,rnq->rpq", w, z, z)
        rhs = np.einsum("rn,rnp,rn->rp", w, z, y)
        coef = np.einsum("rpq,rq->rp", np.linalg.pinv(a), rhs)  # pinv: one-row steps make packed = padded
    else:
        coef = np.ones((len(y), z.shape[2]))
    residual = y - np.einsum("rnp,rp->rn", z, coef)
    return coef @ known + (weight * residual).sum(axis=1), residual


def _picks(kind: list[str], kinds: dict[str, int], rounds: int) -> np.ndarray:
    """(rounds, steps) indices: each resampled kind's steps resampled within it (seeded), the others kept."""
    import numpy as np

    rng = np.random.default_rng(0)
    picks = np.tile(np.arange(len(kind)), (rounds, 1))
    for mine in _resampled(kind, kinds):
        picks[:, mine] = mine[rng.integers(0, len(mine), size=(rounds, len(mine)))]
    return picks


def _widen(residual: np.ndarray, kind: list[str], kinds: dict[str, int]) -> np.ndarray:
    """What each step's time is moved by so that its residual's deviation from its kind's mean is sqrt(n / (n - 1))
    times as large (0 in a kind that is not resampled)."""
    import numpy as np

    out = np.zeros_like(residual)
    for mine in _resampled(kind, kinds):
        n = len(mine)
        out[mine] = (residual[mine] - residual[mine].mean()) * (math.sqrt(n / (n - 1)) - 1)
    return out


def _resampled(kind: list[str], kinds: dict[str, int]) -> list[np.ndarray]:
    """The sampled steps' indices of each kind the bootstrap resamples, by kind name: not one sampled whole (exact),
    nor one with a single step (no spread to resample)."""
    import numpy as np

    out = []
    for k in sorted(set(kind)):
        mine = np.flatnonzero(np.array(kind) == k)
        if 2 <= len(mine) < kinds.get(k, len(mine)):
            out.append(mine)
    return out
