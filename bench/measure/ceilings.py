"""This machine's ceilings (Calibration): what a run measures of its device before its cases (bench.measure.calibrate)
or takes from a spec sheet, and every layer reads: the guards' floors, the cost model, the roofline. A plain typed
value, free of torch, read and written as a dict only at the file's edge (bench.results.meta.RunMeta holds it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GEMM_PREFIX = "gemm_flops_per_s_"  # a GEMM ceiling per dtype is stored under this prefix and the dtype's name


@dataclass(frozen=True)
class Calibration:
    """This machine's ceilings, measured in the run (bench.measure.calibrate) or taken from a spec sheet.

    gemm_flops_per_s is the device's main dtype (fp32 on CPU, bf16 on CUDA), the regression check's in-run control;
    gemm_by_dtype the GEMM ceiling in each dtype the sweep uses. Every figure may be absent in an old or pooled
    file (None), never in a run's own."""

    gemm_flops_per_s: float | None = None
    copy_bytes_per_s: float | None = None
    read_bytes_per_s: float | None = None  # a read-only sum: the ceiling a read-mostly decode step is judged against
    gemm_by_dtype: Mapping[str, float] = field(default_factory=dict)
    emulated: tuple[str, ...] = ()  # dtypes this CPU has no hardware path for (GEMM far below the main dtype's)
    notes: tuple[str, ...] = ()  # what was measured otherwise than planned
    other: Mapping[str, Any] = field(default_factory=dict)  # keys of other versions, kept as they were

    def __post_init__(self) -> None:
        object.__setattr__(self, "gemm_by_dtype", dict(self.gemm_by_dtype))  # a copy: the caller's stays theirs
        object.__setattr__(self, "emulated", tuple(self.emulated))
        object.__setattr__(self, "notes", tuple(self.notes))

    def gemm(self, dtype: str | None = None) -> float | None:
        """The GEMM ceiling in `dtype`, else the main dtype's."""
        return self.gemm_by_dtype.get(dtype or "") or self.gemm_flops_per_s

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Calibration:
        def number(key: str) -> float | None:
            value = d.get(key)
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        named = {"gemm_flops_per_s", "copy_bytes_per_s", "read_bytes_per_s", "emulated", "notes"}
        gemms = {k[len(GEMM_PREFIX):]: float(v) for k, v in d.items()
                 if k.startswith(GEMM_PREFIX) and isinstance(v, (int, float)) and not isinstance(v, bool)}
        return cls(number("gemm_flops_per_s"), number("copy_bytes_per_s"), number("read_bytes_per_s"), gemms,
                   tuple(d.get("emulated") or ()), tuple(d.get("notes") or ()),
                   {k: copy.deepcopy(v) for k, v in d.items() if k not in named and not k.startswith(GEMM_PREFIX)})

    def to_dict(self) -> dict[str, Any]:
        """The file's layout: gemm_flops_per_s, copy_bytes_per_s, read_bytes_per_s, gemm_flops_per_s_<dtype>,
        emulated, notes (absent figures left out)."""
        out: dict[str, Any] = {k: v for k, v in (("gemm_flops_per_s", self.gemm_flops_per_s),
                                                 ("copy_bytes_per_s", self.copy_bytes_per_s),
                                                 ("read_bytes_per_s", self.read_bytes_per_s)) if v is not None}
        out |= {GEMM_PREFIX + dtype: v for dtype, v in self.gemm_by_dtype.items()}
        out |= {"emulated": list(self.emulated), "notes": list(self.notes)} | dict(self.other)
        return out

    def __bool__(self) -> bool:
        """Whether anything was measured (an old or broken file's section may hold nothing)."""
        return any(v is not None for v in (self.gemm_flops_per_s, self.copy_bytes_per_s, self.read_bytes_per_s)) \
            or bool(self.gemm_by_dtype)
