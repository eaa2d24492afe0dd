"""Regression verdicts: two runs compared case by case. Pure analysis; compare_render.py turns it into text.

The rule. For a case timed in both runs, l = ln(current / baseline) of the chosen metric (median by default) of
the raw rounds (with --normalize, times x the GEMM FLOP/s each run measured of itself); thr = ln(1 + threshold).
  1. |l| <= thr: unchanged, whatever the statistics say.
  2. Otherwise the move is confirmed only if ALL of a-d hold; if any fails the case is "noisy" (the reason says which):
     a. significance: one-sided Mann-Whitney U on the two runs' raw rounds, p < alpha (0.01).
     b. own spread: the middle 60% of the rounds (20th-80th percentile) of the two runs do not overlap, so rounds
        that mix two modes, or scatter wider than the move, cannot make it.
     c. between runs (within-run statistics understate run-to-run noise; the cases themselves measure it). With m
        the median of all cases' l and sigma = 1.4826 x their median absolute deviation, ONE of:
        - alone: the case stands out, |l - m| > k * max(sigma, drift) (k = 4), drift being the wider scatter of the
          case's own rounds in either run (1.4826 x the MAD of their logs): a case whose level wandered that much
          within one run is known only to within it. In one A/A of default runs (2-core AMD EPYC, 2026-12-07) an
          sdpa-math prefill whose rounds scattered 10.5% in one run (3.0-5.5 ms against 2.82-2.89 ms in the other)
          stood out x1.28 where its class asked x1.26; over 33 A/A comparisons of default runs on that machine the
          comparisons failing on a lone case fell from 6 to 3 (on huge pages, 9 comparisons: from 1 to 0), and a third
          of the cases compared had their floor raised by their own scatter (median x1.25, 90th percentile x1.63);
        - group: it is past the threshold from 0 and from m, and the "clean" cases (a and b hold) past the threshold
          from m lean to its side: one-sided Wilcoxon signed-rank on their l - m, p < alpha (m, and the cases, of its
          class where that has its own noise: bench.regress.noise), over stretches of 32 cases in the current run's
          order, each the median of its moves (cases timed one after another move together). Unchanged code moves
          cases past the threshold as much one way as the other; a lean is a (partial) regression;
        - global: m itself is past the threshold on the case's side, and the clean cases past the threshold lean
          that way (signed-rank on their l, p < alpha): the whole run moved.
     d. passes: when either side pooled several runs, every current pass is past the threshold from every
        baseline pass (a value some pass already showed is not a change).
     When the move is global (c, third form), b and d are waived: the run as a whole is established to have moved,
     and each case past the threshold with significantly different rounds (a) is part of it.
     All hold: regressed (slower) or improved (faster).
With the in-run control (default on one machine) every timing verdict must also hold in GEMM units (time x GEMM
FLOP/s); otherwise the case is noisy. The GEMM is the case's own probe, timed between its rounds (control_flops,
bench.measure.control: a slow spell of a shared host moves both), where both sides recorded one; else each run's
calibration GEMM at its start and end. A cold case's control is its memory probe where both sides recorded one
(control_read: bytes/s of a read from its own copies; the host's other tenants move the memory's speed, not the GEMM's).
A case recorded `throttled` (its GPU stayed throttled for power or heat after a cool-down) in either run cannot be
regressed or improved in time: it is noisy. Nor can a CPU case whose probe ran under SPELL_SHARE of its run's
usual probe speed (bench.measure.control): it was timed in a slow spell of the host, which slows a call reading
memory more than the probe (run it again). A lone case stands out of the noise of its own class, its timing mode with
a CPU's cold ragged batches and warm op-by-op kernels' cases apart, where that class has min_cases cases
(bench.regress.noise.noise_class).
Memory is deterministic enough to need no statistics: peak_mem_bytes up by more than the threshold -> regressed.
Status: ok -> oom | incorrect | error is always a failure; other status changes are reported, not failed.
Fewer than min_cases (8) timed cases: sigma is taken as prior_sigma (20%: on a 2-core CPU, per-case ratios between two
identical sweeps spread 0.71-1.75, 5th-95th percentile: bench.regress.noise),
m as 0, and group/global do not apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench.measure.environment import THP_KEY, fingerprint_diff
from bench.regress.inrun import controlled, in_spell, own_control, positive, segments, spell_checked
from bench.regress.noise import CompareError, NoiseModel, Rule, median_mad, noise_class, noise_model
from bench.regress.verdicts import VERDICTS, CaseVerdict, Comparison, Summary
from bench.results import Entry, RunDocument, as_run
from bench.results.status import FAILING

__all__ = ["VERDICTS", "CaseVerdict", "Comparison", "CompareError", "Rule", "Summary", "compare_runs"]

METRICS = {"median": np.median, "mean": np.mean, "min": np.min}
OVERLAP = "the middle 60% of the two runs' rounds overlap"


@dataclass(frozen=True)
class _Timed:
    """One case's rounds in both runs (already scaled), before the noise model is known."""

    base: np.ndarray
    cur: np.ndarray
    base_value: float
    cur_value: float
    base_passes: tuple[float, ...]  # the metric of each pooled baseline pass; one entry for a plain run
    cur_passes: tuple[float, ...]  # likewise for the current side (several current runs pooled)

    @property
    def log_ratio(self) -> float:
        return math.log(self.cur_value / self.base_value)

    @property
    def drift(self) -> float:
        """The wider side's scatter of its rounds: 1.4826 x the MAD of their logs."""
        return max(median_mad(np.log(x))[1] if len(x) > 1 else 0.0 for x in (self.base, self.cur))


def _scaled(entry: Entry, scale: float | None, per_pass: bool, local: str | None = None
            ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The rounds, each pass multiplied by its own control (per_pass; the case's own probe when local) or all by
    the run's `scale`."""
    x = np.asarray(entry.samples, dtype=float)
    parts = segments(entry, local)
    for lo, hi, own in parts:
        factor = own if (per_pass and positive(own)) else scale
        x[lo:hi] *= factor if factor else 1.0
    return x, [(lo, hi) for lo, hi, _ in parts]


def _timed(base: Entry, cur: Entry, metric: str, base_scale: float | None, cur_scale: float | None,
           per_pass: bool = False, local: str | None = None) -> _Timed | None:
    fn = METRICS[metric]
    b, b_parts = _scaled(base, base_scale, per_pass, local)
    c, c_parts = _scaled(cur, cur_scale, per_pass, local)
    if not len(b) or not len(c):
        return None
    bv, cv = float(fn(b)), float(fn(c))
    if not (bv > 0 and cv > 0 and math.isfinite(bv) and math.isfinite(cv)):
        return None
    return _Timed(b, c, bv, cv, tuple(float(fn(b[lo:hi])) for lo, hi in b_parts),
                  tuple(float(fn(c[lo:hi])) for lo, hi in c_parts))


def _pct(ratio: float) -> str:
    return f"{abs(ratio - 1) * 100:.0f}%"


def _within(t: _Timed, rule: Rule) -> tuple[float | None, list[str]]:
    """(p, doubts) from the case's own rounds, for a move in the direction of its ratio (steps a and b)."""
    if min(len(t.base), len(t.cur)) < rule.min_rounds:
        return None, [f"too few rounds to test ({len(t.base)} vs {len(t.cur)})"]
    from scipy.stats import mannwhitneyu  # here: importing scipy.stats takes 1.6 s of CPU

    d = 1 if t.log_ratio > 0 else -1
    p = float(mannwhitneyu(t.cur, t.base, alternative="greater" if d > 0 else "less").pvalue)
    # middle 60%: wide enough to catch two modes mixed in one run, narrow enough to ignore a few preempted rounds
    return p, _doubts(p, d, np.quantile(t.base, [0.2, 0.8]), np.quantile(t.cur, [0.2, 0.8]), rule)


def _doubts(p: float, d: int, base_q: np.ndarray, cur_q: np.ndarray, rule: Rule) -> list[str]:
    doubts = []
    if p >= rule.alpha:
        doubts.append(f"not significant (p={p:.2g})")
    (b20, b80), (c20, c80) = base_q, cur_q
    if (c20 <= b80) if d > 0 else (c80 >= b20):
        doubts.append(OVERLAP)
    return doubts


# Above this many rounds on both sides scipy's Mann-Whitney U is the normal approximation whatever the data, so
# cases with equal round counts can be tested in one vectorised call with results identical to one call each.
ASYMPTOTIC_ABOVE = 8


def _within_all(timed: dict[str, _Timed], rule: Rule) -> dict[str, tuple[float | None, list[str]]]:
    """_within of every case that moved past the threshold (the others are unchanged: their rounds are not read).

    A full sweep is 10,000 cases: one scipy call per case was most of compare's time, so cases with the same
    round counts and direction go through scipy together."""
    thr = math.log1p(rule.threshold)
    out: dict[str, tuple[float | None, list[str]]] = {}
    batches: dict[tuple[int, int, int], list[str]] = {}
    for cid, t in timed.items():
        if abs(t.log_ratio) <= thr:
            continue
        nb, nc = len(t.base), len(t.cur)
        if min(nb, nc) > max(ASYMPTOTIC_ABOVE, rule.min_rounds - 1):
            batches.setdefault((nb, nc, 1 if t.log_ratio > 0 else -1), []).append(cid)
        else:
            out[cid] = _within(t, rule)
    from scipy.stats import mannwhitneyu

    for (_, _, d), cids in batches.items():
        base = np.stack([timed[c].base for c in cids])
        cur = np.stack([timed[c].cur for c in cids])
        pvalues = mannwhitneyu(cur, base, alternative="greater" if d > 0 else "less", axis=1).pvalue
        base_q = np.quantile(base, [0.2, 0.8], axis=1).T
        cur_q = np.quantile(cur, [0.2, 0.8], axis=1).T
        for i, cid in enumerate(cids):
            p = float(pvalues[i])
            out[cid] = (p, _doubts(p, d, base_q[i], cur_q[i], rule))
    return out


def _time_verdict(t: _Timed, within: tuple[float | None, list[str]], noise: NoiseModel,
                  rule: Rule, cls: str | None = None) -> tuple[str, str, float | None]:
    """(verdict, reason, p) for the timing of one case, following the rule in the module docstring."""
    thr = math.log1p(rule.threshold)
    ratio = t.cur_value / t.base_value
    l = t.log_ratio
    if abs(l) <= thr:
        return "unchanged", "", None
    d = 1 if l > 0 else -1
    said = f"{'slower' if d > 0 else 'faster'} by {_pct(ratio)}"
    p, doubts = within[0], list(within[1])
    center, class_sigma = noise.of(cls)  # the case's own class's noise (noise_class) where it has enough cases
    sigma = max(class_sigma, t.drift)  # a case whose rounds wandered this much in one run is known only to within it
    apart = d * (l - center)
    alone = apart > noise.k * sigma
    group_center, lean = noise.group_of(cls)  # the lean of the case's class, where it has its own
    in_group = lean == d and d * (l - group_center) > thr
    if not (alone or in_group or noise.global_shift == d) and noise.kind == "prior":
        # two runs made apart carry run-to-run noise that only many cases can measure: say so, and what decides
        doubts.append(f"cannot decide: {noise.n_cases} cases are too few to measure the run-to-run noise (a case "
                      f"must move x{noise.floor_ratio:.2f} to count); `python -m bench ab REV` decides one case "
                      "from interleaved blocks")
    elif not (alone or in_group or noise.global_shift == d):
        own = f" as its own rounds scattered {t.drift:.0%} in one run" if t.drift > class_sigma else ""
        doubts.append(f"within run-to-run noise (alone a case must stand out of the others by "
                      f"x{math.exp(noise.k * sigma):.2f}{own},"
                      f" and the cases past the threshold do not lean {'slower' if d > 0 else 'faster'})")
    if noise.global_shift == d:
        # The whole run moved this way, past the threshold, with the clean cases leaning the same way (and, with
        # the in-run control, not explained by the machine): a case past the threshold with significantly
        # different rounds is part of that move even when its own rounds or passes overlap.
        doubts = [x for x in doubts if x != OVERLAP]
    elif len(t.base_passes) > 1 or len(t.cur_passes) > 1:
        # every current pass must be past the threshold from every baseline pass: a stall or a slow spell
        # of the machine during one pass is not a change of the code
        nearest_base = max(t.base_passes) if d > 0 else min(t.base_passes)
        nearest_cur = min(t.cur_passes) if d > 0 else max(t.cur_passes)
        if d * math.log(nearest_cur / nearest_base) <= thr:
            doubts.append(f"within the range of the passes ({len(t.base_passes)} baseline, "
                          f"{len(t.cur_passes)} current)")
    if doubts:
        return "noisy", f"{said}, but " + "; ".join(doubts), p
    return ("regressed" if d > 0 else "improved"), said, p


def _mem_ratio(base: Entry, cur: Entry) -> float | None:
    mb, mc = base.record.peak_mem_bytes, cur.record.peak_mem_bytes
    if isinstance(mb, (int, float)) and isinstance(mc, (int, float)) and mb > 0 and mc >= 0:
        return mc / mb
    return None


def _by_case(doc: RunDocument, label: str) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for entry in doc.entries():
        if entry.case_id in out:
            raise CompareError(f"{label}: case {entry.case_id} appears twice")
        out[entry.case_id] = entry
    return out


def compare_runs(baseline: RunDocument | dict, current: RunDocument | dict, rule: Rule | None = None,
                 normalize: bool = False, control: bool = True) -> Comparison:
    """Verdict per case (matched by case_id) plus a summary; raises CompareError when the runs are not comparable.

    baseline and current are documents as read by bench.results.read_run (or pooled by baseline.merge_passes).
    control: on one machine too, express each time in GEMM units of the same run (pass), measured at the
    run's start and end: a machine that is slower today is slower at the GEMM too, slower code is not.
    """
    rule = rule or Rule()
    baseline, current = as_run(baseline), as_run(current)
    if rule.metric not in METRICS:
        raise CompareError(f"metric {rule.metric!r}: choose one of {', '.join(METRICS)}")
    binfo, cinfo = baseline.meta, current.meta
    bgemm, cgemm = binfo.control_gemm(), cinfo.control_gemm()  # each run's in-run control
    diffs = tuple(fingerprint_diff(baseline.fingerprint, current.fingerprint))
    if diffs and not normalize:
        raise CompareError("the runs come from different machines: " + "; ".join(diffs)
                           + " (compare runs of one machine, or pass --normalize to compare in GEMM units)")
    base_scale = cur_scale = None
    missing = [name for name, gemm in (("baseline", bgemm), ("current", cgemm)) if gemm is None]
    if normalize and missing:
        raise CompareError(f"--normalize needs attnbench.calibration.gemm_flops_per_s; missing in the "
                           f"{' and '.join(missing)} run")
    if normalize:
        # time x GEMM speed of the same run: the share of the machine's speed a case needs, comparable across machines
        base_scale, cur_scale = bgemm, cgemm
    bcases, ccases = _by_case(baseline, "baseline"), _by_case(current, "current")
    common = [cid for cid in bcases if cid in ccases]
    if not common:
        raise CompareError(f"no case in common: the baseline has {len(bcases)} cases (profile {binfo.profile}), "
                           f"the current run {len(ccases)} (profile {cinfo.profile})")

    noise, verdicts = _judge(bcases, ccases, common, rule, base_scale, cur_scale, per_pass=normalize)
    use_control = control and not normalize and not missing
    local: dict[str, str] = {}
    if use_control:
        # The in-run control: the same verdicts in GEMM units of each run (pass), or of each case's own probe. A
        # move that disappears there was the machine's speed (a slow spell of a shared host), not the code: noisy.
        local = {cid: k for cid in common if (k := own_control(bcases[cid], ccases[cid]))}
        _, in_gemm = _judge(bcases, ccases, common, rule, bgemm, cgemm, per_pass=True, local=local)
        verdicts = [controlled(v, w, rule, local.get(v.case_id)) for v, w in zip(verdicts, in_gemm, strict=True)]
        spells = {name: in_spell(cases) for name, cases in (("baseline", bcases), ("current", ccases))}
        verdicts = [spell_checked(v, spells, rule) for v in verdicts]
    verdicts += [CaseVerdict(cid, "missing", False, "in the baseline, not in the current run", bcases[cid].status,
                             None, None, None, None, None, None) for cid in bcases if cid not in ccases]
    verdicts += [CaseVerdict(cid, "new", False, "not in the baseline", None, ccases[cid].status, None, None,
                             None, None, None) for cid in ccases if cid not in bcases]
    verdicts.sort(key=lambda v: (not v.failing, VERDICTS.index(v.verdict), -(v.ratio or 0), v.case_id))

    warnings = []
    for name, info in (("baseline", binfo), ("current", cinfo)):
        if info.complete is False:
            warnings.append(f"the {name} run is incomplete (it stopped before the end of its sweep)")
    warnings += allocator_warnings(baseline.environment.get("allocator"), current.environment.get("allocator"))
    counts = {name: sum(v.verdict == name for v in verdicts) for name in VERDICTS}
    n_failing = sum(v.failing for v in verdicts)
    if control and not normalize and missing:
        warnings.append(f"no GEMM calibration in the {' and '.join(missing)} run: no in-run control")
    summary = Summary(binfo, cinfo, rule, noise, normalize, diffs, counts, n_failing, len(common), tuple(warnings),
                      1 if n_failing else 0, use_control, len(local),
                      read_controlled=sum(k == "control_read" for k in local.values()))
    return Comparison(summary, tuple(verdicts))


def allocator_warnings(baseline: object, current: object) -> list[str]:
    """A line when the two runs' allocators differ (bench.measure.environment.allocator_settings): a case that
    allocates large blocks (a KV cache's cold copies, a materialising kernel's scores) moves with its pages and heap,
    not with the code (on huge pages a default run's cold decode steps read 10-20% faster, 2-core AMD EPYC). A variable
    absent is unset; the kernel's THP mode counts only where both runs recorded it (results before it did not)."""
    if not isinstance(baseline, dict) or not isinstance(current, dict):
        return []
    keys = sorted(k for k in {*baseline, *current} if k != THP_KEY or (k in baseline and k in current))
    differ = [f"{k} {baseline.get(k, 'unset')} (baseline) vs {current.get(k, 'unset')} (current)"
              for k in keys if baseline.get(k) != current.get(k)]
    return [f"the allocator differs: {'; '.join(differ)}; cases that allocate large blocks (KV caches and their cold "
            "copies, a materialising kernel's scores) move with it, not with the code"] if differ else []


def _judge(bcases: dict[str, Entry], ccases: dict[str, Entry], common: list[str], rule: Rule, base_scale: float | None,
           cur_scale: float | None, per_pass: bool, local: dict[str, str] | None = None
           ) -> tuple[NoiseModel, list[CaseVerdict]]:
    """The noise model and a verdict per common case, with times scaled as given; the cases in `local` by their own
    probes instead (a log ratio needs the same kind of control on both sides, not across cases)."""
    timed = {}
    for cid in common:
        b, c = bcases[cid], ccases[cid]
        if b.status == "ok" and c.status == "ok":
            t = _timed(b, c, rule.metric, base_scale, cur_scale, per_pass=per_pass, local=(local or {}).get(cid))
            if t is not None:
                timed[cid] = t
    # clean or not matters only past the threshold (regress.noise); a case within it is unchanged, its rounds unread
    within = {cid: (None, []) for cid in timed} | _within_all(timed, rule)
    classes = {cid: noise_class(ccases[cid].record) for cid in timed}
    order = {cid: i for i, cid in enumerate(ccases)}  # the current run's order: neighbours share a stretch
    noise = noise_model([t.log_ratio for t in timed.values()], [not within[cid][1] for cid in timed], rule,
                        [classes[cid] for cid in timed], [order[cid] for cid in timed])
    return noise, [_case_verdict(cid, bcases[cid], ccases[cid], timed.get(cid), within.get(cid), noise, rule)
                   for cid in common]


def _case_verdict(cid: str, b: Entry, c: Entry, t: _Timed | None, within: tuple[float | None, list[str]] | None,
                  noise: NoiseModel, rule: Rule) -> CaseVerdict:
    bs, cs = b.status, c.status
    if "skipped" in (bs, cs) and bs != cs:  # the time budget left it out of one run: nothing to compare
        which = "the baseline" if bs == "skipped" else "the current run"
        return CaseVerdict(cid, "missing" if cs == "skipped" else "new", False, f"skipped in {which} (time budget)",
                           bs, cs, None, None, None, None, None)
    if bs != cs:
        # ok -> a failure is a regression; so is a case that now hangs or crashes whatever it did before
        failing = (bs == "ok" and cs in FAILING) or cs in ("timeout", "crashed")
        why = (c.record.reason or "").strip()
        return CaseVerdict(cid, "status changed", failing, f"{bs} -> {cs}" + (f": {why}" if why else ""), bs, cs,
                           None, None, None, None, None)
    if bs != "ok":
        return CaseVerdict(cid, "unchanged", False, f"{bs} in both runs", bs, cs, None, None, None, None, None)
    mem = _mem_ratio(b, c)
    if t is None or within is None:
        time_v, time_why, p, ratio = "noisy", "no usable rounds in one of the runs", None, None
    else:
        time_v, time_why, p = _time_verdict(t, within, noise, rule, noise_class(c.record))
        ratio = t.cur_value / t.base_value
        throttled = [name for name, e in (("baseline", b), ("current", c)) if e.record.throttled]
        if throttled and time_v in ("regressed", "improved"):  # a throttled GPU's clocks moved, not the code
            time_v, time_why = "noisy", f"{time_why}, but the GPU was throttled in the {' and '.join(throttled)} run"
    mem_v, mem_why = "unchanged", ""
    if mem is not None and mem > 1 + rule.threshold:
        mem_v, mem_why = "regressed", f"peak memory +{_pct(mem)}"
    elif mem is not None and mem < 1 / (1 + rule.threshold):  # symmetric in log, like the times
        mem_v, mem_why = "improved", f"peak memory -{_pct(mem)}"
    # one verdict per case: a regression of either kind wins, then doubt, then gains
    if "regressed" in (time_v, mem_v):
        verdict = "regressed"
    elif time_v == "noisy":
        verdict = "noisy"
    elif "improved" in (time_v, mem_v):
        verdict = "improved"
    else:
        verdict = "unchanged"
    reason = "; ".join(s for s in (time_why, mem_why) if s)
    return CaseVerdict(cid, verdict, verdict == "regressed", reason, bs, cs,
                       t.base_value if t else None, t.cur_value if t else None, ratio, p, mem)
