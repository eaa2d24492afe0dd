"""The run-to-run noise model of a comparison, and the knobs of the verdict (bench.regress.compare applies them).

Within-run statistics understate the noise between runs on shared machines. Measured on a shared 2-core AVX-512
cloud machine (torch 2.13.0 CPU, B=1, Hq=8, D=64, causal fp32, three fresh processes each timing every case for 1 s):
per-case ratios between two identical sweeps ranged x0.71-x1.75 (5th-95th percentile) while the geometric mean over
all cases moved ~4%; naive and sdpa-math at S=512 were bimodal between processes (5.6 vs 12.2 ms) while each run's
CI looked tight, largely glibc malloc mapping the S x S intermediates afresh on every call (with `--malloc tuned`,
naive at S=1024 took ~25-33 ms instead of ~57). Reproduce: three runs of `python -m bench run --backend
naive,sdpa-math,sdpa-flash --heads 8 --kv-heads 8 --seq 256,512,1024 --mask causal --phase prefill --budget 1 --out
results/noise-$i.json`, then `python -m bench compare results/noise-1.json results/noise-2.json`.
So the cases of a comparison measure it themselves: the median of their log ratios is how much the run as a whole
moved, and 1.4826 times their median absolute deviation is the spread of one case.
Cases of different timing modes meet different noise: a cold case reads its KV cache from memory that the host's
other tenants contend for, a warm one from its own cache. In three default runs of one commit (2-core AMD EPYC, a KVM
guest, 2026-12-06) the cold cases' run-to-run sigma was 10-12.5% and the warm ones' 6%. So each mode with at least
min_cases cases gets its own center, sigma and lean (NoiseModel.classes) for the tests of a lone case and of a group;
the others, and the global test, use all cases together. A lean is the class's own because one run meets more of a
class's kind of noise than the other: in an A/A of one commit on that AMD (2026-12-07) the second run read memory 11%
slower (its cases' memory probes) and every mode leaned slower (p 0.001-0.03), the cold ragged batches least.
A cold ragged batch on a CPU (a serving batch with lengths that differ: a replayed trace's step, its KV caches
rotated) is a class apart: its one call reads tens of sequences' caches of different lengths, and where those many
buffers landed in a process moves it between runs while its rounds stay tight. In three default runs of one commit
(2-core AMD EPYC, a KVM guest, 2026-12-07) the cold ragged batches' run-to-run sigma was 9.8-14.4% against 4.5-5.4%
for the other cold cases, and five of them stood out of the cold cases' noise (x1.29-1.62) in three A/A comparisons.
Most of that was 4 KiB pages: since the tuned allocator puts torch's large blocks on huge pages (bench.commands.run),
two such triples (same AMD, 2026-12-07) read the ragged batches' sigma 1.9-4.5% against 4.7-8.1% for the other cold
cases: still their own noise, and results written with `--malloc default` meet the old one.
Warm ones stay in their mode: 3.3-6.6% against 2.9-3.6%, too close, from about twenty cases, to need a sigma of their
own. A warm case of an op-by-op kernel on a CPU is a class apart too: a materialising one (naive, sdpa-math: its
Sq x Skv scores allocated afresh on every call, placed wherever that process's heap puts them) or a linear layer's
torch path (hf-gdn: its chunks' states, likewise). Over 13 A/A comparisons of default runs (2-core AMD EPYC, a KVM
guest, 2026-12-06/07) the materialising ones' run-to-run sigma was 4.8-15% (median 9.7%) against 2.3-13% (median
4.7%) for the other warm cases, and of the 10 warm cases compare called regressed in those A/As nine were theirs
and one hf-gdn's (x1.18-1.40); per backend, a warm case's median distance from the warm cases' center over 18
comparisons (six triples of runs) was 5.1% for naive, 5.8% for sdpa-math and 5.1% for hf-gdn, against 2.5-3.2% for
sdpa, sdpa-flash, flex and topk-gather (an hf-gdn prefill read x1.31 in one A/A and x0.75 in the next). A class too
small for its own sigma takes its timing mode's (noise_class, NoiseModel.of).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from bench.backends import BACKENDS
from bench.errors import InputError

# A lean is tested over stretches of this many cases in the current run's order, each its clean moves' median: the
# cases of one stretch share the process's state (where its heap has grown, what the host's other tenants do), so
# they move together. Over 15 A/A comparisons of default runs (2-core AMD EPYC, 2026-12-06/07) the log ratios'
# correlation with the case 1, 4, 16, 32 and 64 places later was 0.35, 0.19, 0.10, 0.03 and -0.02 (medians), and in
# one A/A a stretch of 12 sdpa-math prefills, timed one after another, all read x0.59-0.87 and made a lean alone.
STRETCH = 32
RAGGED = "ragged batch"  # the class of a CPU's cold ragged batches within their timing mode (noise_class)
OP_BY_OP = "op-by-op kernel"  # the class of a CPU's warm cases of a kernel that allocates as it goes (noise_class)


class CompareError(InputError):
    """Two runs that cannot be compared (other machine, nothing in common, bad threshold): exit code 2."""


def parse_threshold(text: str) -> float:
    """'10%' or '0.1' -> 0.1. A bare number >= 1 is refused: '10' could mean 10% or 1000%."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise CompareError(f"threshold {text!r} is not a number: write e.g. 10% or 0.1") from None
    if not math.isfinite(value) or value <= 0:
        raise CompareError(f"threshold {text!r} must be a positive amount, e.g. 10% or 0.1")
    if not raw.endswith("%") and value >= 1:
        raise CompareError(f"threshold {text!r} is ambiguous: write {raw}% for percent, or a fraction like 0.1")
    return value


@dataclass(frozen=True)
class Rule:
    """The knobs of the verdict; the defaults are what `python -m bench compare` uses."""

    metric: str = "median"
    threshold: float = 0.10  # practical significance: smaller changes are 'unchanged' whatever the statistics say
    alpha: float = 0.01  # for each test (rounds, group, global); strict because a CI run tests many cases at once
    k: float = 4.0  # how many run-to-run sigmas a case must stand out of the others to count on its own
    min_rounds: int = 5  # with fewer, Mann-Whitney U cannot reach alpha (5 vs 5 rounds: p >= 1/252)
    min_cases: int = 8  # with fewer timed cases the spread across cases is not estimated: prior_sigma is used
    prior_sigma: float = 0.2  # A/A per-case ratios on a 2-core CPU spread 0.71-1.75 (5th-95th pct; above)
    sigma_floor: float = 0.01  # identical synthetic runs have zero spread; never claim under 1% noise


class ClassNoise(NamedTuple):
    """One class's own noise (a timing mode with enough cases: the module docstring)."""

    name: str
    cases: int
    center: float
    sigma: float
    group_shift: int = 0  # its clean cases past the threshold from its center lean: +1 slower, -1 faster, 0 neither


@dataclass(frozen=True)
class NoiseModel:
    """Run-to-run noise of this comparison, read off the per-case log ratios of all cases timed in both runs."""

    kind: str  # "cross-case" (estimated from the cases) | "prior" (too few cases to estimate)
    n_cases: int  # cases timed in both runs
    center: float  # median log ratio: how much the run as a whole moved
    sigma: float  # run-to-run sigma of one case's log ratio (from the MAD of all cases' log ratios)
    k: float
    n_slower: int  # clean cases slower by more than the threshold, from 0 and from the center ...
    n_faster: int  # ... and faster; for unchanged code both are equally likely
    group_p: float  # signed-rank test that those moves lean to the side with more cases (one-sided)
    group_shift: int  # +1: they lean slower (a partial regression); -1 faster; 0 no lean
    global_p: float  # signed-rank test that the clean moves past the threshold from 0 lean to the center's side
    global_shift: int  # +1: the whole run is slower past the threshold; -1 faster; 0 neither
    geomean_ratio: float | None  # geometric mean of the ratios of all timed cases (information only)
    classes: tuple[ClassNoise, ...] = ()  # where a class has its own

    @property
    def center_ratio(self) -> float:
        return math.exp(self.center)

    @property
    def floor_ratio(self) -> float:
        """How far (as a ratio) a case must stand out of the others to count on its own."""
        return math.exp(self.k * self.sigma)

    def _own(self, cls: str | None) -> ClassNoise | None:
        """The class's own noise where it has one, else its timing mode's (a cold ragged batch's class has too few
        cases), else None (all cases')."""
        own = {c.name: c for c in self.classes}
        mode = cls.split(", ")[0] if cls else cls
        return own.get(cls) or own.get(mode)

    def of(self, cls: str | None) -> tuple[float, float]:
        """(center, sigma) a case of this class stands out of (_own, else all cases')."""
        own = self._own(cls)
        return (own.center, own.sigma) if own else (self.center, self.sigma)

    def group_of(self, cls: str | None) -> tuple[float, int]:
        """(center, lean) of the group a case of this class belongs to (_own, else all cases')."""
        own = self._own(cls)
        return (own.center, own.group_shift) if own else (self.center, self.group_shift)

    def floor_ratio_of(self, cls: str | None) -> float:
        return math.exp(self.k * self.of(cls)[1])


def median_mad(values: Sequence[float]) -> tuple[float, float]:
    """Median and MAD-based sigma (1.4826 MAD, small-sample corrected) of the values."""
    x = np.asarray(values, dtype=float)
    center = float(np.median(x))
    n = len(x)
    return center, 1.4826 * n / (n - 0.8) * float(np.median(np.abs(x - center)))


def _lean_p(moves: np.ndarray, direction: int) -> float:
    """One-sided Wilcoxon signed-rank p that the moves lean to `direction` (more of them, and larger), not 0/0."""
    moves = moves[moves != 0]
    if not len(moves):
        return 1.0
    from scipy.stats import wilcoxon  # here: importing scipy.stats takes 1.6 s of CPU, and most commands never test

    return float(wilcoxon(moves, alternative="greater" if direction > 0 else "less").pvalue)


def noise_class(record: Any) -> str | None:
    """The class whose noise a case is judged against: its timing mode, on a CPU a cold ragged batch and a warm case
    of an op-by-op kernel (materialising, or a linear layer's torch path) apart (the module docstring)."""
    mode = getattr(record, "timing_mode", None)
    if getattr(record, "device", "") != "cpu":
        return mode
    serving = getattr(getattr(record, "shape", None), "serving", None)
    if mode == "cold" and serving is not None and serving.lengths not in (None, "equal"):
        return f"{mode}, {RAGGED}"
    backend = BACKENDS.get(getattr(record, "backend", ""))
    if mode == "warm" and backend is not None and (backend.memory == "materialising" or backend.linear):
        return f"{mode}, {OP_BY_OP}"
    return mode


def noise_model(log_ratios: Sequence[float], clean: Sequence[bool], rule: Rule,
                classes: Sequence[str | None] | None = None, positions: Sequence[int] | None = None) -> NoiseModel:
    """Between-run noise from the cases themselves: within-run CIs understate it (README: noise on shared CPUs).

    clean[i]: case i's own rounds show its move clearly (steps a and b); only such cases count in the group and
    global tests, so that cases with wide or bimodal rounds cannot make or hide a lean. classes[i]: case i's class
    (noise_class); a class of at least min_cases cases gets its own center and sigma (the module docstring).
    positions[i]: case i's place in the current run's order; given, a lean is tested over stretches of STRETCH cases,
    where the run has enough of them for the test to reach alpha (7 at 0.01; with fewer, case by case, as if the cases
    moved independently).
    """
    x = np.asarray(log_ratios, dtype=float)
    ok = np.asarray(clean, dtype=bool)
    n = len(x)
    thr = math.log1p(rule.threshold)
    geomean = math.exp(float(np.mean(x))) if n else None
    if n < rule.min_cases:
        return NoiseModel("prior", n, 0.0, rule.prior_sigma, rule.k, 0, 0, 1.0, 0, 1.0, 0, geomean)
    # Robust, but a regression of a third of the cases still doubles sigma: the group test below covers that.
    center, sigma = median_mad(x)
    sigma = max(sigma, rule.sigma_floor)
    pos = None if positions is None else np.asarray(positions, dtype=int)
    if pos is not None and len(np.unique(pos // STRETCH)) < math.log2(1 / rule.alpha):
        pos = None  # too few stretches for their test ever to reach alpha: the cases are tested one by one
    slower, faster, group_p, group = _group(x, ok, center, rule, pos)
    # global: the center itself moved past the threshold, and the clean cases past it lean the same way
    global_p = _lean_p(x[ok & (np.abs(x) > thr)], 1 if center > 0 else -1)
    moved = abs(center) > thr and global_p < rule.alpha
    return NoiseModel("cross-case", n, center, sigma, rule.k, slower, faster, group_p, group, global_p,
                      int(np.sign(center)) if moved else 0, geomean, _classes(x, ok, classes, rule, pos))


def _group(x: np.ndarray, ok: np.ndarray, center: float, rule: Rule, pos: np.ndarray | None = None
           ) -> tuple[int, int, float, int]:
    """(slower, faster, p, lean) of the clean moves past the threshold from the center, counted on both sides
    alike (a drift of the whole run is not a group; counting only those past it from 0 as well favoured the side
    away from 0: a run that drifted 5% slower leaned slower). With positions, the test is over stretches of the run
    (STRETCH), each the median of its moves: cases timed one after another move together."""
    past = ok & (np.abs(x - center) > math.log1p(rule.threshold))
    slower, faster = int(np.sum(past & (x > center))), int(np.sum(past & (x < center)))
    moves = x[past] - center
    if pos is not None and len(moves):
        stretch = pos[past] // STRETCH
        moves = np.array([np.median(moves[stretch == k]) for k in np.unique(stretch)])
    lean = 1 if np.sum(moves > 0) >= np.sum(moves < 0) else -1
    p = _lean_p(moves, lean)
    return slower, faster, p, lean if p < rule.alpha else 0


def _classes(x: np.ndarray, ok: np.ndarray, classes: Sequence[str | None] | None, rule: Rule,
             pos: np.ndarray | None = None) -> tuple[ClassNoise, ...]:
    """The own noise of each class with at least min_cases cases, when there are several classes."""
    if classes is None or len(set(classes)) < 2:
        return ()
    names = np.asarray([str(c) for c in classes])
    out = []
    for name in sorted(set(names)):
        mine = names == name
        if int(mine.sum()) >= rule.min_cases:
            center, sigma = median_mad(x[mine])
            lean = _group(x[mine], ok[mine], center, rule, None if pos is None else pos[mine])[3]
            out.append(ClassNoise(name, int(mine.sum()), center, max(sigma, rule.sigma_floor), lean))
    return tuple(out)
