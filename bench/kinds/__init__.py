"""Kinds: everything that differs between a dense attention case, a whole layer, an MLA case, a sparse case, a
serving batch, a replayed trace, a transformers model, linear attention, a shared-prefix batch and a speculative
draft's verification, from the flags
that ask for them to the timed call. The engine holds no branch on a kind: it asks the kinds in REGISTRY.

Each registered kind declares, in its own module (or package):
  its axes      `axes`, a frozen dataclass of `axis(...)` fields (bench.kinds.axes): flag, default, parser, check
                and help of each; the plan's Sweep (bench.plan.sweep) is every kind's axes together, in
                registry order, so `bench run`, `pytest --attn-*`, profiles and results files take them at once;
  its expansion the hooks of bench.kinds.expansion.Kind it needs (geometries, variant_geometries, cases, dims,
                refuses, passes, more_cases), through which bench.engine.sweeps expands a sweep into cases, and
                what a run records (`facts`) and `--plan` says (`plan_lines`) of it;
  its measurement, for a kind of case (bench.kinds.base.CaseKind: the shapes bench.problem.case.shape_kind names
                so): the record's formula fields, the memory it needs, its check shape, check, gradient check and
                timed call, and for planning `predicted_flops` and `reference_flops`.
Adding a kind: one module here (its class, a subclass of Kind) and one line in REGISTRY; a kind of case also
adds its name and rule to bench.problem.case.shape_kind, any record field of its own to bench.results.record (the
Record and its docs: `record_fields` fills it), and any new shape field to bench.problem.columns. Dense is first,
the base every later kind refines: a hook that picks one answer (geometries, cases) takes the last kind's.

A kind's formulas (record_fields, predicted_bytes, check_shape) and its expansion are plain arithmetic that plans
read; torch and the tensor code are imported inside the methods that run a case (setup, check, gradients,
timed_call), so planning a run loads no torch (`bench run`'s parent process hands its cases to a worker that does).
"""

from __future__ import annotations

from bench.kinds.base import EXACT_CHECK_ELEMENTS, CaseKind, ReferenceCache
from bench.kinds.dense import DenseKind
from bench.kinds.draft import DraftKind
from bench.kinds.expansion import Kind, Registry
from bench.kinds.layer import LayerKind
from bench.kinds.linear import LinearKind
from bench.kinds.mla import MlaKind
from bench.kinds.model import ModelKind
from bench.kinds.prefix import PrefixKind
from bench.kinds.serving import ServingKind
from bench.kinds.sparse import SparseKind
from bench.kinds.trace import TraceKind
from bench.problem.case import Case, shape_kind
from bench.problem.shapes import AttentionShape

REGISTRY = Registry(DenseKind(), LayerKind(), MlaKind(), ServingKind(), SparseKind(), ModelKind(), TraceKind(),
                    LinearKind(), PrefixKind(), DraftKind())
# the kinds of case, by the name bench.problem.case.shape_kind gives a shape
KINDS: dict[str, CaseKind] = {kind.name: kind for kind in REGISTRY if isinstance(kind, CaseKind)}


def kind_of(of: Case | AttentionShape) -> CaseKind:
    """The code of a case's kind (or of the kind a shape would be a case of)."""
    return KINDS[of.kind if isinstance(of, Case) else shape_kind(of)]


def check_shape(shape: AttentionShape) -> AttentionShape:
    """The shape the correctness check of a case of `shape` runs on (its kind's rule under EXACT_CHECK_ELEMENTS)."""
    return kind_of(shape).check_shape(shape)


def reference_flops(case: Case) -> float:
    """The FLOPs of a case's float64 check, on its check shape, by its kind."""
    return kind_of(case).reference_flops(check_shape(case.shape), case.pass_)


__all__ = ["EXACT_CHECK_ELEMENTS", "KINDS", "REGISTRY", "CaseKind", "Kind", "ReferenceCache", "Registry",
           "check_shape", "kind_of", "reference_flops"]
