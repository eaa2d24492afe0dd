"""The one interface every case kind gives the runner and the record, and what all kinds share.

A case kind (dense attention, a whole layer, a serving batch...) says, for a case of its kind: the fields its record
counts by formula, the memory it will need, the shape its correctness check runs on, that check, the gradient check,
and the call to time. The runner and bench.results.record call only these, so they hold no branch on the kind; a new
kind is one module here and one line in bench.kinds.REGISTRY.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from bench.backends.base import Backend, Unsupported
from bench.problem.case import Case
from bench.problem.shapes import AttentionShape

if TYPE_CHECKING:
    from bench.reference import Check

# The one check-size rule: a case whose float64 reference would hold more score elements than this is checked on a
# shorter copy of itself with the same structure (the oracle is O(S^2)); each kind says how to shorten its shapes.
EXACT_CHECK_ELEMENTS = 1 << 25

T = TypeVar("T")


@runtime_checkable
class CaseKind(Protocol):
    """One kind of case. `setup` builds what the check and the timed call share (a layer's weights), or None."""

    name: str

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        """The record's formula fields: flops, bytes, model_mem_bytes, real_tokens, and where they apply
        padding_waste and kv_cache_bytes."""
        ...

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        """Bytes one forward call needs at least, for the CPU's predicted-OOM guard."""
        ...

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        """The shape the check runs on: the case itself when it fits EXACT_CHECK_ELEMENTS, else a shorter copy."""
        ...

    def setup(self, case: Case) -> Any:
        """What the check, the gradient check and the timed call of this case share."""
        ...

    def check(self, case: Case, setup: Any, references: ReferenceCache) -> tuple[Check, float]:
        """The forward check against float64 and the seconds of the checked call; Unsupported when it cannot run."""
        ...

    def gradients(self, case: Case, setup: Any) -> Check:
        """The backward check of a fwd+bwd case against float64 autograd."""
        ...

    def timed_call(self, case: Case, setup: Any) -> Callable[[], object]:
        """The call the timer repeats: the case's own shape, inputs drawn from another seed than the check's."""
        ...

    def predicted_flops(self, case: Case) -> float:
        """What the case costs for sharding (bench.kinds.expansion.Kind's default: its attention's FLOPs)."""
        ...

    def reference_flops(self, shape: AttentionShape, pass_: str) -> float:
        """The FLOPs of the float64 check on the check shape `shape` (the cost model's)."""
        ...


class ReferenceCache:
    """The float64 reference of the last check shape: consecutive backends on one shape share it.

    A check's inputs (and a layer's weights) are a function of the shape, the device and a fixed seed, so the key
    (kind, shape, device) identifies the reference; one entry, so that the old one is freed before the next."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._ref: Any = None

    def get(self, key: tuple, compute: Callable[[], T]) -> T:
        if key != self._key:
            self._ref = None  # free the old one before building the next
            self._key = None
            self._ref = compute()
            self._key = key
        return self._ref


def fits_exactly(score_elements: int) -> bool:
    return score_elements <= EXACT_CHECK_ELEMENTS


def flop_fields(case: Case, backend: Backend, flops: int) -> dict[str, float | None]:
    """useful_flops (the record's flops: the pairs that count) and executed_flops (what the backend's `executes`
    trait says it computes: bench.counts.pairs; empty when it does not say) of an attention call."""
    from bench.counts.metrics import executed_flops

    return {"useful_flops": flops, "executed_flops": executed_flops(case.shape, case.pass_, backend.executes)}


def cold_inputs(case: Case) -> bool:
    """Whether the case's timed call reads inputs a model's layer meets cold, from memory, and so rotates them
    (bench.measure.rotation): a decode step's KV cache, paged pool and block table, shared prefix, MLA latent cache
    or recurrent state. Between two steps of one layer every other layer's weights and caches pass through the
    cache, while the step's new query was just computed (warm). A prefill is warm: its Q, K and V are what the layer
    has just projected, and its O(S^2) work over O(S) inputs leaves it compute-bound, with little for a cache to
    flatter. Each kind's timed_call returns a Rotating call where this holds, with its cold tensors apart."""
    return case.phase == "decode"


def decode_kv_fields(case: Case, kv_cache_bytes: Callable[[], int]) -> dict[str, float | None]:
    """kv_cache_bytes, on decode cases only: one layer's K and V cache, which a decode step reads whole."""
    return {"kv_cache_bytes": kv_cache_bytes()} if case.phase == "decode" else {}


def refuse_variants(shape: AttentionShape, what: str) -> None:
    """Unsupported for a shape with a score variant or a mask beyond causal and window (a chunk), in a kind whose
    calls do not pass them on."""
    used = [f"score={shape.score.label}"] * bool(shape.score.variants) \
        + [f"mask={shape.mask.label}"] * bool(shape.mask.variants)
    if used:
        raise Unsupported(f"{what} does not pass {' and '.join(used)} to the backend; time the variant with "
                          "scope=attention (a dense call)")
