"""Case kinds: what differs between a dense attention case, a whole-layer case, an MLA case, a sparse case and a
serving batch, behind one interface (bench.kinds.base.CaseKind) that the runner and bench.results.record call.

Which kind a case is, is decided once, by bench.problem.case.shape_kind (Case.kind); this package holds each kind's code
under that name. Adding a kind: its name and rule in bench.problem.case, one module here, one line in KINDS.

A kind's formulas (record_fields, predicted_bytes, check_shape) are plain arithmetic that plans read; torch and the
tensor code are imported inside the methods that run a case (setup, check, gradients, timed_call), so planning a
run loads no torch (`bench run`'s parent process hands its cases to a worker that does).
"""

from __future__ import annotations

from bench.kinds.base import EXACT_CHECK_ELEMENTS, CaseKind, ReferenceCache
from bench.kinds.dense import DenseKind
from bench.kinds.layer import LayerKind
from bench.kinds.mla import MlaKind
from bench.kinds.serving import ServingKind
from bench.kinds.sparse import SparseKind
from bench.problem.case import Case, shape_kind
from bench.problem.shapes import AttentionShape

KINDS: dict[str, CaseKind] = {kind.name: kind for kind in (ServingKind(), LayerKind(), SparseKind(), MlaKind(),
                                                           DenseKind())}


def kind_of(of: Case | AttentionShape) -> CaseKind:
    """The code of a case's kind (or of the kind a shape would be a case of)."""
    return KINDS[of.kind if isinstance(of, Case) else shape_kind(of)]


def check_shape(shape: AttentionShape) -> AttentionShape:
    """The shape the correctness check of a case of `shape` runs on (its kind's rule under EXACT_CHECK_ELEMENTS)."""
    return kind_of(shape).check_shape(shape)


__all__ = ["EXACT_CHECK_ELEMENTS", "KINDS", "CaseKind", "ReferenceCache", "check_shape", "kind_of"]
