"""The cost model: how long a case will take, check and warm-up included, before it runs.

From the run's calibration (GEMM FLOP/s per dtype, copy bandwidth) and the case's record fields (FLOPs, bytes,
dtype, the backend's memory kind), one call is predicted as the slower of its FLOPs at a share of the GEMM ceiling
and its bytes at the copy ceiling (a materialising backend also writes and reads its Sq x Skv scores), plus a fixed
per-call overhead. A case then costs: the float64 reference and the backend's call on the check shape, the first
call (FlexAttention compiles: tens of seconds on a CPU), the timing modes (the adaptive rounds until the CI target
or the case's budget, the kernel mode's profiled calls), and one call for the peak memory. A dtype the CPU emulates
is already in its GEMM ceiling, so its cases are predicted slow. A call is predicted at its executed FLOPs (a dense
masked kernel computes every pair), and a case whose kind times an indexer apart adds it. A case with cold inputs
(bench.kinds.base.cold_inputs) adds their copies (bench.measure.cold: a copy of its KV cache bytes per copy, at the
copy ceiling) and the warm mode timed beside its cold headline. The predictions
order and budget a run (--time-budget) and feed the ETA; each record keeps `predicted_s` beside its measured
`wall_s`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.counts.metrics import ELEMENT_BYTES
from bench.kinds import reference_flops
from bench.kinds.base import cold_inputs
from bench.measure.caches import planned_cache_bytes
from bench.measure.cold import ColdPlan, copies_for
from bench.problem.case import Case
from bench.results.meta import Calibration

if TYPE_CHECKING:
    from bench.results.record import Record

GEMM_SHARE = 0.5  # attention's matmuls reach about half the GEMM ceiling on CPU (softmax and masking between them)
CALL_OVERHEAD_S = {"cpu": 30e-6, "cuda": 15e-6}  # Python, dispatch and launch per call
SCORE_PASSES = 4  # a materialising backend writes the scores, reads them for softmax, writes P, reads P
FLOAT64_SHARE = 0.25  # the reference runs in float64 through the naive formula: about a quarter of fp32's GEMM
# torch.compile of one FlexAttention shape (and once more for a backward): 6-7 s a shape on a 2-core AMD EPYC with
# torch 2.13 (the run's first 17 s: inductor's own start), 22 s measured on an older torch
COMPILE_S = {"cpu": 10.0, "cuda": 10.0}
INDEXER_SHARE = 0.05  # a top-K indexer's FLOPs run far below the GEMM ceiling: ReLU, weights and top-K over H x S^2
MIN_ROUND_S = 2e-3  # bench.measure.timer: a round lasts at least this long
TYPICAL_ROUNDS = 15  # rounds the adaptive timer usually takes before its CI target
KERNEL_MODE_S = 0.12  # the kernel mode's profiled calls (about 20 ms) and the profiler's start and stop
KERNEL_MIN_CALLS = 1  # bench.measure.kernels.MIN_CALLS: a slow case's profile is one call
PER_CASE_S = 0.05  # inputs, the record, the journal line
WARM_BESIDE = 0.25  # bench.measure.modes.WARM_BESIDE_BUDGET: a cold case's warm mode, on that share of its budget
WARM_LEAST_ROUNDS = 3  # bench.measure.timer.LONG_CALL_MIN_ROUNDS: and as few rounds as that


def call_s(record: Record, calibration: Calibration, memory: str) -> float:
    """Predicted seconds of one timed call."""
    s = record.shape
    assert s is not None, "a case's record"
    gemm = calibration.gemm(s.dtype) or 1e10
    copy = calibration.copy_bytes_per_s or 1e10
    traffic = float(record.bytes or 0)
    if memory == "materialising":  # the fp32 score matrix goes through memory several times
        scores = s.batch * s.n_heads * s.seq_q * s.seq_kv * 4
        traffic += SCORE_PASSES * scores * (3.5 if record.pass_ == "fwd+bwd" else 1)
        if s.n_kv_heads < s.n_heads:  # K and V expanded to Hq heads (repeat_interleave): written, then read back
            kv = 2 * s.batch * s.n_kv_heads * s.seq_kv * s.head_dim * ELEMENT_BYTES.get(s.dtype, 4)
            traffic += 2 * kv * s.n_heads / s.n_kv_heads
    executed = record.executed_flops or record.flops or 0  # a dense masked kernel computes every pair
    indexer = float(record.indexer_flops or 0)
    compute = (float(executed) - indexer) / (GEMM_SHARE * gemm)
    return max(compute, traffic / copy) + CALL_OVERHEAD_S.get(record.device, 30e-6)


def indexer_s(record: Record, calibration: Calibration) -> float:
    """Predicted seconds of one call of a topk case's indexer (0 for any other case)."""
    flops = float(record.indexer_flops or 0)
    return flops / (INDEXER_SHARE * (calibration.gemm(record.shape.dtype) or 1e10)) if flops and record.shape else 0.0


def predict_all(cases: list[Case], calibration: Calibration, case_budget_s: float,
                cold: ColdPlan | None = None) -> dict[str, float]:
    """Every case's predicted seconds, by id, from the backends' traits and the ceilings."""
    from bench.backends import get_backend
    from bench.results.record import new_record

    out = {}
    for case in cases:  # a prediction's record: its formula fields only (threads=0: no thread count is read)
        b = get_backend(case.backend)
        out[case.id] = predict(case, new_record(case, b.memory, threads=0), calibration, b.memory, case_budget_s,
                               bool(b.unsupported_reason(case.device, case.shape.dtype)), b.compiles, cold)
    return out


def rotation_s(case: Case, record: Record, calibration: Calibration, one: float, case_budget_s: float,
               cold: ColdPlan | None) -> float:
    """What timing a case cold adds: copying its cold inputs (about its KV cache's bytes, or its minimum traffic)
    until they exceed the plan's multiple of the cache, and the warm mode timed beside on up to a quarter of the
    budget."""
    cold = cold or ColdPlan()
    if not cold_inputs(case) or cold.multiple <= 0:
        return 0.0
    set_bytes = int(record.kv_cache_bytes or record.bytes or 0)
    copies, _ = copies_for(set_bytes, planned_cache_bytes(case.device), cold, None)
    copying = (copies - 1) * set_bytes / (calibration.copy_bytes_per_s or 1e10)
    warm = max(WARM_LEAST_ROUNDS * one, min(WARM_BESIDE * case_budget_s, TYPICAL_ROUNDS * max(one, MIN_ROUND_S)))
    return copying + warm


def predict(case: Case, record: Record, calibration: Calibration, memory: str, case_budget_s: float,
            unsupported: bool = False, compiles: bool = False, cold: ColdPlan | None = None) -> float:
    """Predicted seconds of the whole case: check, first call, timing modes, memory."""
    if unsupported:  # refused by the backend's traits before any tensor is made
        return PER_CASE_S
    one = call_s(record, calibration, memory)
    fp32 = calibration.gemm_flops_per_s or 1e10
    check_flops = reference_flops(case)  # the float64 reference on the case's check shape
    share = min(1.0, check_flops / max(float(record.flops or 1), 1.0))
    check = check_flops / (FLOAT64_SHARE * fp32) + one * share
    if case.pass_ == "fwd+bwd":
        check *= 2  # the gradients are checked against the reference's too
    first = one
    if compiles:  # the backend's trait: its first call on a shape compiles
        first += COMPILE_S.get(case.device, 25.0) * (2 if case.pass_ == "fwd+bwd" else 1)
    rounds = max(3 * one, min(case_budget_s, TYPICAL_ROUNDS * max(one, MIN_ROUND_S)))
    if case.device == "cuda":
        rounds *= 2  # cold and graph modes beside warm, on half the budget each
    kernel = max(KERNEL_MIN_CALLS * one, KERNEL_MODE_S)
    index = indexer_s(record, calibration)
    apart = index and 4 * index + max(3 * index, min(case_budget_s / 2, TYPICAL_ROUNDS * max(index, MIN_ROUND_S)))
    cold_s = rotation_s(case, record, calibration, one, case_budget_s, cold) if case.device == "cpu" else 0.0
    return PER_CASE_S + check + first + one + rounds + kernel + one + apart + cold_s
