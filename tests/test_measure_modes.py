"""Timing modes, kernel identity, NVML (by UUID, throttling, energy) against a fake, spec sheets, the profile command
and the GPU check's dry run."""

from __future__ import annotations

import json
import re
import types

import pytest
import torch

from bench.backends import get_backend
from bench.cli import main
from bench.errors import UsageError
from bench.measure import kernels, modes, nvml, timer
from bench.measure.spec_sheets import spec_sheet
from bench.problem.columns import shape_from_fields
from bench.problem.masks import CAUSAL
from bench.problem.scores import NO_SCORE
from bench.problem.shapes import AttentionShape
from bench.reference import make_inputs
from bench.results.meta import Calibration

SHAPE = shape_from_fields(dict(batch=1, seq_q=64, seq_kv=64, n_heads=2, n_kv_heads=2, head_dim=16, dtype="fp32",
                               mask="causal"))


def call_of(backend: str, shape: AttentionShape = SHAPE):
    q, k, v = make_inputs(shape, "cpu")
    fn = get_backend(backend).fn
    return lambda: fn(q, k, v, mask=shape.mask, score=shape.score)


@pytest.mark.parametrize("backend, op, choice", [
    ("sdpa-flash", "aten::_scaled_dot_product_flash_attention_for_cpu", "flash"),
    ("sdpa-math", "aten::_scaled_dot_product_attention_math", "math"),
    ("naive", "aten::bmm", None),
])
def test_kernel_profile_names_the_ops_and_sdpa_choice_on_cpu(backend, op, choice):
    fn = call_of(backend)
    fn()
    profile = kernels.profile_calls(fn, "cpu", calls=3)
    assert len(profile.samples) == 3 and all(s > 0 for s in profile.samples)
    assert op in [r.name for r in profile.rows]
    assert profile.sdpa_kernel == choice
    # kernel time is the ops' own time: never more than the host's time of the same call
    assert all(k <= w for k, w in zip(profile.samples, profile.wall_s, strict=True))
    own = [r.seconds_per_call for r in profile.rows]
    assert own == sorted(own, reverse=True)


def test_sdpa_choice_reads_forward_ops_only():
    assert kernels.sdpa_choice({"aten::_scaled_dot_product_efficient_attention",
                                "aten::_scaled_dot_product_efficient_attention_backward"}) == "efficient"
    assert kernels.sdpa_choice({"aten::_scaled_dot_product_cudnn_attention"}) == "cudnn"
    assert kernels.sdpa_choice({"aten::bmm"}) is None


def _event(name, start, end, self_us=None, device=False):
    dev = torch.autograd.DeviceType.CUDA if device else torch.autograd.DeviceType.CPU
    return types.SimpleNamespace(name=name, time_range=types.SimpleNamespace(start=start, end=end), device_type=dev,
                                 self_cpu_time_total=self_us if self_us is not None else end - start,
                                 cpu_time_total=end - start, is_user_annotation=False, is_async=False)


def test_cuda_kernel_time_is_the_device_events_of_each_call_window():
    events = [_event(kernels.MARKER, 0, 50), _event(kernels.MARKER, 100, 150),
              _event("aten::_scaled_dot_product_flash_attention", 1, 40),  # host op: names the choice only
              _event("flash_fwd_kernel", 60, 70, device=True), _event("flash_fwd_kernel", 160, 172, device=True),
              _event("memset", 72, 73, device=True)]
    profile = kernels.summarize_events(events, "cuda")
    assert profile.samples == pytest.approx([11e-6, 12e-6])
    assert profile.rows[0].name == "flash_fwd_kernel" and profile.rows[0].calls == 1
    assert profile.sdpa_kernel == "flash"


class FakeNvml:
    """Two GPUs; torch sees only the second (CUDA_VISIBLE_DEVICES=1), by UUID. It reports power-cap throttling
    for the first `throttled_reads` reads, then none; its energy counter grows 1 J per read."""

    def __init__(self, throttled_reads: int = 0) -> None:
        self.uuids = {"GPU-aaaa": 0, "GPU-bbbb": 1}
        self.left = throttled_reads
        self.energy = 0

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.uuids:
            raise KeyError(uuid)
        return self.uuids[uuid]

    def nvmlDeviceGetHandleByIndex(self, index):
        raise AssertionError("a GPU must never be looked up by index")

    def nvmlDeviceGetName(self, handle):
        return [b"GPU zero", b"GPU one"][handle]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        self.left -= 1
        return nvml.THROTTLE_REASONS["sw_power_cap"] if self.left >= 0 else 0x1  # then idle only: not throttling

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.energy += 1000
        return self.energy


def test_nvml_finds_the_gpu_by_uuid_under_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    fake = FakeNvml()
    gpu = nvml.Gpu.open(0, nv=fake, props=types.SimpleNamespace(uuid="bbbb"))  # torch's device 0
    assert gpu is not None and gpu.name() == "GPU one"
    assert nvml.Gpu.open(0, nv=fake, props=types.SimpleNamespace(uuid="cccc")) is None  # no match: no wrong GPU


def test_pci_bus_id_fallback():
    props = types.SimpleNamespace(uuid=None, pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    assert nvml.pci_bus_id(props) == "00000000:1B:00.0"
    fake = types.SimpleNamespace(nvmlDeviceGetHandleByPciBusId_v2=lambda bus: f"handle {bus}")
    assert nvml.find_handle(fake, props) == "handle 00000000:1B:00.0"


def _fake_round(calls: int) -> float:
    return calls * 1e-3


def test_throttled_round_is_dropped_and_retried_after_a_cool_down():
    gpu = nvml.Gpu.open(0, nv=FakeNvml(throttled_reads=1), props=types.SimpleNamespace(uuid="bbbb"))
    pauses = []
    guard = timer.ThrottleGuard(gpu.throttled, cool_down_s=5.0, sleep=pauses.append)
    t = timer._adaptive(_fake_round, 1e-3, case_budget_s=1.0, target=0.03, timer="fake", guard=guard)
    assert pauses == [5.0] and t.dropped_rounds == 1 and t.throttled is False
    assert len(t.samples) == timer.MIN_ROUNDS


def test_still_throttled_after_the_cool_down_marks_the_case():
    gpu = nvml.Gpu.open(0, nv=FakeNvml(throttled_reads=10**6), props=types.SimpleNamespace(uuid="bbbb"))
    guard = timer.ThrottleGuard(gpu.throttled, sleep=lambda s: None)
    t = timer._adaptive(_fake_round, 1e-3, case_budget_s=1.0, target=0.03, timer="fake", guard=guard)
    assert t.throttled is True and t.dropped_rounds == 1 and len(t.samples) >= timer.MIN_ROUNDS


def test_energy_over_a_window_of_back_to_back_calls(monkeypatch):
    monkeypatch.setattr(modes, "ENERGY_WINDOW_S", 0.0)  # one chunk
    gpu = nvml.Gpu.open(0, nv=FakeNvml(), props=types.SimpleNamespace(uuid="bbbb"))
    calls = []
    energy = modes.measure_energy(lambda: calls.append(1), gpu, chunk=80, sync=lambda: None)
    assert len(calls) == 80 and energy["calls"] == 80
    assert energy["joules"] == pytest.approx(1.0) and energy["seconds"] >= 0  # the fake adds 1 J per reading
    assert modes.measure_energy(lambda: None, None, chunk=1, sync=lambda: None) is None
    timing = timer.Timing([1e-3] * 8, 10, False, "fake")
    ct = modes.CaseTiming(0.0, "cuda", {"cold": timing, "warm": timing}, energy=dict(energy, seconds=0.5))
    from bench.results.record import Record, with_modes

    rec = with_modes(Record(backend="naive", shape=AttentionShape(2, 4, 4, 1, 1, 8), bytes=8, median_s=1e-3), ct)
    assert rec.joules_per_call == pytest.approx(1 / 80)
    assert rec.tokens_per_joule == pytest.approx(8 * 80)
    assert rec.watts == pytest.approx(2.0) and rec.throttled is False


def test_case_timing_cpu_modes_overhead_and_launch_bound():
    ct = modes.time_case(call_of("sdpa-flash"), "cpu", case_budget_s=0.05)
    assert set(ct.timings()) == {"warm", "kernel"} and ct.headline.mode == "warm"
    assert ct.throttled is None and ct.energy is None
    warm, kernel = ct.median("warm"), ct.median("kernel")
    if kernel > warm:  # load between the modes: they disagree, and the record leaves overhead_pct out
        assert ct.overhead_pct() is None and any("disagree" in n for n in ct.notes)
    else:
        assert ct.overhead_pct() == pytest.approx(100 * (warm - kernel) / warm)
    assert ct.kernel.sdpa_kernel == "flash"
    # the local control: a 96^3 product between the rounds, timed warm at a CPU core's speed (1-1000 GFLOP/s)
    assert 1e9 < ct.control_flops < 1e12
    fake = modes.CaseTiming(0.0, "cpu", {"warm": timer.Timing([3e-5] * 7, 1, False, "f"),
                                         "kernel": timer.Timing([1e-5] * 7, 1, False, "f", "kernel")})
    assert fake.launch_bound() is True and fake.overhead_pct() == pytest.approx(200 / 3)


def test_spec_sheet_takes_the_most_specific_name():
    assert spec_sheet("NVIDIA H100 NVL").name == "H100 NVL"
    assert spec_sheet("NVIDIA H100 80GB HBM3").name == "H100"
    assert spec_sheet("NVIDIA L40S").name == "L40S"
    assert spec_sheet("NVIDIA H200").source and spec_sheet("Tesla T4") is None


def test_compare_treats_a_throttled_case_as_noisy():
    from bench.regress import compare
    from bench.results import Entry
    from bench.results.record import Record

    def entry(throttled: bool) -> Entry:
        return Entry(Record(case_id="x", status="ok", throttled=throttled))

    t = compare._Timed([1.0] * 20, [2.0] * 20, 1.0, 2.0, (1.0,), (2.0,))
    noise = compare.noise_model([0.0] * 20, [True] * 20, compare.Rule())  # the other cases did not move
    within = compare._within(t, compare.Rule())
    clean = compare._case_verdict("x", entry(False), entry(False), t, within, noise, compare.Rule())
    assert clean.verdict == "regressed"  # the same move without throttling is a regression
    verdict = compare._case_verdict("x", entry(True), entry(False), t, within, noise, compare.Rule())
    assert verdict.verdict == "noisy" and "throttled in the baseline run" in verdict.reason


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_modes_run_side_by_side():
    shape = shape_from_fields(dict(batch=1, seq_q=256, seq_kv=256, n_heads=4, n_kv_heads=4, head_dim=64, dtype="bf16",
                                   mask="causal"))
    q, k, v = make_inputs(shape, "cuda")
    fn = get_backend("sdpa").fn
    ct = modes.time_case(lambda: fn(q, k, v, mask=CAUSAL, score=NO_SCORE), "cuda", case_budget_s=0.1,
                         gpu=nvml.Gpu.open(0))
    assert {"cold", "warm", "kernel"} <= set(ct.timings()) and ct.headline.mode == "cold"
    assert ct.kernel.sdpa_kernel in ("flash", "efficient", "cudnn", "math") and ct.kernel.rows


def test_profile_command_writes_a_trace(tmp_path, capsys):
    code = main(["profile", "--backend", "sdpa", "--heads", "2", "--seq", "64", "--head-dim", "16",
                 "--budget", "0.05", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "sdpa kernel: flash" in out and "aten::_scaled_dot_product_flash_attention_for_cpu" in out
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert any(e.get("name") == kernels.MARKER for e in trace["traceEvents"])


def test_profile_command_reads_a_case_id_and_refuses_several_cases(tmp_path, capsys):
    from bench.commands.profile import case_from_id

    cid = "sdpa/gqa/b1-hq8-hkv2-q1-kv4096-d64/fp32/causal/decode/fwd/cpu"
    assert case_from_id(cid).id == cid
    # a later field's value with dashes in it (a model's name) reads back whole
    cid = "hf-sdpa/gqa/b1-hq32-hkv8-q256-kv1024-d128-model=llama-3-8b/fp32/causal/decode/fwd/cpu"
    assert case_from_id(cid).id == cid
    with pytest.raises(UsageError, match="expected six sizes"):
        case_from_id("sdpa/mha/b1-hq8-hkv8-q1-kv16384/fp32/causal/decode/fwd/cpu")
    assert main(["profile", "sdpa/mha/b1-hq8/fp32", "--out", str(tmp_path)]) == 2
    assert main(["profile", "--seq", "64,128", "--out", str(tmp_path)]) == 2
    assert "profile takes one" in capsys.readouterr().err


def test_run_trace_writes_one_trace_per_case(tmp_path):
    from bench.engine.runner import Runner
    from bench.engine.sweeps import Case

    runner = Runner(Calibration(1e9, 1e9), case_budget_s=0.05, trace_dir=tmp_path)
    record = runner.run(Case("naive", SHAPE, "prefill", "fwd", "cpu")).record
    assert record.status == "ok" and record.sdpa_kernel is None and record.kernels
    assert set(record.timings) == {"warm", "kernel"} and record.timings["warm"]["median_s"] == record.median_s
    (trace,) = tmp_path.glob("*.trace.json")
    assert "traceEvents" in json.loads(trace.read_text())


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path_factory):
    """`gpu-check --dry-run` exits 0 (tests/test_wheel.py runs it once, from the installed wheel, for both tests)."""
    from tests.test_wheel import installed_gpu_check

    folder, _ = installed_gpu_check(tmp_path_factory)
    tmp_path = folder / "check"
    summary = (tmp_path / "summary.txt").read_text()
    # naive's conformance groups: the dense ones and MLA's (naive declares the mla variant)
    assert re.search(r"correctness: exit 0: naive \d+ pass", summary), summary
    for expected in ("sweep: exit 0", "ceiling | measured", "sdpa's kernel", "mode kernel"):
        assert expected in summary, expected
    assert (tmp_path / "report" / "index.html").exists()


def test_report_tables_sdpa_choice_per_family_and_dtype():
    import pandas as pd

    from bench.report.kernels import ceiling_rows, overhead_rows, sdpa_agreed, sdpa_choices

    base = {"device": "cuda", "phase": "prefill", "variant": "gqa", "mask": "causal", "pass": "fwd", "status": "ok",
            "overhead_pct": 10.0, "launch_bound": False}
    df = pd.DataFrame([dict(base, backend="sdpa", dtype="bf16", seq_kv=1024, sdpa_kernel="flash"),
                       dict(base, backend="sdpa", dtype="bf16", seq_kv=4096, sdpa_kernel="cudnn"),
                       dict(base, backend="sdpa", dtype="fp32", seq_kv=1024, sdpa_kernel="efficient"),
                       dict(base, backend="naive", dtype="bf16", seq_kv=1024, sdpa_kernel=None, overhead_pct=80.0,
                            launch_bound=True)])
    rows = sdpa_choices(df)
    assert [r[1] for r in rows] == ["sdpa", "sdpa"] and [r[3] for r in rows] == ["bf16", "fp32"]
    assert rows[0][4] in ("flash ×1, cudnn ×1", "cudnn ×1, flash ×1") and rows[0][5] == "1024–4096"
    assert sdpa_agreed(df) == []
    # a backend that ran one kernel in every family: one sentence, no rows
    same = pd.DataFrame([dict(base, backend="sdpa-flash", dtype=d, seq_kv=s, sdpa_kernel="flash")
                         for d in ("bf16", "fp32") for s in (1024, 4096)])
    assert sdpa_choices(same) == []
    assert sdpa_agreed(same) == ["sdpa-flash ran its flash kernel in all 4 cases (cuda, every shape family and "
                                 "dtype, lengths 1024–4096)."]
    assert ["cuda", "naive", "prefill", "80%", "1 of 1"] in overhead_rows(df)
    spec = ceiling_rows([Calibration(read_bytes_per_s=4e12, gemm_by_dtype={"bf16": 8e14})], ["NVIDIA H100 NVL"])
    assert spec[-1][1].startswith("H100 NVL") and len(spec) == 3


def test_gpu_check_summary_against_the_anchors(tmp_path):
    from bench.report.gpu_check import summary_lines
    from tests.results_factory import make_record, make_run

    common = dict(device="cuda", dtype="bf16", head_dim=128, n_heads=16, n_kv_heads=4, seq=8192, batch=2, mask="none")
    fwd = make_record("sdpa-cudnn", median_s=1e-3, **common)
    both = make_record("sdpa-cudnn", median_s=3.5e-3, pass_="fwd+bwd", **common)
    decode = make_record("sdpa", phase="decode", device="cuda", dtype="bf16", n_heads=32, n_kv_heads=8, seq=32768,
                         median_s=1e-4, kv_cache_bytes=4_000_000, kv_bytes_per_s=4e10, sdpa_kernel="flash",
                         timings={"cold": {"median_s": 1e-4}, "warm": {"median_s": 5e-5}})
    refused = make_record("flash-attn", status="unsupported", device="cuda", reason="flash-attn: not installed")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(make_run([fwd, both, decode, refused], fingerprint={"device": "cuda",
                                                                                  "gpu_name": "NVIDIA H200"},
                                        calibration={"gemm_flops_per_s": 8e14, "gemm_flops_per_s_bf16": 8e14,
                                                     "copy_bytes_per_s": 4e12, "read_bytes_per_s": 4.4e12})))
    text = "\n".join(summary_lines(path))
    assert "spec sheet: H200, 989 TFLOP/s" in text
    assert "GEMM bf16 | 800.000 | 790.0 | 1.01" in text
    bwd_tflops = 2.5 * fwd["flops"] / 2.5e-3 / 1e12  # the backward alone: fwd+bwd minus fwd
    assert f"sdpa-cudnn bwd none S=8192 | {both['case_id']} | {bwd_tflops:.1f} | 562" in text
    assert "batch 1 KV 32768: best sdpa 0.04 TB/s" in text
    assert "mode warm: 1 cases, median time / headline: geomean 0.50" in text
    assert "unsupported: flash-attn x1: flash-attn: not installed" in text


def test_ceilings_per_dtype_and_read_only():
    from bench.results.record import Record, derived

    rec = Record(shape=AttentionShape(1, 1, 1, 1, 1, 8, "bf16"), flops=10**9, bytes=10**6)
    cal = {"gemm_flops_per_s": 1e12, "gemm_flops_per_s_bf16": 2e12, "copy_bytes_per_s": 1e9, "read_bytes_per_s": 2e9}
    out = derived(rec, 1e-3, Calibration.from_dict(cal), None)
    assert out["pct_gemm_ceiling"] == pytest.approx(50.0)  # against bf16's own GEMM, not the main dtype's
    assert out["pct_copy_ceiling"] == pytest.approx(100.0) and out["pct_read_ceiling"] == pytest.approx(50.0)
    older = derived(rec, 1e-3, Calibration.from_dict({"gemm_flops_per_s": 1e12, "copy_bytes_per_s": 1e9}), None)
    # ^ a file before the per-dtype and read-only ceilings
    assert older["pct_gemm_ceiling"] == pytest.approx(100.0) and older["pct_read_ceiling"] is None
