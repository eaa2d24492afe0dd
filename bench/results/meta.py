"""What a run records about itself beside its cases: the run's metadata (RunMeta, the results file's `attnbench`
section), the machine's ceilings among it (bench.measure.ceilings.Calibration). Plain typed values, read and written
as dicts only at the file's (and the worker pipe's) edge, free of torch.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields
from typing import Any

from bench.measure.ceilings import Calibration

SCHEMA = 1


@dataclass
class RunMeta:
    """The run's own section (`attnbench`): what the run was and what it measured of the machine. The one run
    metadata type: the results store writes it, compare heads its verdict table with it, the report's RunInfo and
    the claims read it."""

    schema: int = SCHEMA
    run_id: str | None = None
    profile: str | None = None
    sweep_id: str | None = None
    complete: bool | None = False
    axes: dict | None = None
    cases: int | None = None  # cases of the sweep (or shard), finished or not
    calibration: Calibration = field(default_factory=Calibration)  # this machine's ceilings at the start of the run
    calibration_end: Calibration | None = None  # and at its end: the regression check's in-run control
    fingerprint: dict | None = None  # what must match for two runs' times to be comparable
    models: dict | None = None  # --model-config: per model, its layers per attention kind and KV bytes per token
    workloads: dict | None = None  # --workload: per trace, its requests, schedule and buckets (bench.traces.replay)
    kv_measured: list | None = None  # KV caches of the presets as MHA/GQA/MQA, as transformers keeps them
    baseline: dict | None = None  # set when pooled from several runs (bench.regress.baseline)
    shards: list | None = None  # set when merged from shards
    devices: list | None = None  # bench run --devices: the (alike) devices whose workers ran the cases
    questions: list | None = None  # under a time budget: what the plan said of each question before the first case
    decided: list | None = None  # conditions re-measured in interleaved blocks (bench.analysis.decided)
    suspects: list | None = None  # timings that looked stalled, re-measured during the run (bench.analysis.suspects)
    other: dict = field(default_factory=dict)  # keys of other versions, kept as they were

    @classmethod
    def from_dict(cls, d: dict) -> RunMeta:
        known = {f.name for f in fields(cls)} - {"other"}
        kwargs = {k: copy.deepcopy(v) for k, v in d.items() if k in known}
        # the file's dicts become Calibrations here, where they enter, and nowhere else
        kwargs["calibration"] = Calibration.from_dict(kwargs.get("calibration")
                                                      if isinstance(kwargs.get("calibration"), dict) else {})
        if isinstance(kwargs.get("calibration_end"), dict):
            kwargs["calibration_end"] = Calibration.from_dict(kwargs["calibration_end"])
        else:
            kwargs.pop("calibration_end", None)
        return cls(**kwargs, other={k: copy.deepcopy(v) for k, v in d.items() if k not in known | {"untimed"}})

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "other"}
        out["calibration"] = self.calibration.to_dict()
        out["calibration_end"] = self.calibration_end.to_dict() if self.calibration_end is not None else None
        out = {k: v for k, v in out.items() if v is not None or k in ("run_id", "profile", "sweep_id", "complete")}
        return out | self.other

    @property
    def passes(self) -> int:
        """How many runs a saved baseline pooled (1 for a plain run)."""
        return int((self.baseline or {}).get("passes") or 1)

    def control_gemm(self) -> float | None:
        """The in-run control: GEMM FLOP/s, the geometric mean of the start and end calibrations."""
        values = [c.gemm_flops_per_s for c in (self.calibration, self.calibration_end) if c is not None]
        values = [v for v in values if v is not None and math.isfinite(v) and v > 0]
        return math.exp(sum(map(math.log, values)) / len(values)) if values else None

    # what the report reads, each checked once here: an old or hand-edited file may hold anything
    def model_facts(self) -> dict[str, Any]:
        return self.models if isinstance(self.models, dict) else {}

    def kv_caches(self) -> list[dict]:
        return [kv for kv in self.kv_measured if isinstance(kv, dict)] if isinstance(self.kv_measured, list) else []

    def question_notes(self) -> list[dict]:
        return [q for q in self.questions if isinstance(q, dict)] if isinstance(self.questions, list) else []
