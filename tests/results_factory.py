"""Builds synthetic results documents in the engine's format, for tests of the readers."""

from __future__ import annotations

import random

from bench.results import SCHEMA
from bench.results.record import RECORD_FIELDS

FINGERPRINT = {"device": "cpu", "cpu_model": "Test CPU", "gpu_name": None, "torch": "2.13.0+cpu", "cuda": None,
               "threads": 2}


def make_record(backend="sdpa", n_heads=8, n_kv_heads=8, seq=512, status="ok", median_s=1e-3, phase="prefill",
                pass_="fwd", dtype="fp32", mask="causal", device="cpu", batch=1, head_dim=64, rounds=20,
                spread=0.02, seed=0, **overrides) -> dict:
    """One case: record fields (all of RECORD_FIELDS) plus 'samples', raw round times around median_s."""
    variant = "mha" if n_kv_heads == n_heads else ("mqa" if n_kv_heads == 1 else "gqa")
    seq_q = 1 if phase == "decode" else seq
    case_id = (f"{backend}/{variant}/b{batch}-hq{n_heads}-hkv{n_kv_heads}-q{seq_q}-kv{seq}-d{head_dim}/{dtype}/"
               f"{mask}/{phase}/{pass_}/{device}")
    rng = random.Random(f"{case_id}-{seed}")
    ok = status == "ok"
    samples = [median_s * (1 + rng.uniform(-spread, spread)) for _ in range(rounds)] if ok else []
    flops = 4 * batch * n_heads * head_dim * seq_q * seq
    rec = dict.fromkeys(RECORD_FIELDS)
    rec.update(case_id=case_id, status=status, reason="" if ok else f"{status}: synthetic", backend=backend,
               variant=variant, n_heads=n_heads, n_kv_heads=n_kv_heads, seq_q=seq_q, seq_kv=seq, batch=batch,
               head_dim=head_dim, dtype=dtype, mask=mask, window=None, phase=phase, device=device, flops=flops,
               bytes=4 * batch * head_dim * (2 * n_heads * seq_q + 2 * n_kv_heads * seq),
               tflops=flops / median_s / 1e12 if ok else None, tokens_per_s=batch * seq_q / median_s if ok else None,
               peak_mem_bytes=batch * n_heads * seq_q * seq * 4 if ok else None, max_abs_err=1e-6 if ok else None,
               median_s=median_s if ok else None, rounds=len(samples), noisy=False, threads=2, samples=samples)
    rec["pass"] = pass_
    rec.update(overrides)
    return rec


def make_run(records: list[dict], run_id="run-a", profile="quick", fingerprint=None, calibration=None,
             complete=True) -> dict:
    """A whole results document as the engine writes it (stats.data holds the raw samples)."""
    benchmarks, untimed = [], []
    for rec in records:
        rec = dict(rec)
        samples = rec.pop("samples")
        stats = None
        if samples:
            ordered = sorted(samples)
            stats = {"min": ordered[0], "max": ordered[-1], "mean": sum(samples) / len(samples),
                     "median": ordered[len(ordered) // 2], "rounds": len(samples), "iterations": 1,
                     "data": samples}
        (benchmarks if stats else untimed).append({"group": None, "name": f"test_attention[{rec['case_id']}]",
                           "fullname": f"bench/suite/test_attention.py::test_attention[{rec['case_id']}]",
                           "params": {"case": rec["case_id"]}, "param": rec["case_id"], "extra_info": rec,
                           "options": {}, "stats": stats})
    fp = dict(FINGERPRINT, **(fingerprint or {}))
    return {
        "machine_info": {"node": "test", "attnbench": {"torch": fp["torch"], "cpu_model": fp["cpu_model"]}},
        "commit_info": {},
        "benchmarks": benchmarks,
        "datetime": "2026-11-29T08:00:00",
        "version": "5.3.1",
        "attnbench": {"schema": SCHEMA, "run_id": run_id, "profile": profile, "sweep_id": "synthetic",
                      "complete": complete, "fingerprint": fp, "untimed": untimed,
                      "calibration": calibration or {"gemm_flops_per_s": 1.95e11, "copy_bytes_per_s": 6.3e10}},
    }
