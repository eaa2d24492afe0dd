"""This machine's ceilings, measured in the same run as the attention cases: a GEMM for FLOP/s and a
copy for bytes/s (read + write counted, as attention's byte model counts reads and writes)."""

from __future__ import annotations

import torch

from bench.measure.stats import summarize
from bench.measure.timer import measure

# Published dense peaks (no sparsity), FLOP/s for bf16/fp16 tensor cores, by substring of the GPU name.
SPEC_FLOPS = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12}


def _time(fn, device: str) -> float:
    _, timing = measure(fn, device, budget_s=2.0)
    return summarize(timing.samples).median


def gemm_flops_per_s(device: str) -> float:
    """fp32 2048^3 on CPU, bf16 8192^3 on CUDA (the dtype attention runs in there)."""
    n, dtype = (8192, torch.bfloat16) if device == "cuda" else (2048, torch.float32)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n**3 / _time(lambda: a @ b, device)


def copy_bytes_per_s(device: str) -> float:
    size = (1 << 31) if device == "cuda" else (1 << 28)
    src = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    return 2 * size / _time(lambda: dst.copy_(src), device)


def calibrate(device: str) -> dict[str, float]:
    return {"gemm_flops_per_s": gemm_flops_per_s(device), "copy_bytes_per_s": copy_bytes_per_s(device)}


def spec_flops(gpu_name: str | None) -> float | None:
    for key, value in SPEC_FLOPS.items():
        if gpu_name and key in gpu_name:
            return value
    return None
