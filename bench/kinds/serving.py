"""Serving batches (bench.serving): ragged, mixed and paged batches in each backend's own layout, checked sequence
by sequence against float64; inference only. Its axes, --lengths and --page-size, cross the grid's points with the
batches' length distributions (prefill and decode) and the decode cache's page sizes."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.backends import Unsupported, get_backend
from bench.backends.base import PAGED_LAYOUTS, RAGGED_LAYOUTS, Backend
from bench.counts.metrics import model_mem_bytes
from bench.kinds.axes import axis, ints, one_of, positive_ints_check, words
from bench.kinds.base import ReferenceCache, cold_inputs, decode_kv_fields, fits_exactly, refuse_variants
from bench.kinds.expansion import Dims, Geometry, Kind, Point
from bench.problem.case import Case
from bench.problem.shapes import LENGTHS, AttentionShape, case_mask, rows_label
from bench.serving.workload import (
    padding_waste,
    serving_bytes,
    serving_flops,
    serving_kv_bytes,
    workload_of,
)

if TYPE_CHECKING:
    from bench.reference import Check


def page_sizes(text: str) -> tuple[int | None, ...]:
    """'contiguous,16,128' -> (None, 16, 128): page sizes, 'contiguous' for an unpaged cache beside them."""
    return tuple(None if word == "contiguous" else ints(word)[0] for word in words(text))


def page_size_check(value: int | None) -> None:
    if value is not None:
        positive_ints_check("page_size")(value)


def _score_elements(shape: AttentionShape) -> int:
    w = workload_of(shape)
    return shape.n_heads * max(q * k for q, k in zip(w.q_lens, w.kv_lens, strict=True)) * len(w.q_lens)


def serving_check_shape(shape: AttentionShape) -> AttentionShape:
    """The case, or the same batch (its size, distribution, mask and pages) with the lengths halved until it fits."""
    assert shape.serving is not None, "a serving shape"
    small, page = shape, shape.serving.page_size or 0
    if shape.serving.rows is not None:
        return _rows_check_shape(shape, shape.serving.rows, page)
    while not fits_exactly(_score_elements(small)) and small.seq_kv > 2 * max(16, page):
        seq_kv = small.seq_kv // 2
        seq_q = seq_kv if small.seq_q == small.seq_kv else small.seq_q
        small = dataclasses.replace(small, seq_q=seq_q, seq_kv=seq_kv, mask=small.mask.shorter(shape.seq_kv, seq_kv))
    return small


def _rows_check_shape(shape: AttentionShape, groups: tuple[tuple[int, int, int], ...], page: int) -> AttentionShape:
    """Explicit rows (a trace's step): every row's keys halved (and its queries, a decode row's one query kept)
    until the batch's float64 reference fits."""
    small = shape
    while not fits_exactly(_score_elements(small)) and small.seq_kv > 2 * max(16, page):
        # a decode row keeps two keys at least: a paged decode row needs fewer queries than keys
        halved = [(n, 1 if q == 1 else max(1, q // 2), max(2 if q == 1 else 1, k // 2)) for n, q, k in groups]
        groups = tuple((n, min(q, k), k) for n, q, k in halved)
        seq_kv = max(k for _, _, k in groups)
        small = dataclasses.replace(small, seq_q=max(q for _, q, _ in groups), seq_kv=seq_kv,
                                    serving=dataclasses.replace(shape.serving, lengths=rows_label(groups)),
                                    mask=small.mask.shorter(shape.seq_kv, seq_kv))
    return small


@dataclass(frozen=True)
class ServingAxes:
    lengths: tuple[str, ...] | None = axis(None, "lengths", "serving batches: sequence lengths drawn at a fixed "
                                           "total token count, equal,uniform,zipf (prefill; decode contexts), and "
                                           "mixed (prefill chunks beside decode steps, prefill phase)", words,
                                           one_of("lengths", LENGTHS))
    page_sizes: tuple[int | None, ...] | None = axis(None, "page-size", "serving decode: KV-cache page sizes, e.g. "
                                                     "contiguous,16,128 (contexts drawn uniform unless --lengths)",
                                                     page_sizes, page_size_check)


class ServingKind(Kind):
    name = "serving"
    axes = ServingAxes

    def dims(self, sweep: Any, phase: str) -> Dims:
        """Prefill: each --lengths (or none: one sequence). Decode: the page sizes and context distributions, paged
        caches with their own contexts per sequence (uniform unless --lengths), and so the contiguous cache they
        are compared with; mixed is a prefill-phase batch."""
        if phase == "prefill":
            return [("lengths", sweep.lengths or (None,))]
        lengths = tuple(x for x in sweep.lengths or () if x != "mixed")
        if sweep.page_sizes:
            return [("page_size", sweep.page_sizes), ("lengths", lengths or ("uniform",))]
        return [("page_size", (None,)), ("lengths", lengths or (None,))]

    def refuses(self, g: Geometry, point: Point) -> bool:
        """A serving batch is attention alone; a mixed batch is causal."""
        lengths = point.get("lengths")
        return lengths is not None and (point.get("scope", "attention") != "attention"
                                        or (lengths == "mixed" and case_mask(point["mask"]).kind == "none"))

    def passes(self, point: Point, passes: tuple[str, ...]) -> tuple[str, ...]:
        return ("fwd",) if point.get("lengths") else passes  # serving is inference: forward only

    def record_fields(self, case: Case, backend: Backend) -> dict[str, float | None]:
        # counted over the batch's real sequences; the padding the backend's layout adds is padding_waste
        s = case.shape
        waste = padding_waste(s, backend)
        return {"flops": serving_flops(s), "bytes": serving_bytes(s), "model_mem_bytes": None,
                "useful_flops": serving_flops(s), "executed_flops": int(serving_flops(s) * waste) if waste else None,
                "real_tokens": sum(workload_of(s).q_lens), "padding_waste": waste,
                **decode_kv_fields(case, lambda: serving_kv_bytes(s))}

    def predicted_bytes(self, case: Case, backend: Backend) -> int:
        return model_mem_bytes(case.shape, backend.memory, "fwd") or 0  # the dense batch's: a rough bound

    def check_shape(self, shape: AttentionShape) -> AttentionShape:
        return serving_check_shape(shape)

    def setup(self, case: Case) -> Backend:
        backend = get_backend(case.backend)
        if why := backend.unsupported_reason(case.device, case.shape.dtype):
            raise Unsupported(why)
        if case.pass_ != "fwd":
            raise Unsupported("serving batches are inference: forward only")
        # the layouts build their masks from causal and window alone (bench.serving)
        refuse_variants(case.shape, f"a serving batch ({backend.layout(RAGGED_LAYOUTS + PAGED_LAYOUTS)} layout)")
        return backend

    def check(self, case: Case, setup: Backend, references_: ReferenceCache) -> tuple[Check, float]:
        import torch

        from bench.measure.timer import sync
        from bench.serving.batch import check_sequences, references
        from bench.serving.case import prepare

        small = self.check_shape(case.shape)
        seqs, call, split = prepare(setup, small, case.device, seed=0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = call()
        sync(case.device)
        seconds = time.perf_counter() - t0
        refs = references_.get((self.name, small, case.device), lambda: references(small, seqs))
        return check_sequences(split(out), refs), seconds

    def gradients(self, case: Case, setup: Backend) -> Check:
        raise Unsupported("serving batches are inference: forward only")

    def timed_call(self, case: Case, setup: Backend) -> Callable[[], object]:
        import torch

        from bench.serving.case import prepare

        _, call, _ = prepare(setup, case.shape, case.device, seed=1)
        if cold_inputs(case):  # a decode step's cache (its pool and index, where paged) is read cold
            return call.wrapped(torch.no_grad())

        def forward():
            with torch.no_grad():
                return call()
        return forward
