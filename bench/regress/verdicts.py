"""What a comparison returns: a verdict per case and a summary (bench.regress.compare and bench.regress.ab.verdict
fill them, bench.regress.render turns them into text)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.regress.noise import NoiseModel, Rule
from bench.results.meta import RunMeta

# by severity; "inconclusive" only from bench ab: a case's block interval straddles the threshold
VERDICTS = ("regressed", "status changed", "noisy", "inconclusive", "improved", "missing", "new", "unchanged")


@dataclass(frozen=True)
class CaseVerdict:
    case_id: str
    verdict: str  # one of VERDICTS
    failing: bool  # counts towards exit code 1
    reason: str
    base_status: str | None
    cur_status: str | None
    base_value: float | None  # the metric over the rounds: seconds, or GEMM FLOP-equivalents with --normalize
    cur_value: float | None
    ratio: float | None  # current / baseline time (bench ab: the Hodges-Lehmann estimate of the block ratios)
    p_value: float | None
    mem_ratio: float | None  # current / baseline peak_mem_bytes
    blocks: tuple[float, ...] = ()  # bench ab: each ABBA block's B/A ratio, in block order
    interval: tuple[float, float] | None = None  # bench ab: the (1 - 2 alpha) interval of the ratio
    workers: tuple[int, int] | None = None  # bench ab: how many worker processes each side (A, B) timed it in


@dataclass(frozen=True)
class Summary:
    baseline: RunMeta  # each side as the verdict table heads it: id, profile, passes pooled, in-run control
    current: RunMeta
    rule: Rule
    noise: NoiseModel
    normalized: bool  # times were divided into GEMM units by each run's own calibration
    fingerprint_diffs: tuple[str, ...]  # what differs between the machines (only possible with normalized)
    counts: dict[str, int]
    n_failing: int  # regressed cases plus failing status changes
    n_matched: int
    warnings: tuple[str, ...]
    exit_code: int  # 0 no regression, 1 regression
    controlled: bool = False  # timing verdicts also had to hold in GEMM units of each run (the in-run control)
    locally_controlled: int = 0  # ... of which this many cases against their own probes (bench.measure.control)
    read_controlled: int = 0  # ... of which this many cold cases against their own memory probes
    method: str = "runs"  # "runs": the noise model across cases (compare); "blocks": each case's ABBA blocks (ab)


@dataclass(frozen=True)
class Comparison:
    summary: Summary
    cases: tuple[CaseVerdict, ...] = field(default_factory=tuple)
