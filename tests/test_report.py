"""Reports: results files -> tidy frame -> claims and figures -> index.html / report.md / tidy.csv."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from bench.analysis.frames import fit_exponent
from bench.analysis.load import COLUMNS, load_results, read_results
from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED
from bench.claims import CLAIMS, evaluate_claims, spec
from tests.results_factory import make_record, make_run
from tests.shared import once

E = {"fp32": 4, "bf16": 2}
PREFILL_RATE = {"naive": 20e9, "sdpa": 95e9, "sdpa-math": 24e9, "sdpa-flash": 100e9, "flex": 75e9}
RATE_GROWTH = {"naive": 0.0, "sdpa": 0.25, "sdpa-math": 0.05, "sdpa-flash": 0.25, "flex": 0.3}  # rate ∝ S^growth
CUDA_ONLY = ("sdpa-efficient", "sdpa-cudnn", "flash-attn")


def _prefill(backend: str, hq: int, hkv: int, seq: int, dtype: str, head_dim: int = 64, **kw) -> dict:
    """A plausible CPU prefill case: rate grows with S, naive holds the S x S matrix, flash-style holds O(S)."""
    e = E[dtype]
    if backend in CUDA_ONLY:
        return make_record(backend, hq, hkv, seq, "unsupported", dtype=dtype, head_dim=head_dim,
                           reason="unsupported: needs a CUDA device", **kw)
    rate = PREFILL_RATE[backend] * (seq / 4096) ** RATE_GROWTH[backend]
    rate *= (0.7 if dtype == "bf16" else 1.0) * min(1, head_dim / 64)
    rate *= (0.7 if dtype == "bf16" else 1.0) * min(1, head_dim / 64)
    flops = 4 * hq * head_dim * seq * seq
    median = flops / rate + 20e-6 + 3e-6 * hq
    if backend in ("naive", "sdpa-math"):
        model = hq * seq * seq * e
        peak = model * (2 if backend == "naive" else 3)
    else:
        model = hq * seq * (head_dim * e + 4)
        peak = int(model * 1.1)
    return make_record(backend, hq, hkv, seq, dtype=dtype, head_dim=head_dim, median_s=median, flops=flops,
                       bytes=e * head_dim * (2 * hq * seq + 2 * hkv * seq),
                       tflops=flops / median / 1e12, peak_mem_bytes=peak, model_mem_bytes=model,
                       kv_cache_bytes=2 * hkv * seq * head_dim * e, ci_low_s=median * 0.98, ci_high_s=median * 1.02,
                       iqr_s=median * 0.03, **kw)


def _decode(backend: str, hkv: int, kv: int, dtype: str) -> dict:
    """A decode step: a fixed overhead plus reading the KV cache at 12 GB/s."""
    kv_bytes = 2 * hkv * kv * 64 * E[dtype]
    median = 15e-6 + kv_bytes / 12e9 + (10e-6 if backend == "naive" else 0)
    return make_record(backend, 8, hkv, kv, phase="decode", dtype=dtype, median_s=median, kv_cache_bytes=kv_bytes,
                       bytes=kv_bytes + 2 * 8 * 64 * E[dtype],
                       peak_mem_bytes=8 * kv * E[dtype], model_mem_bytes=8 * kv * E[dtype])


def realistic_records() -> list[dict]:
    """Many backends, 3 variants, 2 dtypes, 6 lengths, failures of every kind, decode and a heads sweep."""
    recs = []
    for dtype in ("fp32", "bf16"):
        for hkv in (8, 2, 1):
            for seq in (256, 512, 1024, 2048, 4096, 8192):
                for backend in (*PREFILL_RATE, *CUDA_ONLY):
                    if backend == "naive" and seq == 8192:
                        rec = make_record(backend, 8, hkv, seq, "oom", dtype=dtype, reason="oom: 4 GiB score matrix")
                    elif backend == "flex" and dtype == "bf16" and hkv == 1 and seq == 256:
                        rec = make_record(backend, 8, hkv, seq, "error", dtype=dtype, reason="error: InductorError")
                    elif backend == "sdpa-math" and dtype == "bf16" and seq == 8192 and hkv == 2:
                        rec = make_record(backend, 8, hkv, seq, "incorrect", dtype=dtype,
                                          reason="incorrect: max abs error 0.31")
                    else:
                        rec = _prefill(backend, 8, hkv, seq, dtype)
                    recs.append(rec)
            for kv in (512, 1024, 2048, 4096, 8192, 16384):
                for backend in ("naive", "sdpa", "sdpa-flash"):
                    recs.append(_decode(backend, hkv, kv, dtype))
    for heads in (1, 2, 4, 16, 32):  # heads 8 (D=64) is already in the sweep above
        for seq in (1024, 4096):
            for backend in ("naive", "sdpa", "sdpa-flash"):
                recs.append(_prefill(backend, heads, heads, seq, "fp32", head_dim=512 // heads))
    return recs


def realistic_run(run_id: str = "synthetic", **kw) -> dict:
    doc = make_run(realistic_records(), run_id=run_id, **kw)
    doc["machine_info"]["attnbench"].update(device="cpu", threads=2, device_memory_bytes=16 * 2**30,
                                            allocator="glibc", git_commit="abc1234")
    return doc


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def realistic(tmp_path_factory) -> tuple[Path, object]:
    path = write(tmp_path_factory.mktemp("run") / "synthetic.json", realistic_run())
    return path, load_results([path]).frame


@pytest.fixture(scope="module")
def realistic_report(realistic, tmp_path_factory) -> Path:
    """The realistic run's report folder (its index.html), built once per test run: the tests only read it."""
    from bench.report import build_report

    folder, index = once(tmp_path_factory, "realistic-report",
                         lambda into: str(build_report([realistic[0]], into / "out")))
    assert Path(index) == folder / "out" / "index.html"
    return Path(index)


@pytest.fixture(scope="module")
def figures(realistic) -> dict:
    from bench.report.figures import make_figures

    return make_figures(realistic[1])


# ---- loading -------------------------------------------------------------------------------------------------

def test_tidy_frame_holds_the_values_of_the_records(tmp_path):
    recs = [make_record("naive", 8, 2, 1024, median_s=0.02, kv_cache_bytes=2 * 2 * 1024 * 64 * 4),
            make_record("flex", 8, 2, 1024, status="oom", reason="oom: <32 GiB>")]
    path = write(tmp_path / "a.json", make_run(recs, run_id="r1", fingerprint={"cpu_model": "Xeon 9"}))
    df, info = read_results(path)
    assert len(df) == 2 and info.run_id == "r1" and info.machine == "Xeon 9"
    ok = df[df["backend"] == "naive"].iloc[0]
    assert (ok["run_id"], ok["machine"], ok["device"], ok["variant"], ok["status"]) == ("r1", "Xeon 9", "cpu", "gqa",
                                                                                        "ok")
    assert (ok["n_heads"], ok["n_kv_heads"], ok["group_size"], ok["head_dim"], ok["d_model"]) == (8, 2, 4, 64, 512)
    assert (ok["seq_q"], ok["seq_kv"], ok["batch"], ok["dtype"], ok["mask"], ok["phase"]) == (
        1024, 1024, 1, "fp32", "causal", "prefill")
    assert ok["median_s"] == 0.02 and ok["rounds"] == 20 and ok["reason"] == ""
    flops = 4 * 8 * 64 * 1024 * 1024
    assert ok["flops"] == flops and ok["flops_per_s"] == pytest.approx(flops / 0.02)
    assert ok["intensity"] == pytest.approx(flops / ok["bytes"])
    assert ok["tflops"] == pytest.approx(flops / 0.02 / 1e12)
    assert ok["kv_cache_bytes"] == 2 * 2 * 1024 * 64 * 4
    assert ok["gemm_flops_per_s"] == 1.95e11 and ok["copy_bytes_per_s"] == 6.3e10
    bad = df[df["backend"] == "flex"].iloc[0]
    assert bad["status"] == "oom" and bad["reason"] == "oom: <32 GiB>"
    assert math.isnan(bad["median_s"]) and math.isnan(bad["flops_per_s"])


def test_columns_are_documented_in_one_place_and_cover_every_record_field(tmp_path):
    from bench.results.record import RECORD_FIELDS

    df, _ = read_results(write(tmp_path / "a.json", make_run([make_record()])))
    assert list(df.columns) == list(COLUMNS)  # a record with exactly RECORD_FIELDS adds no undocumented column
    assert set(RECORD_FIELDS) <= set(COLUMNS)
    assert all(COLUMNS.values())


def test_missing_stats_are_computed_from_the_raw_rounds(tmp_path):
    rec = make_record()
    rec.update(samples=[1.0, 2.0, 3.0, 4.0, 5.0], rounds=None, median_s=None, iqr_s=None)
    df, _ = read_results(write(tmp_path / "a.json", make_run([rec])))
    assert df["median_s"].iloc[0] == 3.0 and df["iqr_s"].iloc[0] == 2.0 and df["rounds"].iloc[0] == 5


def test_two_runs_share_one_frame_oldest_first(tmp_path):
    a = make_run([make_record(median_s=1e-3)], run_id="old", fingerprint={"cpu_model": "CPU A"})
    b = make_run([make_record(median_s=2e-3)], run_id="new", fingerprint={"cpu_model": "GPU box", "device": "cuda",
                                                                          "gpu_name": "H200"})
    b["datetime"] = "2026-12-01T00:00:00"
    loaded = load_results([write(tmp_path / "b.json", b), write(tmp_path / "a.json", a)])
    assert loaded.errors == []
    assert [r.run_id for r in loaded.runs] == ["old", "new"]
    by_run = loaded.frame.set_index("run_id")
    assert by_run.loc["old", "median_s"] == 1e-3 and by_run.loc["new", "median_s"] == 2e-3
    assert by_run.loc["old", "machine"] == "CPU A" and by_run.loc["new", "machine"] == "H200"


def test_folders_are_searched_recursively_skipping_baselines(tmp_path):
    (tmp_path / "results").mkdir()
    write(tmp_path / "results" / "a.json", make_run([make_record()], run_id="a"))
    (tmp_path / "results" / "nightly").mkdir()
    write(tmp_path / "results" / "nightly" / "b.json", make_run([make_record()], run_id="b"))
    (tmp_path / "results" / "baselines").mkdir()
    write(tmp_path / "results" / "baselines" / "base.json", make_run([make_record()], run_id="base"))
    loaded = load_results([tmp_path / "results", tmp_path / "results" / "a.json"])  # a.json twice: loaded once
    assert sorted(r.run_id for r in loaded.runs) == ["a", "b"] and loaded.errors == []


def test_bad_inputs_are_named_and_the_good_ones_still_load(tmp_path):
    good = write(tmp_path / "good.json", make_run([make_record()], run_id="good"))
    text = json.dumps(make_run([make_record()]))
    (tmp_path / "corrupt.json").write_text("\x00\x01 not json at all")
    (tmp_path / "truncated.json").write_text(text[: len(text) // 2])
    foreign = {"machine_info": {"node": "x"}, "commit_info": {}, "datetime": "2024-01-01", "version": "4.0.0",
               "benchmarks": [{"name": "test_sort", "fullname": "t.py::test_sort", "params": None,
                               "stats": {"median": 0.1, "data": [0.1]}, "extra_info": {}}]}
    write(tmp_path / "foreign.json", foreign)
    broken = make_run([make_record()])
    del broken["benchmarks"][0]["extra_info"]["seq_kv"]
    write(tmp_path / "broken.json", broken)
    loaded = load_results([good, tmp_path / "corrupt.json", tmp_path / "truncated.json", tmp_path / "foreign.json",
                           tmp_path / "broken.json", tmp_path / "missing.json"])
    assert [r.run_id for r in loaded.runs] == ["good"] and len(loaded.frame) == 1
    assert len(loaded.errors) == 5
    errors = {name: next(e for e in loaded.errors if f"{name}.json:" in e)
              for name in ("corrupt", "truncated", "foreign", "broken", "missing")}
    assert "corrupt.json" in errors["corrupt"] and "not valid JSON" in errors["corrupt"]
    assert "truncated.json" in errors["truncated"] and "truncated or corrupt" in errors["truncated"]
    assert "foreign.json" in errors["foreign"] and "another project" in errors["foreign"]
    assert "broken.json" in errors["broken"] and "seq_kv" in errors["broken"]
    assert "missing.json" in errors["missing"] and "no such file" in errors["missing"]


def test_a_non_number_where_a_number_belongs_is_an_error_naming_the_file(tmp_path):
    run = make_run([make_record(median_s=0.001)])
    run["benchmarks"][0]["extra_info"]["median_s"] = "__import__('os')"
    loaded = load_results([write(tmp_path / "evil.json", run)])
    assert not loaded.runs and "evil.json" in loaded.errors[0] and "median_s" in loaded.errors[0]


# ---- claims --------------------------------------------------------------------------------------------------

def _frame(recs: list[dict], tmp_path: Path):
    return read_results(write(tmp_path / "c.json", make_run(recs)))[0]


def test_fit_exponent():
    assert fit_exponent([256, 512, 1024], [256**2, 512**2, 1024**2]) == pytest.approx(2.0)
    assert fit_exponent([1, 10, 100], [3, 30, 300]) == pytest.approx(1.0)
    assert fit_exponent([512, 512], [1, 2]) is None


def test_memory_claim_fits_s_squared_for_naive_and_s_for_flash(tmp_path):
    seqs = (256, 512, 1024, 2048)
    recs = [make_record("naive", seq=s, peak_mem_bytes=8 * s * s * 4) for s in seqs]
    recs += [make_record("sdpa-flash", seq=s, peak_mem_bytes=8 * s * 64 * 4 + 4096) for s in seqs]
    memory = evaluate_claims(_frame(recs, tmp_path))[1]
    assert memory["verdict"] == HOLDS
    exps = {d["backend"]: d["exponent"] for d in memory["detail"]}
    assert exps["naive"] == pytest.approx(2.0, abs=1e-9) and exps["sdpa-flash"] == pytest.approx(1.0, abs=0.02)
    assert "naive S^2.00" in memory["numbers"]


def test_memory_claim_is_judged_per_backend_and_fails_when_no_side_keeps_its_model(tmp_path):
    seqs = (256, 512, 1024, 2048)
    recs = [make_record("naive", seq=s, peak_mem_bytes=s * s) for s in seqs]
    recs += [make_record("sdpa-flash", seq=s, peak_mem_bytes=s * s) for s in seqs]
    claim = evaluate_claims(_frame(recs, tmp_path))[1]
    # naive keeps O(S²), the flash kernel does not keep O(S): one condition each way
    assert claim["verdict"] == DEPENDS and "sdpa-flash S^2.00" in claim["why"]
    assert {c["key"]["backend"]: c["verdict"] for c in claim["conditions"]} == {"naive": HOLDS, "sdpa-flash": FAILS}
    assert {c["unit"] for c in claim["conditions"]} == {"exponent"}
    recs = [make_record("naive", seq=s, peak_mem_bytes=64 * s) for s in seqs]
    recs += [make_record("sdpa-flash", seq=s, peak_mem_bytes=s * s) for s in seqs]
    assert evaluate_claims(_frame(recs, tmp_path))[1]["verdict"] == FAILS  # both sides off their model


def test_memory_claim_needs_both_sides_measured(tmp_path):
    """One side alone that keeps its model cannot show the claim (it read holds before): inconclusive, naming the
    side missing and the command that measures both."""
    seqs = (256, 512, 1024, 2048)
    naive = [make_record("naive", seq=s, peak_mem_bytes=8 * s * s * 4) for s in seqs]
    flash = [make_record("sdpa-flash", seq=s, peak_mem_bytes=8 * s * 64 * 4 + 4096) for s in seqs]
    for recs, missing in ((naive, "the flash-style side"), (flash, "the score-matrix side")):
        claim = evaluate_claims(_frame(recs, tmp_path))[1]
        assert claim["verdict"] == INCONCLUSIVE, claim["numbers"]
        assert missing in claim["why"] and spec("memory").command in claim["why"]
    both = evaluate_claims(_frame(naive + flash, tmp_path))[1]
    assert both["verdict"] == HOLDS and [c["verdict"] for c in both["conditions"]] == [HOLDS, HOLDS]


def test_heads_claim(tmp_path):
    flat = [make_record("sdpa", h, h, 1024, head_dim=512 // h, median_s=1e-3 * (1 + 0.01 * h)) for h in (1, 2, 4, 8)]
    steep = [make_record("sdpa", h, h, 1024, head_dim=512 // h, median_s=1e-3 * h) for h in (1, 2, 4, 8)]
    assert evaluate_claims(_frame(flat, tmp_path))[0]["verdict"] == HOLDS
    lunch = evaluate_claims(_frame(steep, tmp_path))[0]
    assert lunch["verdict"] == FAILS and lunch["detail"][0]["spread"] == pytest.approx(8.0)
    assert evaluate_claims(_frame([make_record()], tmp_path))[0]["verdict"] == NOT_MEASURED


def _kv(model, variant, hq, hkv, per_token):
    """A twin's cache as measured in transformers (bench.models.kvcache.measured_twins)."""
    return {"model": model, "variant": variant, "n_heads": hq, "n_kv_heads": hkv, "head_dim": 128, "tokens": 8,
            "dtype": "bf16", "source": "transformers", "method": "LlamaForCausalLM", "bytes_per_token": per_token}


def test_kv_cache_claim_is_judged_per_twin_on_transformers_caches(tmp_path):
    df = _frame([make_record()], tmp_path)
    exact = [_kv("llama-3-8b", "mha", 32, 32, 16384), _kv("llama-3-8b", "gqa", 32, 8, 4096),
             _kv("llama-3-8b", "mqa", 32, 1, 512)]
    claim = evaluate_claims(df, exact)[2]
    assert claim["verdict"] == HOLDS and "holds in 2 of 2" in claim["numbers"]
    assert "llama-3-8b · GQA · Hq/Hkv 4 4×" in claim["numbers"] and len(claim["conditions"]) == 2
    assert claim["conditions"][0]["key"] == {"model": "llama-3-8b", "variant": "GQA", "group_size": 4}
    # a GQA cache that keeps all Hq heads fails its condition, whatever the formula says; the MQA one still holds
    wrong = [*exact[::2], _kv("llama-3-8b", "gqa", 32, 8, 16384)]
    claim = evaluate_claims(df, wrong)[2]
    assert claim["verdict"] == DEPENDS and "llama-3-8b · GQA · Hq/Hkv 4: its cache holds 16,384 bytes" in claim["why"]
    off = [*exact[:2], _kv("llama-3-8b", "mqa", 32, 1, 512 * 1.03)]  # 3% off Hq/Hkv: past KV_WITHIN
    assert {c["key"]["variant"]: c["verdict"] for c in evaluate_claims(df, off)[2]["conditions"]}["MQA"] == FAILS


def test_kv_cache_claim_does_not_read_caches_sized_from_the_formula(tmp_path):
    """Caches attnbench allocated itself from n_kv_heads (what runs recorded before) are the formula's bytes: they
    read holds by construction, so they are not measured evidence (they read holds before)."""
    df = _frame([make_record()], tmp_path)
    allocated = [{"model": "llama-3-8b", "variant": v, "n_heads": 32, "n_kv_heads": h, "context": 64,
                  "method": "profiler", "bytes": h * 4096} for v, h in (("mha", 32), ("gqa", 8))]
    claim = evaluate_claims(df, allocated)[2]
    assert claim["verdict"] == NOT_MEASURED and "formula" in claim["numbers"]
    assert "pip install 'attnbench[hf]'" in claim["numbers"] and spec("kv").command in claim["numbers"]
    nothing = evaluate_claims(df)[2]  # no transformers: nothing measured, the extra named
    assert nothing["verdict"] == NOT_MEASURED and "pip install 'attnbench[hf]'" in nothing["numbers"]


@pytest.mark.slow  # builds a one-layer transformers twin of every preset
def test_kv_cache_claim_holds_on_transformers_caches(tmp_path):
    pytest.importorskip("transformers")
    from bench.models.kvcache import measured_presets

    claim = evaluate_claims(_frame([make_record()], tmp_path), measured_presets("cpu"))[2]
    assert claim["verdict"] == HOLDS, claim["numbers"]


def test_decode_claim_measures_mha_over_gqa_at_equal_hq(tmp_path):
    def rec(hkv, kv, t):
        return make_record("sdpa", 8, hkv, kv, phase="decode", median_s=t)

    fast = [rec(8, 1024, 1e-4), rec(2, 1024, 0.9e-4), rec(8, 8192, 8e-4), rec(2, 8192, 2.5e-4), rec(1, 8192, 2e-4)]
    claim = evaluate_claims(_frame(fast, tmp_path))[3]
    assert claim["verdict"] == HOLDS
    speedups = {(d["variant"], d["seq_kv"]): d["speedup"] for d in claim["detail"]}
    assert speedups[("gqa", 8192)] == pytest.approx(3.2) and speedups[("mqa", 8192)] == pytest.approx(4.0)
    assert speedups[("gqa", 1024)] == pytest.approx(1 / 0.9)
    slow = [rec(8, 8192, 1e-4), rec(2, 8192, 0.9e-4)]
    assert evaluate_claims(_frame(slow, tmp_path))[3]["verdict"] == INCONCLUSIVE  # one KV length cannot decide
    slow = [r for kv in (2048, 4096, 8192) for r in (rec(8, kv, 1e-4), rec(2, kv, 0.9e-4))]
    assert evaluate_claims(_frame(slow, tmp_path))[3]["verdict"] == FAILS
    assert evaluate_claims(_frame([make_record()], tmp_path))[3]["verdict"] == NOT_MEASURED


def test_decode_claim_is_judged_per_kernel_family_and_says_why(tmp_path):
    def rec(backend, hkv, t, read, gemm):  # the same step at three KV lengths: a shortfall there is a finding
        return [make_record(backend, 8, hkv, kv, phase="decode", median_s=t * kv / 8192, pct_read_ceiling=read,
                            pct_gemm_ceiling=gemm) for kv in (2048, 4096, 8192)]

    # a fused kernel reads Hkv heads: MQA 4x faster; an expanding one repeats K/V to Hq heads: no faster
    recs = [*rec("sdpa", 8, 4e-4, 80, 5), *rec("sdpa", 1, 1e-4, 40, 20), *rec("naive", 8, 4e-4, 80, 5),
            *rec("naive", 1, 4.4e-4, 10, 5)]
    fused, expanding = evaluate_claims(_frame(recs, tmp_path))[3:5]
    assert "fused kernels" in fused["claim"] and "expand K/V" in expanding["claim"]
    assert fused["verdict"] == HOLDS and fused["why"] == "" and {d["backend"] for d in fused["detail"]} == {"sdpa"}
    assert expanding["verdict"] == FAILS and {d["backend"] for d in expanding["detail"]} == {"naive"}
    assert "expand K/V to all Hq heads" in expanding["why"]
    assert "MHA step runs at 80.0% of the read-only ceiling and 5.0% of the GEMM ceiling" in expanding["why"]
    # a fused step nearer its GEMM ceiling than its read ceiling is compute-bound: fewer KV bytes gain nothing
    compute = evaluate_claims(_frame([*rec("sdpa", 8, 1e-4, 20, 60), *rec("sdpa", 1, 0.9e-4, 3, 66)], tmp_path))[3]
    assert compute["verdict"] == FAILS and "compute-bound" in compute["why"] and "3.0% and 66.0%" in compute["why"]
    # near neither ceiling: costs that do not scale with the KV bytes set the step
    neither = evaluate_claims(_frame([*rec("flex", 8, 1e-4, 70, 10), *rec("flex", 1, 0.9e-4, 30, 12)], tmp_path))[3]
    assert neither["verdict"] == FAILS and "Near neither ceiling" in neither["why"]
    # an MHA step reading faster than the read-only ceiling (its cache on chip): this length cannot decide it
    on_chip = evaluate_claims(_frame([*rec("flex", 8, 1e-4, 150, 10), *rec("flex", 1, 0.9e-4, 30, 12)],
                                     tmp_path))[3]
    assert on_chip["verdict"] == INCONCLUSIVE and "cache on-chip" in on_chip["why"] and "--decode-kv" in on_chip["why"]


def test_claims_on_the_realistic_run(realistic):
    verdicts = [c["verdict"] for c in evaluate_claims(realistic[1])]
    # its per-head cost grows below D=64; no KV measured; its synthetic decode step reads Hkv heads in both kernel
    # families; no MLA decode; no layer timed; no paged decode; no attention variant; no sparsity (two claims); no
    # trace; torch's automatic choice as fast as its forced flash kernel; no transformers path; no linear attention
    # (two claims); no shared-prefix batch; no draft verified
    assert verdicts == [FAILS, HOLDS, NOT_MEASURED, HOLDS, HOLDS, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED,
                        NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, HOLDS, NOT_MEASURED, NOT_MEASURED,
                        NOT_MEASURED, NOT_MEASURED, NOT_MEASURED]


def test_best_backend_and_headline_speedups(realistic):
    from bench.report.tables import best_backends, headline_speedups

    best = {b["family"]: b for b in best_backends(realistic[1])}
    fam = best["prefill · MHA · fp32 · causal · fwd"]
    assert fam["best"] == "sdpa-flash" and fam["wins"] == fam["shapes"] and fam["runner_up"] == "sdpa"
    head = headline_speedups(realistic[1])
    assert head[0]["phase"] == "prefill" and head[0]["backend"] == "sdpa-flash" and head[0]["geomean"] > 3


# ---- figures -------------------------------------------------------------------------------------------------

def _data_lines(ax) -> dict[str, object]:
    return {line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")}


def _statuses(fig) -> set[str]:
    return {line.get_gid() for ax in fig.axes for line in ax.lines if str(line.get_gid()).startswith("status:")}


def test_every_figure_is_drawn_from_the_realistic_run(figures):
    from bench.report.catalogue import CATALOGUE

    # the serving figures need serving batches, which this run has none of (tests/test_serving.py draws them), and
    # the variant figure variant cases (tests/test_variants.py draws it)
    assert list(figures) == [e.name for e in CATALOGUE if not e.every_row and e.name != "variant_cost"]
    for fig in figures.values():
        assert fig._suptitle is not None and fig._suptitle.get_text()


def test_throughput_figure(figures):
    from bench.backends import BACKENDS

    fig = figures["throughput"]
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 6  # 2 dtypes x 3 variants
    assert {ax.get_title().split("\n")[0] for ax in panels} == {f"{v} · {d}" for v in ("MHA", "GQA", "MQA")
                                                                for d in ("fp32", "bf16")}
    lines = _data_lines(panels[0])
    assert set(lines) == {"naive", "sdpa", "sdpa-math", "sdpa-flash", "flex"}
    for name, line in lines.items():
        assert line.get_color() == BACKENDS[name].color
    assert list(lines["naive"].get_xdata()) == [256, 512, 1024, 2048, 4096]  # 8192 was OOM
    assert panels[0].get_ylabel() == "achieved GFLOP/s"
    assert {"status:oom:naive", "status:error:flex", "status:incorrect:sdpa-math"} <= _statuses(fig)
    title = fig.legends[0].get_title().get_text()
    assert "sdpa-efficient" in title and "flash-attn" in title and "needs a CUDA device" in title
    assert "out of memory (grey band at the bottom)" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_latency_figure_carries_fitted_exponents(figures):
    ax = [a for a in figures["latency"].axes if a.get_title().startswith("MHA · fp32")][0]
    labels = {label.split()[0]: label for label in _data_lines(ax)}
    k = float(labels["naive"].split("k=")[1])
    assert k == pytest.approx(2.0, abs=0.02)  # naive's rate is flat in the synthetic run: time ∝ S^2
    assert float(labels["sdpa-flash"].split("k=")[1]) == pytest.approx(1.75, abs=0.03)
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"


def test_peak_memory_figure_has_measured_points_and_model_lines(figures):
    ax = [a for a in figures["peak_memory"].axes if a.get_title().startswith("MHA · fp32")][0]
    lines = _data_lines(ax)
    assert {"measured:naive", "model:naive", "measured:sdpa-flash", "model:sdpa-flash"} <= set(lines)
    assert lines["measured:naive"].get_linestyle() == "None" and lines["model:naive"].get_linestyle() == "-"
    assert ax.get_yscale() == "log"


def test_heads_figure(figures):
    fig = figures["heads_sweep"]
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split(" ")[0] for ax in panels] == ["S=1k", "S=4k"]
    lines = _data_lines(panels[0])
    assert set(lines) == {"naive", "sdpa", "sdpa-flash"}
    assert list(lines["sdpa"].get_xdata()) == [1, 2, 4, 8, 16, 32]
    assert "d_model=512" in fig._suptitle.get_text()


def test_kv_cache_figure(figures):
    from bench.models.presets import PRESETS

    left, right = figures["kv_cache"].axes[:2]
    labels = " ".join(_data_lines(left))
    for p in PRESETS.values():
        assert (p.name in labels) != p.encoder_only
    assert any("device memory (16 GiB)" in label for label in _data_lines(right))
    mha, gqa, mqa = (line for label, line in _data_lines(right).items() if "Hkv=" in label)
    assert mha.get_ydata()[0] / gqa.get_ydata()[0] == 4 and mha.get_ydata()[0] / mqa.get_ydata()[0] == 32


def test_decode_figure(figures):
    panels = [ax for ax in figures["decode"].axes if ax.get_title()]
    assert len(panels) == 6
    lines = _data_lines(panels[0])
    assert set(lines) == {"naive", "sdpa", "sdpa-flash"}
    assert list(lines["sdpa"].get_xdata()) == [512, 1024, 2048, 4096, 8192, 16384]


def test_speedup_heatmap(figures):
    fig = figures["speedup"]
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 6
    ax = [a for a in panels if a.get_title().startswith("GQA · bf16")][0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["sdpa", "sdpa-math", "sdpa-flash", "flex"]
    texts = [t.get_text() for t in ax.texts]
    assert "wrong" in texts and "naive\nOOM" in texts and "1.2×" in texts
    assert "sdpa-efficient" in fig._supxlabel.get_text()


def test_roofline(figures):
    ax = figures["roofline"].axes[0]
    lines = _data_lines(ax)
    assert lines["ceiling:gemm"].get_ydata()[0] == pytest.approx(195)  # GFLOP/s
    assert {"sdpa-flash:prefill:fp32", "sdpa-flash:decode:fp32", "naive:prefill:fp32"} <= set(lines)
    assert ax.get_xscale() == "log" and "GFLOP/s" in ax.get_ylabel()


def test_figures_without_their_data_are_skipped(tmp_path):
    from bench.report.figures import make_figures

    only_prefill = _frame([make_record("naive", seq=s) for s in (256, 512)], tmp_path)
    made = make_figures(only_prefill)
    assert "decode" not in made and "heads_sweep" not in made and "kv_cache" in made and "throughput" in made
    assert "speedup" not in made  # nothing but naive: no speedup to show
    nothing_ran = _frame([make_record("flex", status="unsupported")], tmp_path)
    assert set(make_figures(nothing_ran)) == {"kv_cache"}


# ---- rendering -----------------------------------------------------------------------------------------------

EVIL = "<script>alert(1)</script>"


def test_report_folder_from_a_realistic_run(realistic, realistic_report):
    index = realistic_report
    out = index.parent
    page = index.read_text()
    md = (out / "report.md").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 8
    assert page.count('src="data:image/png;base64,') == 8
    # self-contained: no address outside the embedded images (whose base64 may spell "http" by chance)
    text = re.sub(r'data:image/png;base64,[A-Za-z0-9+/=]+', "", page).replace("http-equiv", "")
    assert "http" not in text
    for name in pngs:  # GitHub shows the Markdown with the PNGs beside it
        assert f"]({name})" in md
    # opens with its answers (a line per claim, the summary, each claim's section, the best backends), then the
    # environment, then the figures no claim's section shows
    order = [md.index(h) for h in ("## Answers", "## Summary", "## Claims", "## Best backends", "## Environment",
                                   "## Figures")]
    assert order == sorted(order) and md.index("## Answers") == md.index("\n## ") + 1  # the first section
    assert "| [Heads are a free lunch" in md and "](#claim-heads) | **" in md and "**holds**" in md
    # every answer links to its claim's section, in HTML as in Markdown
    for s in CLAIMS:
        assert f'href="#claim-{s.key}"' in page and f'id="claim-{s.key}"' in page
        assert f"](#claim-{s.key})" in md and f'<a id="claim-{s.key}"></a>' in md
    import pandas as pd

    tidy = pd.read_csv(out / "tidy.csv")
    assert len(tidy) == len(realistic[1]) and list(tidy.columns) == list(COLUMNS)


def test_claims_csv_holds_each_claim_s_conditions_as_data_and_the_closing_summary_reads_the_same_rows(
        realistic, realistic_report):
    import pandas as pd

    from bench.claims import verdicts
    from bench.report.summary import summary_lines

    claims = pd.read_csv(realistic_report.parent / "claims.csv")
    frame, info = read_results(realistic[0])
    judged = verdicts(frame, info.meta)
    assert list(claims["claim"].unique()) == [s.key for s in CLAIMS]  # every claim, in report order
    for v in judged:  # a row per condition, a claim without one a row of its own
        mine = claims[claims["claim"] == v.key]
        assert len(mine) == max(1, len(v.conditions)) and set(mine["claim_verdict"]) == {v.verdict}
        for c, (_, row) in zip(v.conditions, mine.iterrows(), strict=bool(v.conditions)):
            assert row["ratio"] == pytest.approx(c.ratio) and row["unit"] == c.unit and row["word"] == c.verdict
            assert row["bound"] == pytest.approx(c.bound) and row["basis"] == c.basis
            assert all(row[f] == (pytest.approx(value) if isinstance(value, (int, float)) else value)
                       for f, value in c.key)  # one column per key field
    assert {"low", "high", "fail_bound", "holds", "blocks", "at_bound", "judged_on"} <= set(claims.columns)
    lines = summary_lines(realistic[0])
    for v in judged:
        line = next(line for line in lines if spec(v.key).text in line)
        assert line.split()[0] == v.verdict.split()[0]


def test_no_table_cell_says_more_than_a_sentence(tmp_path):
    """The example run of the repository, rendered: every table cell is within CELL_LIMIT characters (the rest is a
    paragraph), and the report's first block after its title is the answers' table."""
    from bench.report.blocks import CELL_LIMIT, Beside, Fold, Link, Table
    from bench.report.document import build

    def tables(blocks):
        for b in blocks:
            if isinstance(b, Table):
                yield b
            elif isinstance(b, (Fold, Beside)):
                yield from tables(b.blocks if isinstance(b, Fold) else (*b.main, *b.aside))

    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "results" / "example").glob("*.json")):
        blocks = build(load_results([path]), {})
        assert [b.text for b in blocks[:2]] == [blocks[0].text, "Answers"], path.name
        cells = [(len(c.text if isinstance(c, Link) else c), c) for t in tables(blocks) for r in t.rows for c in r]
        cells += [(len(h), h) for t in tables(blocks) for h in t.headers]
        longest = max(cells, key=lambda lc: lc[0])
        assert longest[0] <= CELL_LIMIT, (path.name, longest)


def test_a_report_of_several_runs_opens_with_their_verdicts_side_by_side_and_has_each_section_once(tmp_path):
    from bench.report.document import build

    root = Path(__file__).resolve().parents[1] / "results" / "example"
    loaded = load_results([root / "20261206-053602-default-cpu.json", root / "20261203-074230-sparse-cpu.json"])
    blocks = build(loaded, {})
    answers = blocks[2]  # the title, the answers' heading, its sentence, then its table
    table = blocks[3]
    assert [r.run_id for r in loaded.runs] == [h.split(" (")[0] for h in table.headers[1:3]]
    assert table.headers[-1] == "verdicts" and table.verdict_columns == (1, 2)
    heads = next(r for r in table.rows if r[0].anchor == "claim-heads")
    assert heads[1:] == [NOT_MEASURED, FAILS, ""]  # a run that did not measure it differs from none
    marked = [r for r in table.rows if r[-1]]
    assert all(len({*r[1:3]} - {NOT_MEASURED}) == 2 for r in marked)
    assert answers.text == (f"The runs' verdicts differ on {len(marked)} of {len(CLAIMS)} claims (marked)." if marked
                            else "Where the runs measured a claim, they read it alike.")
    headings = [b.text for b in blocks if getattr(b, "level", 0) == 2]
    assert len(headings) == len(set(headings))  # each section once, the runs inside it
    claims = [b.text for b in blocks if getattr(b, "anchor", "")]
    assert claims == [s.text for s in CLAIMS]


def test_results_text_cannot_inject_markup(tmp_path):
    from bench.report import build_report

    recs = [make_record("naive", seq=s, median_s=1e-3 * s / 256) for s in (256, 1024)]
    recs += [make_record(EVIL, seq=s, median_s=5e-4 * s / 256, reason=EVIL) for s in (256, 1024)]
    recs += [make_record("sdpa", seq=1024, status="error", reason=f"error: {EVIL} $x^$ \" ' & |")]
    run = make_run(recs, run_id=f"../../{EVIL}", fingerprint={"cpu_model": EVIL})
    run["machine_info"]["attnbench"]["allocator"] = {"LD_PRELOAD": EVIL}
    index = build_report([write(tmp_path / "evil.json", run)], tmp_path / "out")
    page = index.read_text()
    assert "<script" not in page.lower()  # the report itself has no script, so any would come from the data
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    md = (tmp_path / "out" / "report.md").read_text()
    assert "<script" not in md.lower() and "&lt;script&gt;" in md
    assert all(line.count("|") >= 2 for line in md.splitlines() if line.startswith("| error"))


def test_default_folder_is_reports_run_id_and_never_escapes_it(tmp_path, monkeypatch):
    from bench.report import build_report

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "a.json", make_run([make_record()], run_id="../../etc/x y"))
    index = build_report([path])
    assert index.resolve().parent.parent == (tmp_path / "reports").resolve()
    assert index.parent.name == "etc-x-y"


def test_several_runs_get_a_comparison_and_a_combined_id(tmp_path, monkeypatch):
    from bench.report import build_report

    monkeypatch.chdir(tmp_path)
    a = write(tmp_path / "a.json", make_run([make_record(median_s=1e-3), make_record("naive", median_s=4e-3)],
                                            run_id="cpu-run", fingerprint={"cpu_model": "EPYC"}))
    b_doc = make_run([make_record(median_s=2e-3), make_record("naive", median_s=4e-3)], run_id="new-run",
                     fingerprint={"cpu_model": "EPYC 2"})
    b_doc["datetime"] = "2026-12-01T00:00:00"
    b = write(tmp_path / "b.json", b_doc)
    index = build_report([b, a])
    assert index.parent == Path("reports") / "compare-cpu-run-new-run"
    md = (index.parent / "report.md").read_text()
    assert "## Comparison of runs" in md and "new-run / cpu-run" in md
    row = next(line for line in md.splitlines() if line.startswith("| sdpa: prefill"))
    assert "1 ms" in row and "2 ms" in row and "2.00×" in row
    assert (index.parent / "run1-throughput.png").exists() and (index.parent / "run2-throughput.png").exists()


def test_cli(tmp_path, capsys):
    from bench.cli import main

    good = write(tmp_path / "good.json", make_run([make_record()]))
    (tmp_path / "bad.json").write_text("{")
    assert main(["report", str(good), str(tmp_path / "bad.json"), "--out", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(tmp_path / "r" / "index.html")
    assert "bad.json" in captured.err and "not valid JSON" in captured.err
    assert main(["report", str(tmp_path / "bad.json"), str(tmp_path / "none.json"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "none.json" in err and not (tmp_path / "x").exists()


# ---- in a browser --------------------------------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.slow  # a headless chromium: tens of seconds on a loaded machine
@pytest.mark.browser
def test_report_renders_in_a_browser(realistic_report, tmp_path):
    import os
    import subprocess

    if not CHROMIUM.exists():
        # CI (CI=true) installs chromium in .ci/run: a missing browser there is a broken install, not a skip.
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(f"CI is set but {CHROMIUM} is missing: the browser test must run in CI")
        pytest.skip(f"needs {CHROMIUM}")

    index = realistic_report
    shot = tmp_path / "shot.png"
    subprocess.run([str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={shot}", "--window-size=1280,4000", index.as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 50_000  # a blank page compresses to a few kB

    # The report allows no script (CSP); a copy without the CSP gets a probe that writes every image's
    # decoded width into the DOM, which --dump-dom then prints.
    page = index.read_text()
    page = page.replace(page[page.index('<meta http-equiv="Content-Security-Policy"'):page.index('<meta name=')], "")
    probe = ("<script>window.addEventListener('load', () => { document.body.dataset.widths = "
             "[...document.images].map(i => i.complete ? i.naturalWidth : 0).join(','); });</script>")
    probed = tmp_path / "probe.html"
    probed.write_text(page.replace("</body>", probe + "</body>"))
    dom = subprocess.run([str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile2'}",
                          "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    widths = [int(w) for w in re.search(r'data-widths="([\d,]*)"', dom).group(1).split(",")]
    assert len(widths) == 8 and all(w > 0 for w in widths)


def test_noisy_timings_are_drawn_hollow_and_counted_in_the_claims(tmp_path):
    from bench.report.figures import make_figures

    recs = [make_record("sdpa", 8, hkv, 4096, phase="decode", median_s=t, noisy=hkv == 2)
            for hkv, t in ((8, 3e-3), (2, 1e-3))]
    recs += [make_record("sdpa", seq=s, median_s=1e-3 * s / 256, noisy=s == 512) for s in (256, 512, 1024)]
    df = _frame(recs, tmp_path)
    fig = make_figures(df)["throughput"]
    assert {line.get_gid() for ax in fig.axes for line in ax.lines} >= {"noisy:sdpa"}
    assert "hollow: timing flagged noisy" in [t.get_text() for t in fig.legends[0].get_texts()]
    assert "1 of 2 timings behind this are flagged noisy" in evaluate_claims(df)[3]["numbers"]


def test_speedup_heatmap_marks_a_length_a_backend_never_ran_as_not_run(tmp_path):
    from bench.report.figures.speedup import speedup_heatmap

    recs = [make_record("naive", seq=s, median_s=4e-3) for s in (512, 1024, 2048)]
    recs += [make_record("sdpa-flash", seq=s, median_s=1e-3) for s in (512, 1024)]  # none at 2048
    ax = next(a for a in speedup_heatmap(_frame(recs, tmp_path)).axes if a.get_title())
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["4×", "4×", "not run"] and len(ax.patches) == 1  # the empty cell is hatched, not blank


def test_roofline_draws_each_dtypes_ceiling_and_says_why_a_point_sits_above_its_own(tmp_path):
    from bench.report.figures.speed import roofline

    def at(flops_per_s: float, **kw) -> dict:
        rec = make_record("sdpa", **kw)
        return make_record("sdpa", median_s=rec["flops"] / flops_per_s, **kw)

    recs = [at(1e10, phase="decode", seq=1024),  # intensity 0.5: above the 5 GFLOP/s copy roof, its 4 MB cached
            at(5e9, dtype="bf16", seq=1024),  # above bf16's 1 GFLOP/s, under fp32's 100: computes in fp32
            at(3e11, seq=2048)]  # above everything
    doc = make_run(recs, calibration={"gemm_flops_per_s": 1e11, "gemm_flops_per_s_bf16": 1e9,
                                      "copy_bytes_per_s": 1e10})
    doc["machine_info"]["attnbench"]["llc_bytes"] = 32 * 2**20
    ax = roofline(read_results(write(tmp_path / "r.json", doc))[0]).axes[0]
    lines = _data_lines(ax)
    assert lines["ceiling:gemm"].get_ydata()[0] == pytest.approx(100)  # GFLOP/s
    assert lines["ceiling:gemm:bf16"].get_ydata()[0] == pytest.approx(1)
    note = " ".join(next(t.get_text() for t in ax.texts if "above" in t.get_text()).split())  # unwrapped
    assert note.startswith("3 point(s) above their dtype's ceiling")
    assert "1 whose bytes fit in the 32 MiB last-level cache" in note
    assert "1 in bf16 under fp32's ceiling" in note and "1 beyond every ceiling (a calibration taken on a busy" in note


def test_comparison_pairs_only_the_cases_the_runs_share(tmp_path):
    """Runs sharing one case among many others: the table holds that case alone, built from the pairs present (a
    product over every shape field's values would not fit in memory)."""
    from types import SimpleNamespace

    from bench.report.sections.comparison import section

    own = {"a": [make_record(seq=s, batch=b, median_s=1e-3) for s in (64, 128, 256) for b in (1, 2, 3)],
           "b": [make_record(n_heads=h, n_kv_heads=h, median_s=1e-3) for h in (2, 4, 16)]}
    runs = [make_run([make_record(median_s=1e-3), *own["a"]], run_id="a"),
            make_run([make_record(median_s=3e-3), *own["b"]], run_id="b")]
    paths = [write(tmp_path / f"{name}.json", r) for name, r in zip("ab", runs, strict=True)]
    frame = load_results(paths).frame
    report = SimpleNamespace(several=True, frame=frame, runs=[SimpleNamespace(run_id=r, machine="m") for r in "ab"])
    table = section(report)[-1]
    assert len(table.rows) == 1 and table.rows[0][-1] == "3.00×"
