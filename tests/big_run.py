"""A synthetic results file of a whole profile (the `full` one is 10,752 cases), for timing `bench report` and
`bench compare` at the size of a full sweep: `python -m tests.big_run OUT.json [--profile full] [--seed 0]
[--devices cuda:0,cuda:1]`. Times follow each case's FLOPs at a per-backend speed, with noise; a few statuses
other than ok (unsupported flash-attn, oom for the materialising backends at long S) are mixed in."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from bench.backends import BACKENDS
from bench.engine import sweeps
from bench.results import write_atomic
from bench.results.record import new_record
from tests.results_factory import make_run

SPEED = {"naive": 2e10, "sdpa": 6e10, "sdpa-math": 2.5e10, "sdpa-flash": 6e10, "sdpa-efficient": 5e10,
         "sdpa-cudnn": 7e10, "flex": 7e10, "flash-attn": 8e10}


def big_run(profile: str = "full", device: str = "cpu", seed: int = 0, devices: list[str] | None = None,
            rounds: int = 15) -> dict:
    rng = random.Random(seed)
    records = []
    for i, case in enumerate(sweeps.cases(sweeps.profile(profile, device), device)):
        rec = new_record(case, BACKENDS[case.backend].memory).to_dict()  # the file's form, filled in below
        if devices:
            rec["ran_on"] = devices[i % len(devices)]
        s = case.shape
        if case.backend == "flash-attn" and device == "cpu":
            rec.update(status="unsupported", reason="flash-attn needs CUDA")
        elif BACKENDS[case.backend].memory == "materialising" and s.seq_q * s.seq_kv * s.batch >= 2 ** 27:
            rec.update(status="oom", reason="synthetic oom")
        else:
            median = rec["flops"] / SPEED[case.backend] * rng.lognormvariate(0, 0.1)
            samples = [median * (1 + rng.uniform(-0.03, 0.03)) for _ in range(rounds)]
            rec.update(status="ok", median_s=median, ci_low_s=median * 0.99, ci_high_s=median * 1.01,
                       iqr_s=median * 0.02, rounds=rounds, noisy=False, tflops=rec["flops"] / median / 1e12,
                       tokens_per_s=s.batch * s.seq_q / median, gb_per_s=rec["bytes"] / median / 1e9,
                       peak_mem_bytes=rec["model_mem_bytes"], max_abs_err=1e-6, first_call_s=median,
                       timer="perf_counter", calls_per_round=1)
            rec["samples"] = samples
        rec.setdefault("samples", [])
        records.append(rec)
    doc = make_run(records, run_id=f"big-{profile}-{seed}", profile=profile)
    doc["attnbench"]["cases"] = len(records)
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--profile", default="full")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", default=None, help="name each record's device, round robin")
    args = parser.parse_args()
    doc = big_run(args.profile, args.device, args.seed, args.devices.split(",") if args.devices else None)
    write_atomic(args.out, doc)
    print(f"{args.out}: {len(doc['benchmarks']) + len(doc['attnbench']['untimed'])} cases")


if __name__ == "__main__":
    main()
