"""Measured peak memory on the CPU (bench.measure.memory) against the analytic model
(bench.counts.metrics.model_mem_bytes)."""

from __future__ import annotations

import functools

import pytest
import torch

from bench.backends import BACKENDS, attention
from bench.counts.metrics import model_mem_bytes
from bench.engine.runner import Runner
from bench.engine.sweeps import Case
from bench.measure.memory import peak_bytes, peak_cpu
from bench.problem.columns import shape_from_fields
from bench.problem.shapes import AttentionShape
from bench.reference import make_inputs
from bench.results.meta import Calibration

MiB = 1 << 20


def shape(seq: int, mask: str = "causal", n_kv_heads: int = 8) -> AttentionShape:
    return shape_from_fields(dict(batch=1, seq_q=seq, seq_kv=seq, n_heads=8, n_kv_heads=n_kv_heads, head_dim=64,
                                  dtype="fp32", mask=mask))


@functools.cache
def measured_peak(backend: str, seq: int, mask: str = "causal", n_kv_heads: int = 8) -> int:
    """Peak bytes of one forward call, after a warm-up call (flex compiles on its first call)."""
    s = shape(seq, mask, n_kv_heads)
    q, k, v = make_inputs(s, "cpu", seed=0)

    def forward():
        with torch.no_grad():
            return attention(q, k, v, backend=backend, causal=s.causal, window=s.mask.window)

    forward()
    return peak_cpu(forward)


def modelled(backend: str, seq: int, mask: str = "causal", n_kv_heads: int = 8) -> int:
    return model_mem_bytes(shape(seq, mask, n_kv_heads), BACKENDS[backend].memory, "fwd")


# --- the probe itself --------------------------------------------------------------------------------

def test_peak_cpu_of_a_known_allocation():
    peak = peak_cpu(lambda: torch.empty(64 * MiB, dtype=torch.uint8))
    assert 64 * MiB <= peak < 70 * MiB
    assert peak_bytes(lambda: torch.empty(64 * MiB, dtype=torch.uint8), "cpu") >= 64 * MiB


def test_peak_cpu_is_a_peak_not_a_sum():
    def two_in_turn():
        for _ in range(2):
            t = torch.empty(32 * MiB, dtype=torch.uint8)
            del t

    def two_together():
        a = torch.empty(32 * MiB, dtype=torch.uint8)
        b = torch.empty(32 * MiB, dtype=torch.uint8)
        return a, b

    assert 32 * MiB <= peak_cpu(two_in_turn) < 36 * MiB
    assert 64 * MiB <= peak_cpu(two_together) < 70 * MiB


def test_peak_cpu_ignores_what_was_allocated_before():
    held = torch.ones(64 * MiB, dtype=torch.uint8)  # alive during the call, allocated before it
    peak = peak_cpu(lambda: torch.empty(8 * MiB, dtype=torch.uint8))
    assert 8 * MiB <= peak < 12 * MiB
    assert peak_cpu(lambda: None) == 0
    del held


# --- naive attention: the Sq x Skv score matrix, measured --------------------------------------------

@pytest.mark.parametrize("mask", ["causal", "none"])
@pytest.mark.parametrize("seq", [1024, 2048])
def test_naive_peak_matches_the_score_matrix_model(seq, mask):
    peak, model = measured_peak("naive", seq, mask), modelled("naive", seq, mask)
    assert model >= 2 * 8 * seq * seq * 4  # scores and probabilities, fp32
    assert abs(peak - model) <= 0.10 * model, f"measured {peak / MiB:.1f} MiB, model {model / MiB:.1f} MiB"


def test_naive_gqa_peak_includes_expanded_kv():
    peak, model = measured_peak("naive", 1024, "causal", 2), modelled("naive", 1024, "causal", 2)
    assert model > modelled("naive", 1024, "causal", 8)
    assert abs(peak - model) <= 0.10 * model, f"measured {peak / MiB:.1f} MiB, model {model / MiB:.1f} MiB"


def test_naive_peak_is_quadratic_in_seq():
    ratio = measured_peak("naive", 2048) / measured_peak("naive", 1024)
    assert 3.5 <= ratio <= 4.5


def test_runner_records_measured_peak_near_the_model():
    case = Case("naive", shape(1024), "prefill", "fwd", "cpu")
    record = Runner(Calibration(1e11, 1e10), case_budget_s=0.05).run(case).record
    assert record.status == "ok", record.reason
    assert record.model_mem_bytes == modelled("naive", 1024)
    assert abs(record.peak_mem_bytes - record.model_mem_bytes) <= 0.10 * record.model_mem_bytes


# --- flash-style kernels: O(S) memory ----------------------------------------------------------------

def assert_linear(backend: str, mask: str, seqs: tuple[int, ...]) -> None:
    peaks = [measured_peak(backend, s, mask) for s in seqs]
    for i in range(len(seqs) - 1):
        assert seqs[i + 1] == 2 * seqs[i] and peaks[i] > 0
        ratio = peaks[i + 1] / peaks[i]
        assert 1.5 <= ratio <= 2.6, f"{backend} {mask}: peak({seqs[i + 1]}) / peak({seqs[i]}) = {ratio:.2f}"
    # and far below the score matrix naive attention would need
    assert peaks[-1] < 0.1 * 8 * seqs[-1] ** 2 * 4


@pytest.mark.parametrize("mask", ["causal", "none"])
def test_sdpa_flash_peak_grows_linearly(mask):
    assert_linear("sdpa-flash", mask, (1024, 2048, 4096))


@pytest.mark.slow
def test_flex_causal_peak_grows_linearly():
    assert_linear("flex", "causal", (1024, 2048, 4096))


@pytest.mark.slow
def test_flex_no_mask_peak_grows_linearly():
    assert_linear("flex", "none", (1024, 2048))
