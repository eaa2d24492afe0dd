"""Timer statistics (bench.measure.stats) and adaptive rounds (bench.measure.timer)."""

from __future__ import annotations

import math
import random
import statistics
import time
import types
from math import comb

import numpy as np
import pytest
from pytest_benchmark.stats import Stats

from bench.measure import timer
from bench.measure.stats import Summary, median_ci, summarize


def _coverage(n: int, lo: int, hi: int) -> float:
    """Exact coverage of [x_(lo), x_(hi)] (0-based order statistics) for the median of a continuous law."""
    return sum(comb(n, k) for k in range(lo + 1, hi + 1)) / 2**n


# --- summarize ---------------------------------------------------------------------------------------

def test_summarize_known_data_even():
    s = summarize([8.0, 1.0, 7.0, 2.0, 6.0, 3.0, 5.0, 4.0])  # unsorted on purpose
    assert s.median == 4.5
    assert s.q1 == pytest.approx(2.5)  # even n: the median of the lower half 1..4 (pytest-benchmark's method 2)
    assert s.q3 == pytest.approx(6.5)  # and of the upper half 5..8
    assert s.iqr == pytest.approx(4.0)
    assert s.rounds == 8
    assert (s.ci_low, s.ci_high) == (1.0, 8.0)  # n = 8: the whole range


def test_summarize_known_data_odd_matches_numpy_hazen_percentiles():
    data = [0.3, 0.1, 0.9, 0.5, 0.7, 0.2, 0.4, 0.8, 0.6, 1.0, 0.05]
    s = summarize(data)
    ordered = sorted(data)
    assert s.median == 0.5
    # numpy's hazen method, written out: position n * p - 0.5 (0-based), 2.25 and 7.75 for n = 11
    assert s.q1 == pytest.approx(ordered[2] + 0.25 * (ordered[3] - ordered[2]))
    assert s.q3 == pytest.approx(ordered[7] + 0.75 * (ordered[8] - ordered[7]))
    assert (s.q1, s.q3) == pytest.approx(tuple(np.percentile(data, [25, 75], method="hazen")), rel=1e-12)
    assert s.ci_low <= s.median <= s.ci_high


@pytest.mark.parametrize("n", [*range(1, 40), 50, 99, 100, 101, 102, 103, 500, 1000])
def test_summarize_quartiles_and_iqr_are_pytest_benchmarks(n):
    """A record's iqr_s is the iqr pytest-benchmark writes and shows for the same rounds (up to float rounding)."""
    rng = random.Random(n)
    for trial in range(20):
        # lognormal times, and on some trials ties (a coarse clock) and a few outliers
        samples = [rng.lognormvariate(-7, 0.3) for _ in range(n)]
        if trial % 4 == 1:
            samples = [round(x, 4) for x in samples]
        elif trial % 4 == 2:
            samples = [x * (5 if rng.random() < 0.1 else 1) for x in samples]
        theirs = Stats()
        for x in samples:
            theirs.update(x)
        ours = summarize(samples)
        assert ours.q1 == pytest.approx(theirs.q1, rel=1e-12, abs=0)
        assert ours.q3 == pytest.approx(theirs.q3, rel=1e-12, abs=0)
        assert ours.iqr == pytest.approx(theirs.iqr, rel=1e-9, abs=1e-18)
        assert ours.median == theirs.median
        assert ours.rounds == theirs.rounds


def test_summarize_single_sample_and_empty():
    s = summarize([2.0])
    assert (s.median, s.q1, s.q3, s.ci_low, s.ci_high, s.rounds) == (2.0, 2.0, 2.0, 2.0, 2.0, 1)
    assert s.iqr == 0.0
    with pytest.raises(ValueError, match="no samples"):
        summarize([])


# --- median_ci ---------------------------------------------------------------------------------------

def test_median_ci_n50_uses_order_statistics_18_and_33():
    # Binomial tables: for n = 50 the 95% CI of the median is [x_(18), x_(33)] (1-based), coverage 0.967.
    lo, hi = median_ci(list(range(50)))
    assert (lo, hi) == (17, 32)
    assert _coverage(50, lo, hi) == pytest.approx(0.967, abs=1e-3)


def test_median_ci_small_n_is_the_whole_range():
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert median_ci([5.0, 4.0, 3.0, 2.0, 1.0]) == (1.0, 5.0)
    assert median_ci([2.0]) == (2.0, 2.0)
    # n = 6 is the first n where the whole range reaches 95% (1 - 2/64); n = 9 the first that can drop the ends
    assert median_ci([float(i) for i in range(6)]) == (0.0, 5.0)
    assert median_ci([float(i) for i in range(8)]) == (0.0, 7.0)
    assert median_ci([float(i) for i in range(9)]) == (1.0, 7.0)
    assert median_ci([float(i) for i in range(7)], 0.99) == (0.0, 6.0)  # below 99% even so: the whole range


def test_median_ci_refuses_no_samples_and_bad_confidence():
    with pytest.raises(ValueError, match="no samples"):
        median_ci([])
    for bad in (0.0, 1.0, 95):
        with pytest.raises(ValueError, match="confidence"):
            median_ci([1.0, 2.0, 3.0], bad)


@pytest.mark.parametrize("n", range(6, 301))
def test_median_ci_exact_coverage_is_at_least_nominal(n):
    lo, hi = median_ci([float(i) for i in range(n)])
    assert 0 <= lo < n // 2 <= hi <= n - 1
    assert lo + hi == n - 1  # symmetric order statistics
    cov = _coverage(n, int(lo), int(hi))
    assert cov >= 0.95
    # and the narrowest such pair: one order statistic further in on each side falls below 95%
    assert hi - lo < 2 or _coverage(n, int(lo) + 1, int(hi) - 1) < 0.95
    if n >= 50:  # large n: not grossly conservative either
        assert cov <= 0.985


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
@pytest.mark.parametrize("n", [6, 7, 10, 15, 20, 33, 50, 51, 100, 257, 1000])
def test_median_ci_is_scipys_quantile_test_interval(n, confidence):
    stats = pytest.importorskip("scipy.stats")
    if not hasattr(stats, "quantile_test"):
        pytest.skip("scipy without quantile_test")
    rng = random.Random(n)
    samples = [rng.expovariate(1.0) for _ in range(n)]
    ci = stats.quantile_test(samples, q=statistics.median(samples), p=0.5).confidence_interval(confidence)
    if math.isnan(ci.low) or math.isnan(ci.high):  # scipy: no pair reaches the confidence
        assert median_ci(samples, confidence) == (min(samples), max(samples))
    else:
        assert median_ci(samples, confidence) == (ci.low, ci.high)


def test_median_ci_99_is_wider_than_95():
    data = [float(i) for i in range(100)]
    lo95, hi95 = median_ci(data, 0.95)
    lo99, hi99 = median_ci(data, 0.99)
    assert lo99 < lo95 and hi99 > hi95


def test_median_ci_simulated_coverage():
    """400 samples of n = 50 from Exp(1) (true median ln 2): the 95% CI covers it in about 96.7% of them."""
    rng = random.Random(1234)
    true_median = math.log(2)
    trials = 400
    covered = 0
    for _ in range(trials):
        lo, hi = median_ci([rng.expovariate(1.0) for _ in range(50)])
        covered += lo <= true_median <= hi
    assert 0.935 <= covered / trials <= 0.99


def test_median_ci_simulated_coverage_n15():
    """2000 samples of n = 15 from a skewed law (lognormal, true median 1): coverage >= 95% in theory (96.5% exact
    for [x_(4), x_(12)]); with 2000 trials the empirical share stays above 93% (the binomial sd is ~0.4%)."""
    rng = np.random.default_rng(2024)
    trials, n = 2000, 15
    draws = rng.lognormal(mean=0.0, sigma=1.0, size=(trials, n))  # median exp(0) = 1
    covered = 0
    for row in draws:
        lo, hi = median_ci(row.tolist())
        covered += lo <= 1.0 <= hi
    assert _coverage(n, 3, 11) == pytest.approx(0.9648, abs=1e-4)
    assert 0.93 <= covered / trials <= 0.99


def test_rel_ci_half_width():
    s = Summary(median=10.0, q1=9.0, q3=11.0, ci_low=9.0, ci_high=12.0, rounds=20)
    assert s.rel_ci_half_width == pytest.approx(0.15)
    assert s.iqr == pytest.approx(2.0)
    assert Summary(0.0, 0.0, 0.0, 0.0, 1.0, 7).rel_ci_half_width == math.inf
    tight = summarize([1.0] * 20)
    assert tight.rel_ci_half_width == 0.0


# --- adaptive rounds ---------------------------------------------------------------------------------

class FakeClock:
    """Stands in for time.perf_counter in bench.measure.timer: time passes only when a round 'runs'."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(timer, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


def test_adaptive_stops_at_min_rounds_when_samples_are_tight(clock):
    calls_seen = []

    def measure_round(calls: int) -> float:
        calls_seen.append(calls)
        clock.now += calls * 1e-4
        return calls * 1e-4  # every call exactly 100 us

    t = timer._adaptive(measure_round, one_call_s=1e-4, case_budget_s=10.0, target=0.03, timer="fake")
    assert len(t.samples) == timer.MIN_ROUNDS
    assert t.noisy is False
    assert t.calls_per_round == 20  # MIN_ROUND_S / one call = 2 ms / 100 us
    assert set(calls_seen) == {20}
    assert t.samples == pytest.approx([1e-4] * timer.MIN_ROUNDS)  # per call, not per round
    assert t.timer == "fake"


def test_between_runs_after_every_round_outside_its_timing(clock):
    def measure_round(calls: int) -> float:
        clock.now += calls * 1e-4
        return calls * 1e-4

    def probe() -> None:  # the local control's probe: a slow one must neither enter a round nor cut the rounds
        probes.append(clock.now)
        clock.now += 1.0

    probes: list[float] = []
    t = timer._adaptive(measure_round, one_call_s=1e-4, case_budget_s=10.0, target=0.03, timer="fake", between=probe)
    assert len(probes) == len(t.samples) == timer.MIN_ROUNDS
    assert t.samples == pytest.approx([1e-4] * timer.MIN_ROUNDS)


def test_adaptive_marks_noisy_when_budget_runs_out(clock):
    rng = random.Random(7)

    def measure_round(calls: int) -> float:
        clock.now += 0.01  # each round costs 10 ms of (fake) time
        return calls * rng.choice([1e-3, 3e-3])  # bimodal: the median is never known to 3%

    t = timer._adaptive(measure_round, one_call_s=1e-3, case_budget_s=0.1, target=0.03, timer="fake")
    assert t.noisy is True
    # the budget check runs after each round from MIN_ROUNDS on: it trips once more than 0.1 s has passed
    assert timer.MIN_ROUNDS <= len(t.samples) <= 12
    assert summarize(t.samples).rel_ci_half_width > 0.03


def test_adaptive_noise_settles_before_budget(clock):
    """Noisy at first, then tight: keeps going past MIN_ROUNDS and stops as soon as the CI is narrow."""
    values = iter([1e-3, 5e-3, 1e-3, 5e-3, 1e-3, 5e-3, 1e-3] + [2e-3] * 1000)

    def measure_round(calls: int) -> float:
        clock.now += 1e-3
        return calls * next(values)

    t = timer._adaptive(measure_round, one_call_s=2e-3, case_budget_s=10.0, target=0.03, timer="fake")
    assert t.noisy is False
    assert timer.MIN_ROUNDS < len(t.samples) < 100
    s = summarize(t.samples)
    assert s.median == pytest.approx(2e-3)
    assert s.rel_ci_half_width <= 0.03


def test_adaptive_caps_rounds(clock):
    # a clock that never advances and samples that never agree: MAX_ROUNDS is the only way out. No two samples are
    # equal: with ties (two exact values) the exact CI can land on two equal order statistics, zero width.
    rng = random.Random(3)
    t = timer._adaptive(lambda calls: calls * rng.choice([1e-3, 4e-3]) * rng.uniform(1.0, 1.01), one_call_s=1e-3,
                        case_budget_s=1.0, target=0.0, timer="fake")
    assert len(t.samples) == timer.MAX_ROUNDS
    assert t.noisy is True


def test_calls_per_round_bounds():
    assert timer._calls_per_round(1.0) == 1  # slow calls: one per round
    assert timer._calls_per_round(1e-3) == 2
    assert timer._calls_per_round(1e-9) == 1000  # capped
    assert timer._calls_per_round(0.0) == 1000


def test_time_cpu_returns_per_call_seconds():
    def fn():
        time.sleep(0)

    t = timer.time_cpu(fn, one_call_s=1e-6, case_budget_s=0.05)
    assert t.timer == "perf_counter"
    assert len(t.samples) >= timer.MIN_ROUNDS
    assert t.calls_per_round == 1000
    assert all(0 < s < 1e-3 for s in t.samples)


# --- long calls and bounded calibration -----------------------------------------------------------------

def test_a_call_longer_than_the_budget_gets_fewer_rounds_but_at_least_three():
    from bench.measure.timer import LONG_CALL_MIN_ROUNDS, MIN_ROUNDS, min_rounds

    assert min_rounds(0.01, case_budget_s=1.0) == MIN_ROUNDS
    assert min_rounds(0.25, case_budget_s=1.0) == 4  # seven would take 1.75 s of a 1 s budget
    assert min_rounds(60.0, case_budget_s=1.0) == LONG_CALL_MIN_ROUNDS  # a 60 s bf16 GEMM: three, not seven


def test_a_slow_gemm_is_measured_on_a_smaller_shape_and_the_calibration_says_so(monkeypatch):
    from bench.measure import calibrate

    # a dtype this "machine" runs at 1 GFLOP/s: 2048^3 would take 17 s a call, 512^3 takes 0.27 s
    monkeypatch.setattr(calibrate, "_one_call_s", lambda fn, device: fn.flops / 1e9)
    monkeypatch.setattr(calibrate, "_time", lambda fn, device: fn.flops / 1e9)
    real = calibrate._matmul

    def matmul(m, n, k, dtype, device):
        fn = real(min(m, 8), min(n, 8), min(k, 8), dtype, device)  # nothing big is allocated in the test
        return type("Call", (), {"flops": 2 * m * n * k, "__call__": lambda self: fn()})()

    monkeypatch.setattr(calibrate, "_matmul", matmul)
    notes: list[str] = []
    flops = calibrate.gemm_flops_per_s("cpu", "bf16", ((2048, 2048, 2048),), notes)
    assert flops == pytest.approx(1e9)
    assert notes == ["bf16 GEMM: 2048x2048x2048 would take over 0.5 s a call; measured at 512x512x512"]
