"""Case kinds: what differs between a dense attention case, a whole-layer case and a serving batch, behind one
interface (bench.kinds.base.CaseKind) that the runner and bench.record call.

Adding a kind: one module with a class that has CaseKind's methods, and one line in KINDS (first match wins, so
the catch-all dense kind comes last).
"""

from __future__ import annotations

from bench.kinds.base import EXACT_CHECK_ELEMENTS, CaseKind, ReferenceCache
from bench.kinds.dense import DenseKind
from bench.kinds.layer import LayerKind
from bench.kinds.mla import MlaKind
from bench.kinds.serving import ServingKind
from bench.shapes import AttentionShape

KINDS: tuple[CaseKind, ...] = (ServingKind(), LayerKind(), MlaKind(), DenseKind())


def kind_of(shape: AttentionShape) -> CaseKind:
    """The kind a shape is a case of: the first in KINDS that claims it."""
    return next(kind for kind in KINDS if kind.matches(shape))


def check_shape(shape: AttentionShape) -> AttentionShape:
    """The shape the correctness check of a case of `shape` runs on (its kind's rule under EXACT_CHECK_ELEMENTS)."""
    return kind_of(shape).check_shape(shape)


__all__ = ["EXACT_CHECK_ELEMENTS", "KINDS", "CaseKind", "ReferenceCache", "check_shape", "kind_of"]
