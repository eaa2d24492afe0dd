"""A trace's time to serve from its buckets and its sampled real steps (bench.analysis.sampled_steps): the regression
on the steps' counted work finds which work each backend pays for, the difference estimator stays where the sample is
too small to fit, and a kind sampled whole is counted exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.analysis.sampled_steps import FIT_STEPS, estimated

BUCKET_S = 1e-3  # both backends' decode bucket
BATCH_PACKED, BATCH_PADDED = 4 * 500, 4 * 800  # the bucket's batch: 4 rows, 500 keys a row on average, longest 800
ROUNDS = 200


def steps(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """n decode steps' (packed, padded) work: 2-8 rows of 100-1,000 keys."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        keys = rng.integers(100, 1000, size=int(rng.integers(2, 9)))
        out.append((int(keys.sum()), int(len(keys) * keys.max())))
    return out


def sample(work: list[tuple[int, int]], times: dict[str, list[float]], kind: str = "decode") -> pd.DataFrame:
    """step_checks' rows: each step's measured time per backend and its bucket's time, plain and scaled by work."""
    return pd.DataFrame([{"backend": b, "index": i, "kind": kind, "measured_s": t[i], "predicted_s": BUCKET_S,
                          "predicted_packed_s": BUCKET_S * packed / BATCH_PACKED,
                          "predicted_padded_s": BUCKET_S * padded / BATCH_PADDED}
                         for b, t in times.items() for i, (packed, padded) in enumerate(work)])


def flat(served: dict[str, float]) -> dict[str, np.ndarray]:
    return {b: np.full(ROUNDS, s) for b, s in served.items()}


def test_the_regression_finds_which_work_each_backend_pays_for_where_the_difference_estimator_misses():
    """A padded backend's steps take its bucket's time x their padded work over the batch's, a varlen one's x their
    packed work: summed over every step of the trace (its work counted by the replay) that is each one's time to
    serve exactly, whichever steps were drawn; the difference estimator, the sample's mean error x the steps, misses
    it by what the drawn steps' work differs from the trace's mean."""
    work = steps(FIT_STEPS + 4)
    trace_steps = 10_000
    trace_packed, trace_padded = 2_400 * trace_steps, 4_100 * trace_steps  # the whole trace's steps' work
    times = {"padded": [BUCKET_S * d / BATCH_PADDED for _, d in work],
             "varlen": [0.5 * BUCKET_S * p / BATCH_PACKED for p, _ in work]}
    served = {b: BUCKET_S * trace_steps for b in times}
    totals = {b: (BUCKET_S * trace_packed / BATCH_PACKED, BUCKET_S * trace_padded / BATCH_PADDED) for b in times}
    points, draws, how = estimated(served, flat(served), sample(work, times), {"decode": trace_steps}, totals)
    assert how == "regression on counted work"
    truth = {"padded": BUCKET_S * trace_padded / BATCH_PADDED, "varlen": 0.5 * BUCKET_S * trace_packed / BATCH_PACKED}
    assert points == pytest.approx(truth, rel=1e-9)
    for b in times:  # every resample fits as exactly: no spread
        assert draws[b] == pytest.approx(np.full(ROUNDS, truth[b]), rel=1e-9)

    points, _, how = estimated(served, flat(served), sample(work, times), {"decode": trace_steps})  # no totals
    assert how == "difference"
    mean_error = np.mean(times["padded"]) - BUCKET_S
    assert points["padded"] == pytest.approx(served["padded"] + trace_steps * mean_error)
    assert abs(points["padded"] / truth["padded"] - 1) > 0.05


def test_below_fit_steps_or_without_the_steps_work_it_is_the_difference_estimator():
    work = steps(FIT_STEPS - 1)
    times = {"a": [BUCKET_S * d / BATCH_PADDED for _, d in work]}
    served, totals = {"a": 5.0}, {"a": (4.0, 6.0)}
    _, _, how = estimated(served, flat(served), sample(work, times), {"decode": 5_000}, totals)
    assert how == "difference"
    more = sample(steps(FIT_STEPS), {"a": [BUCKET_S] * FIT_STEPS})
    for lacking in ({"a": (float("nan"), 6.0)}, None):
        _, _, how = estimated(served, flat(served), more, {"decode": 5_000}, lacking)
        assert how == "difference"


def test_a_kind_sampled_whole_is_counted_exactly_whatever_the_fit():
    """Every step of the trace was timed: its time to serve is their sum, though the steps' times follow neither
    work model, and no resample moves it."""
    work = steps(FIT_STEPS + 2, seed=3)
    rng = np.random.default_rng(1)
    times = {"a": list(rng.uniform(0.5e-3, 3e-3, size=len(work)))}
    frame = sample(work, times)
    totals = {"a": (float(frame["predicted_packed_s"].sum()), float(frame["predicted_padded_s"].sum()))}
    served = {"a": BUCKET_S * len(work)}
    points, draws, how = estimated(served, flat(served), frame, {"decode": len(work)}, totals)
    assert how == "regression on counted work"
    assert points["a"] == pytest.approx(sum(times["a"]))
    assert draws["a"] == pytest.approx(np.full(ROUNDS, sum(times["a"])))


def test_steps_that_stray_from_the_model_widen_the_interval_and_the_pair_shares_its_steps():
    """Noise the work does not explain: the draws spread around the estimate; two backends whose steps stray alike
    keep their ratio (each draw resamples the same steps for both)."""
    work = steps(2 * FIT_STEPS, seed=5)
    rng = np.random.default_rng(2)
    stray = rng.uniform(0.7, 1.3, size=len(work))
    times = {"a": [BUCKET_S * d / BATCH_PADDED * s for (_, d), s in zip(work, stray, strict=True)]}
    times["b"] = [2 * t for t in times["a"]]
    served = {b: BUCKET_S * 1_000 for b in times}
    totals = {b: (BUCKET_S * 2_400_000 / BATCH_PACKED, BUCKET_S * 4_100_000 / BATCH_PADDED) for b in times}
    points, draws, _ = estimated(served, flat(served), sample(work, times), {"decode": 1_000}, totals)
    low, high = np.percentile(draws["a"], [2.5, 97.5])
    assert low < points["a"] < high and high / low > 1.02
    assert draws["b"] / draws["a"] == pytest.approx(np.full(ROUNDS, 2.0))


def test_a_backend_without_a_sampled_step_leaves_it_to_the_caller():
    work = steps(FIT_STEPS)
    frame = sample(work, {"a": [BUCKET_S] * len(work)})
    served = {"a": 1.0, "b": 1.0}
    assert estimated(served, flat(served), frame, {"decode": 100}, {"a": (1.0, 1.0), "b": (1.0, 1.0)}) is None
