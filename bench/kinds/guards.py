"""What keeps a kernel from fooling the timer, for every backend (built-in or from outside):

- the inputs of the timed call are the same after the timed rounds as before them (a kernel writing into q, k or
  v would be timed on other inputs than the case's, and corrupts a model's activations);
- the output of the last timed call still matches the reference (a kernel whose state drifts, or that hands back an
  output computed for other inputs, is caught);
- the median is not below the case's physical floor (`implausible`): a cached output or skipped work is caught.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bench.measure.ceilings import Calibration
from bench.reference import compare_to_reference

# How far below a floor a median may sit before it is implausible, and why that far:
# FLOPs / the run's measured GEMM ceiling: no kernel does useful attention FLOPs faster than the machine's best GEMM,
#   but the ceiling is measured once per run, possibly while other jobs share the cores (on a busy 2-core machine
#   medians moved by up to ~3x between runs) and on CUDA a GEMM reaches ~70-80% of the tensor cores' peak; 8x covers
#   both with room, while a cached output or skipped computation sits 10-1000x below.
# Bytes / the measured read ceiling: that ceiling is a buffer far larger than any cache, and a case's inputs may sit
#   in L1/L2 (CPU caches read ~10-20x faster than DRAM; an H100's L2 ~3-4x HBM); 32x covers cache-resident inputs
#   with another ~2x for a loaded calibration.
FLOP_MARGIN = 8.0
BYTE_MARGIN = 32.0


class TimedGuard:
    """The timed call's inputs as they were, its last output, and how to compute the reference for them."""

    def __init__(self, inputs: dict[str, torch.Tensor],
                 reference: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None,
                 out_shape: tuple[int, ...] | None = None) -> None:
        self.inputs = inputs
        self.out_shape = tuple(inputs["q"].shape) if out_shape is None else tuple(out_shape)  # MLA: D_v != D_qk
        self.before = {name: t.detach().clone() for name, t in inputs.items()}
        self.reference = reference  # None: the case is too large for a float64 reference, or has no single output
        self.last: Any = None

    def keep(self, out: Any) -> Any:
        self.last = out
        return out

    def verdict(self) -> str | None:
        """Why the timed rounds cannot be trusted, or None."""
        changed = [name for name, t in self.inputs.items() if not torch.equal(t.detach(), self.before[name])]
        if changed:
            return (f"the kernel wrote into its input{'s' if len(changed) > 1 else ''} {', '.join(changed)} during the "
                    "timed rounds: they were timed on other inputs than the case's")
        if self.reference is None or not isinstance(self.last, torch.Tensor):
            return None
        if tuple(self.last.shape) != self.out_shape:
            return f"the last timed call returned shape {tuple(self.last.shape)}, not {self.out_shape}"
        check = compare_to_reference(self.last, self.reference(self.before))
        if not check.ok:
            return f"the last timed call's output no longer matches the reference: {check.describe()}"
        return None


def implausible(median: float | None, flops: float | None, bytes_: float | None, dtype: str,
                calibration: Calibration) -> str | None:
    """'implausible: ...' when a case's median is below its physical floor (its FLOPs and bytes at the measured
    ceilings) by more than its margin, else None.

    Only when this run measured the case's dtype (calibrate measures a GEMM per dtype and the read ceiling),
    and then against the machine's fastest GEMM in any dtype: a kernel may compute in another dtype than its
    inputs' (torch's CPU SDPA runs bf16 attention through fp32, far above a CPU's emulated bf16 GEMM), but none
    does attention's FLOPs faster than the machine's best GEMM."""
    if not median:
        return None
    floors = []
    gemms = {dtype: v for dtype, v in calibration.gemm_by_dtype.items() if v > 0}
    if dtype in gemms and flops:
        best = max(gemms, key=gemms.get)
        floors.append((flops / gemms[best], FLOP_MARGIN, f"{flops / 1e6:.3g} MFLOP at the "
                       f"machine's best measured GEMM ceiling ({best}) {gemms[best] / 1e9:.3g} GFLOP/s"))
    read = calibration.read_bytes_per_s
    if read and bytes_:
        floors.append((bytes_ / read, BYTE_MARGIN, f"{bytes_ / 1e6:.3g} MB at the measured read "
                       f"ceiling {read / 1e9:.3g} GB/s"))
    for floor, margin, what in floors:
        if median * margin < floor:
            return (f"implausible: median {median * 1e6:.3g} us is {floor / median:.3g}x below the floor "
                    f"{floor * 1e6:.3g} us ({what}; margin {margin:g}x): a cached output or skipped work")
    return None
