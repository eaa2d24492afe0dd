"""One serving case for the runner: its float64 check sequence by sequence, then the callable to time.

serving_case hands the runner what its dense path computes itself (the check, the first call's time, the timed
callable), so the timing, memory and record code stays one path for every case.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from bench.backends import Unsupported, get_backend
from bench.measure.timer import sync
from bench.reference import Check
from bench.serving.batch import Sequences, check_sequences, make_sequences, references
from bench.serving.paged import paged
from bench.serving.ragged import ragged
from bench.serving.workload import workload_of
from bench.shapes import AttentionShape

# As for dense cases (bench.engine.runner.EXACT_CHECK_ELEMENTS): batches whose float64 reference would hold more
# score elements than this are checked on a shorter copy with the same batch, distribution, mask and pages.
EXACT_CHECK_ELEMENTS = 1 << 25


def _score_elements(shape: AttentionShape) -> int:
    w = workload_of(shape)
    return shape.n_heads * max(q * k for q, k in zip(w.q_lens, w.kv_lens, strict=True)) * len(w.q_lens)


def serving_check_shape(shape: AttentionShape) -> AttentionShape:
    """The shape the check runs on: the case, or the same batch with the lengths halved until it is small enough
    (a window that cuts the case's keys is cut to half the shorter ones, so it still cuts)."""
    small = shape
    while _score_elements(small) > EXACT_CHECK_ELEMENTS and small.seq_kv > 2 * max(16, small.page_size or 0):
        seq_kv = small.seq_kv // 2
        seq_q = seq_kv if small.seq_q == small.seq_kv else small.seq_q
        window = small.window
        if window is not None:
            window = min(window, seq_kv) if window >= shape.seq_kv else min(window, max(1, seq_kv // 2))
        small = dataclasses.replace(small, seq_q=seq_q, seq_kv=seq_kv, window=window)
    return small


def _prepare(backend: str, shape: AttentionShape, device: str, seed: int):
    w = workload_of(shape)
    seqs = make_sequences(shape, w, device, seed)
    call, split = (paged if w.page_size is not None else ragged)(backend, shape, w, seqs)
    return seqs, call, split


_LAST_REFERENCES: dict[tuple, list[torch.Tensor]] = {}  # one entry: consecutive backends on a shape share it


def _references(shape: AttentionShape, device: str, seqs: Sequences) -> list[torch.Tensor]:
    """The per-sequence float64 references of the check shape (its inputs are a function of shape, device, seed)."""
    key = (shape, device)
    if key not in _LAST_REFERENCES:
        _LAST_REFERENCES.clear()  # free the old ones before building the next
        _LAST_REFERENCES[key] = references(shape, seqs)
    return _LAST_REFERENCES[key]


def serving_case(backend: str, shape: AttentionShape, pass_: str, device: str
                 ) -> tuple[Check, float, Callable[[], object]]:
    """(the check against float64 per sequence, the checked call's seconds, the forward to time).

    Raises Unsupported, with the reason, when the backend cannot run this batch here."""
    if why := get_backend(backend).unsupported_reason(device, shape.dtype):
        raise Unsupported(why)
    if pass_ != "fwd":
        raise Unsupported("serving batches are inference: forward only")
    small = serving_check_shape(shape)
    seqs, call, split = _prepare(backend, small, device, seed=0)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = call()
    sync(device)
    seconds = time.perf_counter() - t0
    check = check_sequences(split(out), _references(small, device, seqs))
    del out, call, seqs
    if not check.ok:
        return check, seconds, lambda: None
    _, timed_call, _ = _prepare(backend, shape, device, seed=1)

    def forward():
        with torch.no_grad():
            return timed_call()
    return check, seconds, forward
