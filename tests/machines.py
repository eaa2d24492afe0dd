"""Machines the planner and the report are tested on, as their ceilings (bench.results.meta.Calibration)."""

from __future__ import annotations

from bench.results.meta import Calibration

# An AVX2-only EPYC as measured: bf16 GEMM at ~1% of fp32's, so bf16 is emulated
EPYC_DICT = {"gemm_flops_per_s": 117e9, "gemm_flops_per_s_fp32": 117e9, "gemm_flops_per_s_bf16": 1.3e9,
             "copy_bytes_per_s": 23e9, "read_bytes_per_s": 30e9, "emulated": ["bf16"]}
EPYC = Calibration.from_dict(EPYC_DICT)
