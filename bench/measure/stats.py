"""Statistics of per-call times: the median is the headline; IQR and a distribution-free 95% CI beside it.

Quartiles are numpy's (``np.quantile(..., method="hazen")``), which is exactly the definition pytest-benchmark's
``Stats.q1``/``Stats.q3`` use (Wikipedia's quartile methods 2 and 3: the median of each half for even n, the
weighted order statistics for odd n). A record's ``iqr_s`` therefore equals the ``iqr`` that pytest-benchmark
writes and shows for the same samples, up to float rounding in the last bits. numpy's default ``linear`` method
would not: on the 8 samples 1..8 it gives IQR 3.5, pytest-benchmark 4.0.

The median's CI comes from order statistics with exact binomial coverage (Bin(n, 1/2)'s pmf), no normality
assumed: the narrowest symmetric pair [x_(k), x_(n+1-k)] whose coverage 1 - 2 * P(Bin(n, 1/2) <= k - 1) is at
least the confidence asked for. It is the interval ``scipy.stats.quantile_test(x, p=0.5).confidence_interval()``
gives, computed here without its hypothesis test (and on scipy versions that lack it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import median

import numpy as np


@lru_cache(maxsize=4096)
def _ci_rank(n: int, confidence: float) -> int | None:
    """0-based index k of the CI [x[k], x[n - 1 - k]] of the median of n samples, or None if even the whole range
    [x[0], x[n - 1]] covers less than ``confidence`` (for 95%: n < 6; the whole range of 5 covers 93.75%).

    Coverage of [x[k], x[n-1-k]] for a continuous law: P(k + 1 <= B <= n - 1 - k) = 1 - 2 * cdf(k), B ~ Bin(n, 1/2)
    the number of samples below the true median. The largest k with cdf(k) <= (1 - confidence) / 2 is wanted.
    """
    tail = (1 - confidence) / 2
    k, cdf = -1, 0.0
    for i, pmf in enumerate(_half_binomial_pmf(n)):  # cdf(i) = P(B <= i), summed upwards until it passes the tail
        if cdf + pmf > tail:
            break
        cdf += pmf
        k = i
    return k if k >= 0 else None


def _half_binomial_pmf(n: int):
    """P(B = i) for B ~ Bin(n, 1/2), i = 0, 1, ... up to n // 2: exact integers up to n = 1000, log-gamma beyond
    (where a float's 2**-n underflows). scipy.stats.binom gives the same; importing it costs a process 1.2 s."""
    if n <= 1000:
        total = 2**n
        yield from (math.comb(n, i) / total for i in range(n // 2 + 1))
        return
    log_norm = math.lgamma(n + 1) - n * math.log(2)
    yield from (math.exp(log_norm - math.lgamma(i + 1) - math.lgamma(n - i + 1)) for i in range(n // 2 + 1))


def median_ci(samples: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """CI of the median from order statistics with exact binomial coverage >= ``confidence`` (no normality assumed).

    Too few samples for any pair of order statistics to reach the confidence (for 95%: fewer than 6): the whole
    range (min, max), the widest interval the data give, whose coverage 1 - 2**(1 - n) is then below nominal
    (93.75% for n = 5, 75% for n = 3); with one sample, (x, x).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence!r}: must lie strictly between 0 and 1")
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples for a confidence interval")
    n = len(ordered)
    k = _ci_rank(n, confidence)
    if k is None:
        return ordered[0], ordered[-1]
    return ordered[k], ordered[n - 1 - k]


@dataclass(frozen=True)
class Summary:
    median: float
    q1: float
    q3: float
    ci_low: float
    ci_high: float
    rounds: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def rel_ci_half_width(self) -> float:
        """Half the CI's width relative to the median: 0.03 means the median is known to +-3%."""
        return (self.ci_high - self.ci_low) / 2 / self.median if self.median > 0 else math.inf


def summarize(samples: list[float]) -> Summary:
    """Median, pytest-benchmark's quartiles (numpy's hazen method) and the median's exact 95% CI (median_ci)."""
    if not samples:
        raise ValueError("no samples to summarize")
    ordered = sorted(samples)
    q1, q3 = np.quantile(np.asarray(ordered, dtype=float), [0.25, 0.75], method="hazen")
    lo, hi = median_ci(ordered)
    return Summary(median(ordered), float(q1), float(q3), lo, hi, len(ordered))
