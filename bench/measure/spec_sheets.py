"""GPUs' published peaks (their spec sheets): the report's and the roofline's reference, and the ceilings a run on a
GPU that is not here is planned from (`bench run --plan --gpu NAME`). Plain data: no torch."""

from __future__ import annotations

from dataclasses import dataclass

from bench.errors import UsageError
from bench.measure.ceilings import Calibration


@dataclass(frozen=True)
class SpecSheet:
    name: str  # the key that matched the GPU's name
    flops_per_s: float  # dense bf16/fp16 tensor-core peak
    bytes_per_s: float  # memory bandwidth
    source: str


# Published peaks (dense, no sparsity). The lookup takes the longest key found in the GPU's name, so "H100 NVL"
# and "H100 PCIe" are never read as "H100", nor "L40S" as "L4".
SPEC_SHEETS = {s.name: s for s in (
    SpecSheet("H200", 989e12, 4.8e12, "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    SpecSheet("H200 NVL", 835e12, 4.8e12, "NVIDIA H200 Tensor Core GPU datasheet (NVL)"),
    SpecSheet("H100", 989e12, 3.35e12, "NVIDIA H100 Tensor Core GPU datasheet (SXM)"),
    SpecSheet("H100 PCIe", 756e12, 2.0e12, "NVIDIA H100 Tensor Core GPU datasheet (PCIe)"),
    SpecSheet("H100 NVL", 835e12, 3.9e12, "NVIDIA H100 Tensor Core GPU datasheet (NVL)"),
    SpecSheet("A100", 312e12, 1.555e12, "NVIDIA A100 Tensor Core GPU datasheet (40GB)"),
    SpecSheet("A100-SXM4-80GB", 312e12, 2.039e12, "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)"),
    SpecSheet("A100 80GB PCIe", 312e12, 1.935e12, "NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe)"),
    SpecSheet("L40S", 362e12, 0.864e12, "NVIDIA L40S datasheet"),
    SpecSheet("L4", 121e12, 0.3e12, "NVIDIA L4 Tensor Core GPU datasheet"),
    SpecSheet("A10G", 70e12, 0.6e12, "AWS EC2 G5 instance specification (A10G)"),
)}


def spec_sheet(gpu_name: str | None) -> SpecSheet | None:
    """The most specific spec-sheet entry whose name is in the GPU's name, or None."""
    found = [s for name, s in SPEC_SHEETS.items() if gpu_name and name in gpu_name]
    return max(found, key=lambda s: len(s.name)) if found else None


# A GPU that is not here is planned from its spec sheet at the shares measured on one: an H200's bf16 GEMM reached
# ~80% of its datasheet peak, its device copy ~90% of the bandwidth.
SPEC_GEMM_SHARE, SPEC_COPY_SHARE, SPEC_READ_SHARE = 0.8, 0.9, 0.94


def spec_calibration(gpu_name: str) -> Calibration:
    """Ceilings for planning a run on a GPU that is not here (`bench run --plan --gpu NAME`), from its spec sheet:
    bf16/fp16 at SPEC_GEMM_SHARE of the tensor-core peak, fp32 (TF32-free) at a sixteenth of it."""
    sheet = spec_sheet(gpu_name)
    if sheet is None:
        raise UsageError(f"--gpu {gpu_name!r}: no spec sheet; known: {', '.join(SPEC_SHEETS)}")
    half = SPEC_GEMM_SHARE * sheet.flops_per_s
    return Calibration(half, SPEC_COPY_SHARE * sheet.bytes_per_s, SPEC_READ_SHARE * sheet.bytes_per_s,
                       {"bf16": half, "fp16": half, "fp32": half / 16},
                       notes=(f"planned from the {sheet.name} spec sheet ({sheet.source}), not measured",))
