"""A case's record: the one module that builds it, and the one list of its fields with their meaning.

A record is a frozen Record, built once per case and stored flat (Record.to_dict) as a results entry's
`extra_info`; a worker sends it the same way. Its shape columns come from the shape itself
(bench.problem.columns.shape_fields), so a new shape field reaches the files, the loader and the report without edits
here. Seconds and bytes only; human units belong to reports.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.problem.columns import LATER_FIELDS, SHAPE_DEFAULTS, SHAPE_DOCS, shape_fields, shape_from_fields
from bench.problem.shapes import AttentionShape, ShapeError
from bench.results.meta import Calibration

if TYPE_CHECKING:
    from bench.problem.case import Case

CASE_DOCS: dict[str, str] = {
    "case_id": "stable case id: backend/variant/shape/dtype/mask/phase/pass/device",
    "status": "ok / unsupported / oom / error / incorrect",
    "reason": "why a case is not ok; on an ok case a note, e.g. why it is flagged noisy",
    "backend": "attention implementation (naive, sdpa, sdpa-flash, ..., flex, flash-attn)",
}
RUN_OF_CASE_DOCS: dict[str, str] = {
    "phase": "prefill (Sq = Skv) / decode (Sq = 1 or 4 against Skv)",
    "pass": "fwd / fwd+bwd",
    "device": "cpu / cuda",
    "ran_on": "the device that ran the case under bench run --devices (e.g. cuda:1), else empty; not in the case id",
}
MEASURED_DOCS: dict[str, str] = {
    "flops": "useful FLOPs of one call (masked-out pairs not counted; fwd+bwd = 3.5 x fwd; a layer adds its "
             "projections)",
    "bytes": "minimum memory traffic of one forward call: Q, O at Hq heads + K, V at Hkv heads (a layer adds its "
             "weights)",
    "useful_flops": "the FLOPs that count, as flops: the pairs the mask (and a sparsity) keeps",
    "executed_flops": "the FLOPs the backend really computes for it (its `executes` trait: every pair for a dense "
                      "masked kernel, kept blocks whole for a block-sparse one, K per query for a gather kernel, plus "
                      "a topk case's indexer); efficiency = executed / useful; empty when the backend does not say",
    "density": "sparse cases: kept pairs / the pairs the mask alone leaves (the ideal speedup is 1 / density)",
    "indexer_flops": "topk cases: the indexer's FLOPs (2 x B x H x D per pair it scores), inside executed_flops",
    "indexer_s": "topk cases: median time of the indexer alone (scores and top-K), seconds, timed apart from the "
                 "attention",
    "indexer_peak_mem_bytes": "topk cases: the indexer's measured peak memory above its inputs, bytes",
    "block_mask_build_s": "FlexAttention on sparse cases and draft trees: building the BlockMask from the keep-set "
                          "or the tree, seconds (once per keep-set, apart from the kernel's time)",
    "mask_build_s": "transformers' backends (hf-*): building the mask transformers builds for the case, median "
                    "seconds, timed apart from the kernel (a model builds it once per forward for all its layers, "
                    "the kernel runs once per layer)",
    "total_s": "sparse cases: what one forward of the method costs, median_s + indexer_s, plus the BlockMask's build "
               "where the keep-set changes every forward (topk), seconds; a draft tree on flex: median_s plus the "
               "BlockMask's build (a dynamic tree, as EAGLE-2's, is new every step)",
    "plain_bytes": "shared-prefix batches: plain attention's minimum traffic, Q and O plus every request's whole "
                   "context's K and V (the prefix read B times), bytes (bench.prefix.counts)",
    "cascade_bytes": "shared-prefix batches: cascade attention's minimum traffic, Q and O plus the prefix's K and V "
                     "once and every suffix's, bytes; `bytes` is the case's own method's of the two",
    "tflops": "achieved TFLOP/s, flops / median_s / 1e12",
    "real_tokens": "query tokens one call computes: B x Sq, or a serving batch's summed query lengths (padding "
                   "excluded)",
    "padding_waste": "serving batches: the (query, key) pairs the backend's layout computes, padding included, / "
                     "the real pairs (1.0 when it pads nothing; empty for a dense case)",
    "tokens_per_s": "real query tokens per second, real_tokens / median_s (1 / this is the time per real token)",
    "gb_per_s": "achieved bandwidth, GB/s (bytes / median_s / 1e9)",
    "peak_mem_bytes": "measured peak memory above the inputs, bytes",
    "model_mem_bytes": "analytic model of that peak, bytes (materialising: score matrix; tiled: O(S); none for a "
                       "layer)",
    "max_abs_err": "largest absolute error against the float64 reference",
    "pct_gemm_ceiling": "achieved FLOP/s as % of the run's measured GEMM FLOP/s in the case's dtype (else the "
                        "device's main dtype)",
    "pct_copy_ceiling": "achieved bandwidth as % of the run's measured copy bandwidth",
    "pct_read_ceiling": "achieved bandwidth as % of the run's measured read-only bandwidth (a sum over a large "
                        "buffer): the ceiling a read-mostly decode step is judged against",
    "pct_spec_flops": "achieved FLOP/s as % of the device's spec-sheet peak (GPU, bf16/fp16 only)",
    "pct_spec_bandwidth": "achieved bandwidth as % of the device's spec-sheet memory bandwidth (GPU)",
    "median_s": "median time of one call, seconds (empty unless ok)",
    "ci_low_s": "lower end of the 95% confidence interval of the median, seconds",
    "ci_high_s": "upper end of the 95% confidence interval of the median, seconds",
    "iqr_s": "interquartile range of the per-call times, seconds",
    "rounds": "number of timed rounds",
    "noisy": "true when the engine flagged the timing as noisy (CI target missed within the budget)",
    "predicted_s": "the cost model's prediction of the whole case's wall time (check, warm-up, timing, memory), "
                   "seconds, made before it ran (bench.plan.cost)",
    "wall_s": "the case's measured wall time, seconds, to set beside predicted_s (0 for a skipped case)",
    "first_call_s": "time of the first (untimed: compile, autotune) call, seconds",
    "setup_s": "seconds to build the case's inputs and its call, and to fill its cold copies once (the check and the "
               "first call aside): what a fresh worker pays again before it times the case",
    "timer": "which timer measured the case",
    "calls_per_round": "calls averaged in one timed round",
    "kv_cache_bytes": "one layer's K and V cache that a decode step reads, bytes (decode cases)",
    "kv_bytes_per_s": "KV-cache bytes read per second, kv_cache_bytes / median_s (decode cases)",
    "threads": "CPU threads torch used",
    "gpu_before": "CUDA: NVML clocks, power, temperature and clock-event reasons just before the case (else empty)",
    "gpu_after": "CUDA: the same just after the case, so throttling during it shows",
    "timings": "every timing mode side by side, {mode: {median_s, ci_low_s, ci_high_s, rounds, calls_per_round}}: "
               "warm and kernel (CPU and CUDA), cold (CUDA, and CPU cases with cold inputs), graph (CUDA)",
    "timing_mode": "the mode median_s comes from: cold where the case has cold inputs (its KV cache, paged pool, "
                   "shared prefix, latent cache or recurrent state rotated over copies past the cache) and on CUDA "
                   "(L2 flushed), else warm",
    "cold_copies": "copies of the cold inputs the cold mode rotated over (the original among them); empty where "
                   "nothing rotated",
    "cold_set_bytes": "bytes of one call's cold inputs (one copy)",
    "cache_bytes": "the cache the copies had to exceed cold_multiple times: the CPU's L2 + L3 as the OS reports them "
                   "(at least a floor), or the GPU's L2",
    "partly_warm": "true when the copies fell short of their target (capped by count or by free memory): the cold "
                   "time may be flattered by the cache; the reason says by how much",
    "control_flops": "CPU: the machine's speed beside the headline's rounds, FLOP/s of a fixed 96^3 fp32 product "
                     "timed between them (bench.measure.control); bench compare holds a change in time to it too",
    "control_read": "CPU cold: the memory's speed beside the headline's rounds, bytes/s of a 1 MiB read from the "
                    "case's own copies out of cache (bench.measure.control); bench compare holds a cold case's change "
                    "in time to it too",
    "overhead_pct": "share of a warm call spent outside the kernels (CPU: outside the aten ops), "
                    "100 x (warm - kernel) / warm",
    "launch_bound": "true when the warm time is at least 2x the kernel time (launch, dispatch or Python dominate)",
    "kernels": "the kernels (CUDA) or ops (CPU) that ran, biggest own time first, a handful at most: "
               "[{name, calls, seconds_per_call}] per call",
    "sdpa_kernel": "sdpa backends: the kernel torch ran (flash, efficient, cudnn, math, ...), from the profiler's op "
                   "names; empty when no SDPA op ran (other backends)",
    "throttled": "CUDA: some timed rounds ran while the GPU was throttled (power, thermal, hardware slowdown) even "
                 "after a cool-down; compare treats the case as noisy",
    "joules_per_call": "CUDA: energy of one call, joules, from NVML's total-energy counter over >= 0.1 s of "
                       "back-to-back calls",
    "tokens_per_joule": "CUDA: query tokens per joule, B x Sq / joules_per_call",
    "watts": "CUDA: mean board power over those calls, watts",
}
# Every field of a record, in order, with its meaning: the README's results schema and the report's columns.
FIELDS: dict[str, str] = CASE_DOCS | SHAPE_DOCS | RUN_OF_CASE_DOCS | MEASURED_DOCS
RECORD_FIELDS: tuple[str, ...] = tuple(FIELDS)
# Everything that makes two cases the same measurement except the backend.
SHAPE_KEYS: list[str] = [k for k in (*SHAPE_DOCS, "phase", "pass") if k not in ("window", "chunk")]
# Shape fields beyond the classic (B, Hq, Hkv, Sq, Skv, D, dtype, mask) ones (scope, model, and any added later):
# analyses that name their keys by hand add these, so cases that differ in them are never mixed.
LATER_SHAPE_KEYS: list[str] = list(LATER_FIELDS)


@dataclass(frozen=True)
class Record:
    """A case's record, built once per case from its measurement (bench.engine.runner) and amended only by
    dataclasses.replace (the session adds predicted_s and wall_s, a worker's fate sets status and reason).

    Its fields are RECORD_FIELDS, but for the shape: the case's AttentionShape, whose columns
    (bench.problem.columns.COLUMNS)
    the file holds flat, so a new shape column needs no edit here. to_dict() is what a results entry's extra_info
    holds (the shape's columns spliced in, `pass_` as "pass"), from_dict() reads it back.
    """

    case_id: str = ""
    status: str | None = None  # None until the case has run; bench.results.status lists every status
    reason: str = ""
    backend: str = ""
    shape: AttentionShape | None = None  # None only in a record made without a case (a test's)
    phase: str = ""
    pass_: str = ""
    device: str = ""
    ran_on: str | None = None
    flops: int | None = None
    bytes: int | None = None
    useful_flops: int | None = None
    executed_flops: int | None = None
    density: float | None = None
    indexer_flops: int | None = None
    indexer_s: float | None = None
    indexer_peak_mem_bytes: int | None = None
    block_mask_build_s: float | None = None
    mask_build_s: float | None = None
    total_s: float | None = None
    plain_bytes: int | None = None
    cascade_bytes: int | None = None
    tflops: float | None = None
    real_tokens: int | None = None
    padding_waste: float | None = None
    tokens_per_s: float | None = None
    gb_per_s: float | None = None
    peak_mem_bytes: int | None = None
    model_mem_bytes: int | None = None
    max_abs_err: float | None = None
    pct_gemm_ceiling: float | None = None
    pct_copy_ceiling: float | None = None
    pct_read_ceiling: float | None = None
    pct_spec_flops: float | None = None
    pct_spec_bandwidth: float | None = None
    median_s: float | None = None
    ci_low_s: float | None = None
    ci_high_s: float | None = None
    iqr_s: float | None = None
    rounds: int = 0
    noisy: bool | None = None
    predicted_s: float | None = None
    wall_s: float | None = None
    first_call_s: float | None = None
    setup_s: float | None = None
    timer: str | None = None
    calls_per_round: int | None = None
    kv_cache_bytes: int | None = None
    kv_bytes_per_s: float | None = None
    threads: int | None = None
    gpu_before: dict[str, Any] | None = None
    gpu_after: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    timing_mode: str | None = None
    cold_copies: int | None = None
    cold_set_bytes: int | None = None
    cache_bytes: int | None = None
    partly_warm: bool | None = None
    control_flops: float | None = None
    control_read: float | None = None
    overhead_pct: float | None = None
    launch_bound: bool | None = None
    kernels: list[dict[str, Any]] | None = None
    sdpa_kernel: str | None = None
    throttled: bool | None = None
    joules_per_call: float | None = None
    tokens_per_joule: float | None = None
    watts: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The results entry's extra_info: every field of RECORD_FIELDS, in its order."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {"pass": self.pass_}
        cols = shape_fields(self.shape) if self.shape is not None else {}
        return {name: cols.get(name) if name in SHAPE_DOCS else own[name] for name in RECORD_FIELDS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Record:
        """From extra_info (or a worker's answer); keys of other versions are dropped (bench.results.entry keeps
        them). A shape column a file predates holds its default, as every case of that file did; a file whose shape
        breaks a rule is refused, naming the case and the rule."""
        own = {name: d[name] for name in _OWN if name in d}
        shape = None
        if any(d.get(name) is not None for name in SHAPE_REQUIRED):
            try:
                shape = _shape_of(tuple((k, d[k]) for k in SHAPE_DOCS if d.get(k) is not None))
            except ShapeError as err:
                raise ShapeError(f"case {d.get('case_id')!r}: its shape cannot be read ({err})") from None
        return cls(**own, pass_=d.get("pass") or "", shape=shape)


_OWN = frozenset(f.name for f in dataclasses.fields(Record)) - {"shape", "pass_"}
@functools.lru_cache(maxsize=4096)
def _shape_of(columns: tuple[tuple[str, Any], ...]) -> AttentionShape:
    """A record's shape from its columns, parsed once per distinct shape: a file's backends share their shapes."""
    return shape_from_fields(dict(columns))


SHAPE_REQUIRED = tuple(name for name in SHAPE_DOCS if name != "variant" and name not in SHAPE_DEFAULTS)


def new_record(case: Case, memory: str, threads: int | None = None) -> Record:
    """The record of a case before it runs: identity, shape, and what the formulas say (FLOPs, bytes, memory).

    memory is the backend's trait ("materialising" or "tiled"). The formula fields
    come from the case's kind (bench.kinds: dense, layer, serving), which reads the backend's traits.
    threads: the CPU threads torch runs the case with where it runs; None: this process's torch's.
    """
    from bench.backends import get_backend  # here: the registry imports every backend's module
    from bench.kinds import kind_of

    if threads is None:
        import torch

        threads = torch.get_num_threads()
    backend = dataclasses.replace(get_backend(case.backend), memory=memory)
    return Record(case_id=case.id, backend=case.backend, shape=case.shape, phase=case.phase,
                  pass_=case.pass_, device=case.device, threads=threads,
                  **kind_of(case).record_fields(case, backend))


def derived(record: Record, median_s: float, calibration: Calibration, spec: float | None) -> dict[str, Any]:
    """Throughput metrics from the median time and this run's measured ceilings."""
    assert record.shape is not None and record.flops is not None and record.bytes is not None, "a case's record"
    flops_s = record.flops / median_s
    bytes_s = record.bytes / median_s
    tokens = record.real_tokens or record.shape.batch * record.shape.seq_q
    dtype = record.shape.dtype
    gemm = calibration.gemm(dtype)
    copy, read = calibration.copy_bytes_per_s, calibration.read_bytes_per_s
    return {
        "tflops": flops_s / 1e12,
        "tokens_per_s": tokens / median_s,
        "gb_per_s": bytes_s / 1e9,
        "pct_gemm_ceiling": 100 * flops_s / gemm,
        "pct_copy_ceiling": 100 * bytes_s / copy,
        "pct_read_ceiling": 100 * bytes_s / read if read else None,
        # the spec sheet's figure is for bf16/fp16 tensor cores: other dtypes have no honest percentage of it
        "pct_spec_flops": 100 * flops_s / spec if spec and dtype in ("bf16", "fp16") else None,
        "kv_bytes_per_s": record.kv_cache_bytes / median_s if record.kv_cache_bytes else None,
    }


def timed(record: Record, stats: Any, timing: Any, calibration: Calibration, spec: float | None) -> Record:
    """The record of a case that was timed: the statistics (bench.measure.stats.Summary) and what derives from them."""
    return dataclasses.replace(
        record, status="ok", reason="noisy: CI wider than +-3% after the time budget" if timing.noisy else "",
        timer=timing.timer, calls_per_round=timing.calls_per_round, noisy=timing.noisy,
        **derived(record, stats.median, calibration, spec), median_s=stats.median, ci_low_s=stats.ci_low,
        ci_high_s=stats.ci_high, iqr_s=stats.iqr, rounds=stats.rounds)


def with_modes(record: Record, case_timing: Any, spec_bytes_per_s: float | None = None) -> Record:
    """The fields only a bench.measure.modes.CaseTiming gives: every mode, kernels, energy, throttling."""
    assert record.shape is not None, "a case's record"
    kernel = case_timing.kernel
    energy = case_timing.energy
    joules = energy["joules"] / energy["calls"] if energy else None
    notes = "; ".join([record.reason, *case_timing.notes]).strip("; ")
    tokens = record.shape.batch * record.shape.seq_q
    rotation = case_timing.rotation
    cold = {"cold_copies": rotation.copies, "cold_set_bytes": rotation.set_bytes, "cache_bytes": rotation.cache_bytes,
            "partly_warm": bool(rotation.partly_warm),
            "setup_s": (record.setup_s or 0.0) + rotation.fill_s} if rotation else {}
    return dataclasses.replace(
        record, reason=notes, timings=case_timing.timings(), timing_mode=case_timing.headline_mode, **cold,
        control_flops=case_timing.control_flops, control_read=case_timing.control_read,
        overhead_pct=case_timing.overhead_pct(),
        launch_bound=case_timing.launch_bound(), kernels=kernel.top() if kernel else None,
        sdpa_kernel=kernel.sdpa_kernel if kernel else None, throttled=case_timing.throttled,
        joules_per_call=joules, tokens_per_joule=tokens / joules if joules else None,
        watts=energy["joules"] / energy["seconds"] if energy else None,
        pct_spec_bandwidth=100 * record.bytes / record.median_s / spec_bytes_per_s
        if spec_bytes_per_s and record.median_s and record.bytes else None)
