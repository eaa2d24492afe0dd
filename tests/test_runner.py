"""FLOP/byte formulas, derived metrics and the status of every case (bench.engine.runner) on the CPU."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import torch

from bench.backends import BACKENDS, Backend
from bench.backends.naive import naive_attention
from bench.counts.metrics import attention_bytes, attention_flops, kv_cache_bytes
from bench.counts.metrics import model_mem_bytes as model_mem
from bench.engine import runner
from bench.engine.runner import EXACT_CHECK_ELEMENTS, Runner, check_shape
from bench.engine.sweeps import Case
from bench.problem.columns import shape_from_fields
from bench.problem.masks import CAUSAL, NO_MASK
from bench.problem.shapes import AttentionShape
from bench.results.meta import Calibration
from bench.results.record import RECORD_FIELDS, Record, derived, new_record
from bench.results.status import STATUSES

CALIBRATION = Calibration.from_dict({"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10})
MiB = 1 << 20


def make_runner() -> Runner:
    return Runner(calibration=CALIBRATION, case_budget_s=0.05)


def tiny(mask="causal", n_heads=4, n_kv_heads=2, seq_q=32, seq_kv=32, window=None, dtype="fp32") -> AttentionShape:
    return shape_from_fields(dict(batch=1, seq_q=seq_q, seq_kv=seq_kv, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                  head_dim=16, dtype=dtype, mask=mask, window=window))


def case(backend="naive", shape=None, pass_="fwd", phase="prefill") -> Case:
    return Case(backend, shape or tiny(), phase, pass_, "cpu")


def base_record(c: Case) -> dict:
    return new_record(c, BACKENDS[c.backend].memory)


def model_mem_bytes(c: Case) -> int | None:
    """The model as the runner applies it: the case's shape and its backend's memory trait."""
    return model_mem(c.shape, BACKENDS[c.backend].memory, c.pass_)


# --- FLOP and byte formulas --------------------------------------------------------------------------

def test_flops_causal_with_fewer_queries_than_keys():
    # 4 queries, 10 keys, bottom-right causal: query i sees keys 0..i+6, i.e. 7, 8, 9, 10 keys
    s = AttentionShape(2, 4, 10, 3, 3, 8, "fp32", CAUSAL)
    assert attention_flops(s) == 4 * 2 * 3 * 8 * (7 + 8 + 9 + 10)


def test_flops_window_larger_than_kv_equals_causal():
    w = shape_from_fields(dict(batch=1, seq_q=8, seq_kv=8, n_heads=2, n_kv_heads=1, head_dim=4, dtype="fp32",
                               mask="window", window=100))
    c = AttentionShape(1, 8, 8, 2, 1, 4, "fp32", CAUSAL)
    assert attention_flops(w) == attention_flops(c) == 4 * 2 * 4 * 36  # 1 + 2 + ... + 8
    # fewer queries than keys, window past the start: rows see 7 and 8 keys
    assert attention_flops(shape_from_fields(dict(batch=1, seq_q=2, seq_kv=8, n_heads=1, n_kv_heads=1, head_dim=1,
                                                  dtype="fp32", mask="window", window=50))) == 4 * 15


def test_flops_decode_with_window_and_causal():
    # one query against a 9-token cache: causal sees all 9, a window of 3 sees 3
    assert attention_flops(shape_from_fields(dict(batch=1, seq_q=1, seq_kv=9, n_heads=8, n_kv_heads=2, head_dim=64,
                                                  dtype="fp32", mask="window", window=3))) == 4 * 8 * 64 * 3
    assert attention_flops(AttentionShape(1, 1, 9, 8, 2, 64, "fp32", CAUSAL)) == 4 * 8 * 64 * 9
    # speculative decode: 4 queries, window 3 -> 3 keys each
    assert attention_flops(shape_from_fields(dict(batch=1, seq_q=4, seq_kv=9, n_heads=8, n_kv_heads=2, head_dim=64,
                                                  dtype="fp32", mask="window", window=3))) == 4 * 8 * 64 * 12


@pytest.mark.parametrize("shape", [
    AttentionShape(1, 128, 128, 8, 8, 64, "fp32", NO_MASK),
    AttentionShape(2, 5, 17, 4, 1, 32, "bf16", CAUSAL),
    shape_from_fields(dict(batch=1, seq_q=1, seq_kv=4096, n_heads=32, n_kv_heads=8, head_dim=128, dtype="bf16",
                           mask="window", window=256)),
    shape_from_fields(dict(batch=3, seq_q=7, seq_kv=7, n_heads=6, n_kv_heads=2, head_dim=24, dtype="fp16",
                           mask="window", window=3)),
])
def test_fwd_bwd_is_3_5_times_fwd(shape):
    fwd = attention_flops(shape, "fwd")
    both = attention_flops(shape, "fwd+bwd")
    assert isinstance(both, int)
    assert both * 2 == fwd * 7


def test_flops_unknown_pass_is_refused():
    with pytest.raises(ValueError, match="unknown pass"):
        attention_flops(tiny(), "bwd")


def test_attention_bytes_gqa_counts_kv_at_kv_heads():
    s = AttentionShape(2, 128, 128, 8, 2, 64, "fp32", CAUSAL)
    q_and_o = 2 * 2 * 8 * 128 * 64
    k_and_v = 2 * 2 * 2 * 128 * 64
    assert attention_bytes(s) == (q_and_o + k_and_v) * 4
    mha = AttentionShape(2, 128, 128, 8, 8, 64, "fp32", CAUSAL)
    # GQA-2 reads a quarter of MHA's K and V; Q and O are the same
    assert attention_bytes(mha) - attention_bytes(s) == 2 * 2 * 6 * 128 * 64 * 4


def test_attention_bytes_decode_is_dominated_by_kv():
    s = AttentionShape(1, 1, 8192, 32, 8, 128, "bf16", CAUSAL)
    kv = 2 * 8 * 8192 * 128 * 2
    assert attention_bytes(s) == kv + 2 * 32 * 128 * 2
    assert kv / attention_bytes(s) > 0.99


# --- derived metrics ---------------------------------------------------------------------------------

def test_derived_arithmetic():
    shape = AttentionShape(2, 16, 16, 1, 1, 8, "bf16")
    record = Record(shape=shape, flops=int(2e9), bytes=int(1e8), kv_cache_bytes=int(5e7))
    d = derived(record, 0.01, CALIBRATION, spec=1e12)
    assert d["tflops"] == pytest.approx(0.2)  # 2e11 FLOP/s
    assert d["tokens_per_s"] == pytest.approx(3200)
    assert d["gb_per_s"] == pytest.approx(10)
    assert d["pct_gemm_ceiling"] == pytest.approx(200)  # 2e11 / 1e11
    assert d["pct_copy_ceiling"] == pytest.approx(100)  # 1e10 / 1e10
    assert d["pct_spec_flops"] == pytest.approx(20)
    assert d["kv_bytes_per_s"] == pytest.approx(5e9)
    # the spec sheet's peak is a bf16/fp16 tensor-core figure: no percentage of it for fp32
    fp32 = dataclasses.replace(record, shape=dataclasses.replace(shape, dtype="fp32"))
    assert derived(fp32, 0.01, CALIBRATION, spec=1e12)["pct_spec_flops"] is None


def test_derived_without_spec_or_kv_cache():
    record = Record(shape=AttentionShape(1, 1, 1, 1, 1, 8), flops=10**6, bytes=10**6)
    d = derived(record, 1e-3, CALIBRATION, spec=None)
    assert d["pct_spec_flops"] is None
    assert d["kv_bytes_per_s"] is None
    assert d["tokens_per_s"] == pytest.approx(1000)


def test_base_record_kv_cache_of_a_decode_step():
    s = AttentionShape(2, 1, 4096, 32, 8, 128, "bf16", CAUSAL)
    r = base_record(case("sdpa", s, phase="decode"))
    assert r.kv_cache_bytes == 2 * 8 * 128 * 4096 * 2 * 2  # K and V, one layer, batch 2, 2 bytes
    assert base_record(case("sdpa", tiny())).kv_cache_bytes is None  # prefill has no cache to read


def test_base_record_kv_cache_with_sliding_window():
    s = shape_from_fields(dict(batch=1, seq_q=1, seq_kv=4096, n_heads=32, n_kv_heads=8, head_dim=128, dtype="bf16",
                               mask="window", window=256))
    r = base_record(case("sdpa", s, phase="decode"))
    assert r.kv_cache_bytes == kv_cache_bytes(1, 8, 128, 4096, 1, "bf16", window=256)


# --- check_shape and the memory model -----------------------------------------------------------------

def test_check_shape_small_is_unchanged():
    s = AttentionShape(1, 1024, 1024, 8, 2, 64, "fp32", CAUSAL)
    assert check_shape(s) is s


def test_check_shape_shortens_large_prefill_keeping_structure():
    s = shape_from_fields(dict(batch=4, seq_q=4096, seq_kv=4096, n_heads=8, n_kv_heads=2, head_dim=64, dtype="bf16",
                               mask="window", window=8192))
    c = check_shape(s)
    assert c.batch * c.n_heads * c.seq_q * c.seq_kv <= EXACT_CHECK_ELEMENTS
    assert (c.seq_q, c.seq_kv) == (256, 256)
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.dtype, c.mask.kind) == (8, 2, 64, "bf16", "window")
    assert c.mask.window == 256  # longer than the case's context: stays as long as the shorter one (causal either way)


def test_check_shape_keeps_a_real_window_cutting():
    from bench.problem.masks import visible

    s = shape_from_fields(dict(batch=4, seq_q=4096, seq_kv=4096, n_heads=8, n_kv_heads=2, head_dim=64, dtype="bf16",
                               mask="window", window=256))
    c = check_shape(s)
    assert c.batch == 2 and c.mask.window == 128
    assert not torch.equal(visible(c.seq_q, c.seq_kv, True, c.mask.window), visible(c.seq_q, c.seq_kv, True, None))


def test_check_shape_shortens_decode_keeping_one_query():
    s = AttentionShape(16, 1, 131072, 32, 8, 128, "bf16", CAUSAL)
    c = check_shape(s)
    assert (c.batch, c.seq_q, c.seq_kv) == (2, 1, 4096)
    assert c.causal and c.variant == "gqa"


def test_model_mem_bytes():
    s = AttentionShape(1, 1024, 1024, 8, 8, 64, "fp32", CAUSAL)
    # scores and probabilities (2 x 32 MiB) plus the bool mask and its negation (2 x 1 MiB)
    assert model_mem_bytes(case("naive", s)) == 66 * MiB
    assert model_mem_bytes(case("naive", AttentionShape(1, 1024, 1024, 8, 8, 64, "fp32"))) == 64 * MiB
    gqa = AttentionShape(1, 1024, 1024, 8, 2, 64, "fp32", CAUSAL)
    assert model_mem_bytes(case("sdpa-math", gqa)) == 66 * MiB + 2 * 8 * 1024 * 64 * 4  # expanded K and V
    # flash-style: output (2 MiB) and a float32 log-sum-exp per row
    assert model_mem_bytes(case("sdpa-flash", s)) == 2 * MiB + 8 * 1024 * 4
    assert model_mem_bytes(case("naive", s, pass_="fwd+bwd")) is None


# --- statuses ----------------------------------------------------------------------------------------

def counting_backend(monkeypatch, name, fn):
    calls = []

    def wrapped(q, k, v, *, mask, score):
        calls.append(q.shape)
        return fn(q, k, v, mask=mask, score=score)

    monkeypatch.setitem(BACKENDS, name, Backend(name, wrapped, "test backend", "materialising", "#000000", "o"))
    return calls


def assert_untimed(outcome):
    r = outcome.record
    assert outcome.samples == []
    assert r.median_s is None and r.tflops is None and r.rounds == 0 and r.peak_mem_bytes is None
    assert r.status in STATUSES


def test_ok_record_is_complete():
    shape = tiny()
    out = make_runner().run(case("naive", shape))
    r = out.record
    assert r.status == "ok", r.reason
    assert set(r.to_dict()) == set(RECORD_FIELDS)  # every documented field, and nothing undocumented
    assert out.samples and r.rounds == len(out.samples)
    assert r.ci_low_s <= r.median_s <= r.ci_high_s
    assert r.median_s == statistics.median(out.samples)
    assert 0 <= r.max_abs_err < 1e-5
    assert r.iqr_s >= 0 and r.first_call_s > 0 and r.peak_mem_bytes > 0
    assert r.timer == "perf_counter" and r.calls_per_round >= 1
    assert r.flops == attention_flops(shape) and r.bytes == attention_bytes(shape)
    assert r.case_id == case("naive", shape).id and r.shape.variant == "gqa" and r.shape.mask.label == "causal"
    assert r.kv_cache_bytes is None  # prefill
    # the derived metrics are the median's
    assert r.tflops == pytest.approx(r.flops / r.median_s / 1e12)
    assert r.pct_gemm_ceiling == pytest.approx(100 * r.flops / r.median_s / 1e11)
    assert r.gb_per_s == pytest.approx(r.bytes / r.median_s / 1e9)
    assert r.pct_spec_flops is None  # no GPU name


def test_ok_decode_records_kv_cache_and_its_bandwidth():
    shape = tiny(seq_q=1, seq_kv=64)
    r = make_runner().run(case("sdpa-flash", shape, phase="decode")).record
    assert r.status == "ok", r.reason
    assert r.kv_cache_bytes == kv_cache_bytes(1, 2, 16, 64, 1, "fp32")
    assert r.kv_bytes_per_s == pytest.approx(r.kv_cache_bytes / r.median_s)


def test_ok_fwd_bwd():
    shape = tiny()
    r = make_runner().run(case("sdpa-math", shape, pass_="fwd+bwd")).record
    assert r.status == "ok", r.reason
    assert r.flops * 2 == attention_flops(shape) * 7
    assert r.model_mem_bytes is None


def test_unsupported_on_cpu_says_cuda():
    out = make_runner().run(case("sdpa-efficient"))
    assert out.record.status == "unsupported"
    assert "CUDA" in out.record.reason
    assert_untimed(out)


def test_incorrect_backend_is_not_timed(monkeypatch):
    calls = counting_backend(monkeypatch, "wrong", lambda q, k, v, **kw: naive_attention(q, k, v, **kw) * 1.01)
    out = make_runner().run(case("wrong"))
    r = out.record
    assert r.status == "incorrect"
    assert r.max_abs_err > 2e-4
    assert "exceeds tolerance" in r.reason
    assert_untimed(out)
    assert len(calls) == 1  # the correctness check only


def test_wrong_output_shape_is_incorrect(monkeypatch):
    counting_backend(monkeypatch, "short", lambda q, k, v, **kw: naive_attention(q, k, v, **kw)[:, :, :-1])
    out = make_runner().run(case("short"))
    assert out.record.status == "incorrect"
    assert out.record.max_abs_err == float("inf")
    assert_untimed(out)


def test_error_records_the_first_line_of_the_message(monkeypatch):
    def broken(q, k, v, **kw):
        raise RuntimeError("kernel exploded\nlong traceback text")

    counting_backend(monkeypatch, "broken", broken)
    out = make_runner().run(case("broken"))
    assert out.record.status == "error"
    assert out.record.reason == "RuntimeError: kernel exploded"
    assert_untimed(out)


@pytest.mark.parametrize("err", [
    torch.OutOfMemoryError("tried to allocate 2.00 GiB"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                 "you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)"),
], ids=["OutOfMemoryError", "DefaultCPUAllocator"])
def test_oom_is_recorded_as_oom(monkeypatch, err):
    def hungry(q, k, v, **kw):
        raise err

    counting_backend(monkeypatch, "hungry", hungry)
    out = make_runner().run(case("hungry"))
    assert out.record.status == "oom"
    assert type(err).__name__ in out.record.reason
    assert_untimed(out)


def test_oom_after_the_check_is_oom_and_untimed(monkeypatch):
    """Correct on the check, then out of memory on the timed inputs: oom, and no samples half-kept."""
    state = {"n": 0}

    def flaky(q, k, v, **kw):
        state["n"] += 1
        if state["n"] > 1:
            raise torch.OutOfMemoryError("out of memory on call 2")
        return naive_attention(q, k, v, **kw)

    counting_backend(monkeypatch, "flaky", flaky)
    out = make_runner().run(case("flaky"))
    assert out.record.status == "oom"
    assert out.record.max_abs_err < 1e-5  # the check passed
    assert_untimed(out)


def test_predicted_oom_is_not_run(monkeypatch):
    calls = counting_backend(monkeypatch, "guarded", naive_attention)
    monkeypatch.setattr(runner, "available_cpu_bytes", lambda: 1000)
    out = make_runner().run(case("guarded"))
    assert out.record.status == "oom"
    assert out.record.reason.startswith("predicted")
    assert out.record.model_mem_bytes > 700
    assert calls == []
    assert_untimed(out)


def test_no_predicted_oom_with_plenty_of_memory(monkeypatch):
    monkeypatch.setattr(runner, "available_cpu_bytes", lambda: 1 << 40)
    assert make_runner().run(case("naive")).record.status == "ok"


def test_predicted_oom_covers_fwd_bwd(monkeypatch):
    calls = counting_backend(monkeypatch, "guarded", naive_attention)
    monkeypatch.setattr(runner, "available_cpu_bytes", lambda: 1000)
    out = make_runner().run(case("guarded", pass_="fwd+bwd"))
    assert out.record.status == "oom"
    assert calls == []


def test_nvml_readings_survive_unsupported_fields(monkeypatch):
    """A GPU that cannot report power (MIG, virtual GPUs) still reports its clocks; no NVML: None, no crash."""
    import sys
    import types

    from bench.measure import environment, nvml

    class NotSupported(Exception):
        pass

    def unsupported(*_):
        raise NotSupported("Not Supported")

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetHandleByUUID=lambda u: 0 if u == "GPU-abc" else None,
        NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetName=lambda h: b"NVIDIA H200", nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=1),
        nvmlDeviceGetClockInfo=lambda h, c: 1980 if c == 0 else 3201, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetEnforcedPowerLimit=unsupported, nvmlDeviceGetPowerUsage=unsupported,
        nvmlDeviceGetTemperature=lambda h, s: 41, nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0,
        nvmlSystemGetDriverVersion=lambda: "580.1",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvml, "torch_props", lambda index: types.SimpleNamespace(uuid="abc"))
    state = environment.nvml_state()
    assert state["available"] and state["driver"] == "580.1"
    gpu = state["gpus"][0]
    assert gpu["name"] == "NVIDIA H200" and gpu["sm_clock_mhz"] == 1980 and gpu["power_w"] is None
    reading = environment.gpu_reading(0)
    assert reading["mem_clock_mhz"] == 3201 and reading["clock_event_reasons"] == 0 and "name" not in reading
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no NVML library
    assert environment.nvml_state()["available"] is False and environment.gpu_reading(0) is None


def test_a_record_is_frozen_typed_and_serialises_to_exactly_the_documented_fields():
    import dataclasses

    from bench.results.record import _OWN, RECORD_FIELDS, SHAPE_DOCS, Record

    assert _OWN | {"pass"} | set(SHAPE_DOCS) == set(RECORD_FIELDS)  # every documented field, and no other
    rec = base_record(case(pass_="fwd+bwd"))
    assert isinstance(rec, Record) and list(rec.to_dict()) == list(RECORD_FIELDS)
    assert rec.to_dict()["pass"] == rec.pass_ == "fwd+bwd" and rec.to_dict()["seq_q"] == rec.shape.seq_q
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.status = "ok"  # type: ignore[misc]
    assert Record.from_dict(rec.to_dict()) == rec  # what a worker sends and a file holds reads back the same
    amended = dataclasses.replace(rec, status="skipped", reason="over budget")
    assert (amended.status, rec.status) == ("skipped", None)


def test_a_long_case_id_gets_a_trace_file_name_within_the_file_system_s_limit(tmp_path):
    from types import SimpleNamespace

    from bench.engine.runner import Runner

    runner = Runner.__new__(Runner)
    runner.trace_dir = tmp_path
    long_a, long_b = SimpleNamespace(id="step/" * 90 + "a"), SimpleNamespace(id="step/" * 90 + "b")
    a, b = runner.trace_path(long_a), runner.trace_path(long_b)
    assert len(a.name.encode()) <= 255 and a != b  # cut, and still one file per case
    a.write_text("{}")
    assert runner.trace_path(SimpleNamespace(id="naive/mha")).name == "naive_mha.trace.json"
