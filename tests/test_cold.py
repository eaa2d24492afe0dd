"""Cold inputs: the cache size read from sysfs, how many copies a rotation takes, the Rotating call, which kinds
rotate what, the record's fields, the options' refusals, and the cost model's count of it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.engine.runner import Runner
from bench.engine.sweeps import Case
from bench.kinds import kind_of
from bench.measure.caches import CPU_CACHE_FLOOR, cpu_cache
from bench.measure.cold import MAX_COPIES, ColdPlan, copies_for
from bench.measure.modes import headline_samples, time_case
from bench.measure.rotation import Rotating
from bench.plan.cost import predict
from bench.problem.shapes import AttentionShape, case_mask
from bench.results.meta import Calibration
from bench.results.record import new_record

MiB = 1 << 20


def _cache(root: Path, cpu: int, index: int, level: int, kind: str, size: str, shared: str) -> None:
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    for name, text in {"level": str(level), "type": kind, "size": size, "shared_cpu_list": shared}.items():
        (d / name).write_text(text + "\n")


def test_cpu_cache_sums_distinct_l2_and_l3_instances(tmp_path: Path) -> None:
    # two cores, each with its own L1d, L1i and 2 MiB L2, sharing one 480 MiB L3 (the Intel kind's report)
    for cpu in (0, 1):
        _cache(tmp_path, cpu, 0, 1, "Data", "48K", str(cpu))
        _cache(tmp_path, cpu, 1, 1, "Instruction", "32K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "2048K", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "491520K", "0-1")
    found = cpu_cache(tmp_path)
    assert found.reported == 2 * 2 * MiB + 480 * MiB
    assert found.bytes == found.reported
    assert "L2 2 x 2 MiB" in found.how and "L3 1 x 480 MiB" in found.how


def test_cpu_cache_under_the_floor_or_unreadable_takes_the_floor(tmp_path: Path) -> None:
    _cache(tmp_path, 0, 0, 2, "Unified", "1024K", "0")
    _cache(tmp_path, 0, 1, 3, "Unified", "16M", "0")
    small = cpu_cache(tmp_path)
    assert small.reported == 17 * MiB and small.bytes == CPU_CACHE_FLOOR and "floor" in small.how
    empty = cpu_cache(tmp_path / "nothing")
    assert empty.reported is None and empty.bytes == CPU_CACHE_FLOOR


def test_copies_exceed_the_multiple_of_the_cache() -> None:
    plan = ColdPlan(multiple=3.0, memory_share=0.25)
    copies, why = copies_for(16 * MiB, 64 * MiB, plan, free_bytes=20 << 30)
    assert why == "" and copies * 16 * MiB > 3 * 64 * MiB
    big, _ = copies_for(1 << 30, 64 * MiB, plan, free_bytes=20 << 30)
    assert big == 2  # a set larger than the cache still rotates over two copies


def test_copies_capped_by_count_or_memory_say_partly_warm() -> None:
    plan = ColdPlan(multiple=3.0, memory_share=0.25)
    copies, why = copies_for(4096, 64 * MiB, plan, free_bytes=20 << 30)
    assert copies == MAX_COPIES and why.startswith("partly warm") and "copies at most" in why
    copies, why = copies_for(100 * MiB, 480 * MiB, plan, free_bytes=1 << 30)
    assert copies == 1 + (1 << 30) // 4 // (100 * MiB) and "of the 1.0 GiB free" in why


def test_rotating_hands_out_copies_in_turn_and_hold_returns_the_original() -> None:
    k = torch.arange(1024, dtype=torch.float32)
    seen: list[int] = []
    call = Rotating(lambda t: seen.append(t.data_ptr()) or float(t.sum()), (k,))
    rotation = call.fill(64 * 1024, ColdPlan(multiple=2.0))
    assert rotation.copies == 2 * 64 * 1024 // (4 * 1024) + 1 and rotation.set_bytes == 4096
    sums = [call() for _ in range(rotation.copies + 1)]
    assert len(set(seen)) == rotation.copies  # every copy once before the first comes round again
    assert seen[-1] == seen[0] and len(set(sums)) == 1  # copies, not new draws
    call.hold()
    seen.clear()
    call(), call()
    assert seen == [k.data_ptr()] * 2 and len(call.copies) == 1


def test_the_memory_probe_reads_copies_half_a_rotation_away_never_the_next_calls() -> None:
    k = torch.arange(1024, dtype=torch.float32)  # 4 KiB a copy
    call = Rotating(lambda t: float(t[0]), (k,))
    buffer = torch.empty(10_000, dtype=torch.uint8)
    assert call.read_far(buffer) == 0  # not filled: no cold copies to read
    call.fill(64 * 1024, ColdPlan(multiple=2.0))
    for copy, (value,) in enumerate(call.tensors):
        value.fill_(copy)  # each copy told apart by its values
    n = len(call.tensors)
    assert call.read_far(buffer) == buffer.numel()
    read = buffer[:4 * 2048].view(torch.float32)  # the first two copies' worth
    nxt = call.turn
    assert read[0] == (nxt + n // 2) % n and read[1024] == (nxt + n // 2 - 1) % n  # backwards from half way
    assert (read != nxt).all()
    call.hold()
    assert call.read_far(buffer) == 0 and len(call.tensors) == 1


def test_a_cold_case_times_its_memory_probe_beside_the_gemm_and_a_warm_one_does_not() -> None:
    timing = time_case(Rotating(lambda k: k.sum(), (torch.ones(1 << 14),)), "cpu", 0.05, cold=ColdPlan(multiple=1.0))
    assert timing.control_read and timing.control_read > 0 and timing.control_flops
    warm = time_case(lambda: torch.ones(8).sum(), "cpu", 0.05)
    assert warm.control_read is None and warm.control_flops


def test_rotating_view_builds_each_copys_arguments_once() -> None:
    built: list[int] = []

    def view(t: torch.Tensor) -> tuple[torch.Tensor]:
        built.append(1)
        return (t[:2],)
    call = Rotating(lambda t: t.shape[0], (torch.zeros(8),), view)
    call.fill(64, ColdPlan(multiple=1.0))
    before = len(built)
    assert all(call() == 2 for _ in range(5)) and len(built) == before  # views are made at fill, not per call


def test_time_case_on_cpu_times_cold_then_warm_and_headlines_cold() -> None:
    call = Rotating(lambda k: k.sum(), (torch.ones(1 << 14),))
    timing = time_case(call, "cpu", 0.05, cold=ColdPlan(multiple=1.0))
    assert timing.headline_mode == "cold" and {"cold", "warm"} <= set(timing.modes)
    assert timing.rotation is not None and timing.rotation.copies > 2
    assert len(call.copies) == 1  # held after the cold mode: the warm mode, memory and guard read the originals
    plain = time_case(lambda: torch.ones(8).sum(), "cpu", 0.05)
    assert plain.headline_mode == "warm" and "cold" not in plain.modes and plain.rotation is None


def test_a_zero_multiple_times_warm_only() -> None:
    call = Rotating(lambda k: k.sum(), (torch.ones(64),))
    timing = time_case(call, "cpu", 0.05, cold=ColdPlan(multiple=0.0))
    assert timing.headline_mode == "warm" and timing.rotation is None


def test_headline_samples_rotate_then_free_the_copies() -> None:
    call = Rotating(lambda k: k.sum(), (torch.ones(256),))
    call(), call()
    assert headline_samples(call, "cpu", 1e-5, 0.05, ColdPlan(multiple=1.0))
    assert len(call.copies) == 1


def test_headline_samples_asked_to_keep_fill_once_and_reuse_the_copies() -> None:
    call = Rotating(lambda k: k.sum(), (torch.ones(256),))
    headline_samples(call, "cpu", 1e-5, 0.05, ColdPlan(multiple=1.0), keep=True)
    copies = [c[0].data_ptr() for c in call.copies]
    assert call.filled and len(copies) > 1
    headline_samples(call, "cpu", 1e-5, 0.05, ColdPlan(multiple=1.0), keep=True)
    assert [c[0].data_ptr() for c in call.copies] == copies  # not filled again


def test_a_workers_slices_keep_a_blocks_pair_filled_and_free_the_cases_before() -> None:
    runner = Runner(Calibration(gemm_flops_per_s=1e11, copy_bytes_per_s=1e10), case_budget_s=0.02,
                    cold=ColdPlan(multiple=0.5))
    a, b, c = (_decode(), _decode("naive"), _decode("sdpa-math"))
    for case in (a, b, b, a):  # an ABBA block
        assert runner.slice(case) > 0
    assert runner.filled == [b.id, a.id]
    assert all(runner.sliced[x.id][0].filled for x in (a, b))
    runner.slice(c)  # the next condition's block: the last case sliced stays filled beside it, the one before not
    assert runner.filled == [a.id, c.id] and not runner.sliced[b.id][0].filled


def _decode(backend: str = "sdpa", phase: str = "decode") -> Case:
    seq_q = 1 if phase == "decode" else 256
    shape = AttentionShape(1, seq_q, 256, 8, 2, 64, "fp32", case_mask("causal"))
    return Case(backend, shape, phase, "fwd", "cpu")


def test_dense_decode_rotates_k_and_v_and_prefill_does_not() -> None:
    decode = _decode()
    call = kind_of(decode).timed_call(decode, None)
    assert isinstance(call, Rotating) and [t.shape for t in call.original] == [(1, 2, 256, 64)] * 2
    assert call.guard is not None  # the guard rides on it
    prefill = _decode(phase="prefill")
    assert not isinstance(kind_of(prefill).timed_call(prefill, None), Rotating)


def test_a_decode_record_says_its_mode_and_rotation() -> None:
    runner = Runner(Calibration(gemm_flops_per_s=1e11, copy_bytes_per_s=1e10), case_budget_s=0.05,
                    cold=ColdPlan(multiple=0.5))
    record = runner.run(_decode()).record
    assert record.status == "ok", record.reason
    assert record.timing_mode == "cold" and record.cold_copies and record.cold_copies >= 2
    assert record.cold_set_bytes == 2 * 2 * 256 * 64 * 4 and record.cache_bytes >= CPU_CACHE_FLOOR
    assert record.median_s == record.timings["cold"]["median_s"] and "warm" in record.timings
    prefill = runner.run(_decode(phase="prefill")).record
    assert prefill.timing_mode == "warm" and prefill.cold_copies is None
    assert record.setup_s > 0 and prefill.setup_s > 0  # what a deciding block's fresh worker pays again


def test_a_fill_says_how_long_its_copies_took() -> None:
    call = kind_of(_decode()).timed_call(_decode(), None)
    rotation = call.fill(CPU_CACHE_FLOOR, ColdPlan(multiple=0.5))
    assert rotation.copies >= 2 and rotation.fill_s > 0


def test_the_cost_model_counts_the_copies_and_the_warm_mode() -> None:
    calibration = Calibration(gemm_flops_per_s=1e11, copy_bytes_per_s=1e10)
    case = _decode()
    record = new_record(case, "tiled", threads=0)
    cold = predict(case, record, calibration, "tiled", 0.5, cold=ColdPlan())
    warm = predict(case, record, calibration, "tiled", 0.5, cold=ColdPlan(multiple=0.0))
    assert cold > warm


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--cold-multiple", "-1", "must be a finite number >= 0"),
    ("--cold-multiple", "lots", "expected a number"),
    ("--cold-memory", "1.5", "over 0 and at most 1"),
    ("--cold-memory", "0", "over 0 and at most 1"),
])
def test_nonsense_cold_options_are_refused_by_name(flag: str, value: str, said: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    assert main(["run", "--profile", "quick", flag, value, "--plan", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and said in err and "Traceback" not in err
    assert not (tmp_path / "r.json").exists()  # nothing run


def test_the_cuda_flush_is_at_least_twice_the_l2() -> None:
    from bench.measure.timer import L2_FLUSH_MULTIPLE

    assert L2_FLUSH_MULTIPLE >= 2


def test_the_report_sets_cold_beside_warm_for_a_run_s_cases(tmp_path: Path) -> None:
    from bench.analysis.load import tidy
    from bench.report import cold

    runner = Runner(Calibration(gemm_flops_per_s=1e11, copy_bytes_per_s=1e10), case_budget_s=0.05,
                    cold=ColdPlan(multiple=0.5))
    rows = []
    for case in (_decode(), _decode("naive"), _decode(phase="prefill")):
        record = runner.run(case).record.to_dict()
        record["warm_median_s"] = (record["timings"] or {}).get("warm", {}).get("median_s")
        rows.append({k: v for k, v in record.items() if not isinstance(v, (dict, list))} | {"run_id": "r"})
    frame = tidy(rows)
    assert list(frame["timing_mode"]) == ["cold", "cold", "warm"]
    table = cold.summary(frame)
    assert [row[:3] for row in table] == [["decode", "naive", "fp32"], ["decode", "sdpa", "fp32"]]
    assert all("→" in row[5] and row[6].endswith(")") for row in table) and cold.partly_warm(frame) == []


def test_a_slice_told_its_case_was_checked_skips_the_float64_check_and_one_not_told_runs_it(monkeypatch) -> None:
    import bench.engine.runner as runner_module

    real = runner_module.kind_of(_decode().shape)

    class Failing:  # the case's kind, with a check that fails
        def __getattr__(self, name):
            return getattr(real, name)

        def check(self, *args):
            raise AssertionError("checked")

    monkeypatch.setattr(runner_module, "kind_of", lambda shape: Failing())
    runner = Runner(Calibration(gemm_flops_per_s=1e11, copy_bytes_per_s=1e10), case_budget_s=0.02,
                    cold=ColdPlan(multiple=0.5))
    assert runner.slice(_decode(), check=False) > 0
    with pytest.raises(AssertionError, match="checked"):
        runner.slice(_decode("naive"))
