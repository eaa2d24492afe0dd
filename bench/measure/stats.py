"""Statistics of per-call times: the median is the headline; IQR and a distribution-free 95% CI beside it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median


def _quantile(ordered: list[float], p: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    pos = p * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median_ci(samples: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """CI of the median from order statistics (binomial, no normality assumed); needs >= 6 samples."""
    n = len(samples)
    ordered = sorted(samples)
    if n < 6:
        return ordered[0], ordered[-1]
    z = {0.95: 1.959964, 0.99: 2.575829}[confidence]
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return ordered[lo], ordered[hi]


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
    if not samples:
        raise ValueError("no samples to summarize")
    ordered = sorted(samples)
    lo, hi = median_ci(ordered)
    return Summary(median(ordered), _quantile(ordered, 0.25), _quantile(ordered, 0.75), lo, hi, len(ordered))
