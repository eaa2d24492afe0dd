"""One serving batch in a backend's layout: its sequences, the call to time and how to split its output.

A contiguous cache takes the backend's ragged layout (bench.serving.ragged), a paged one its paged layout
(bench.serving.paged); both read the layout from the backend's registry line (Backend.layouts), never its name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.backends.base import Backend
from bench.problem.shapes import AttentionShape
from bench.serving.batch import Sequences, make_sequences
from bench.serving.paged import paged
from bench.serving.ragged import ragged
from bench.serving.workload import workload_of


def prepare(backend: Backend, shape: AttentionShape, device: str, seed: int
            ) -> tuple[Sequences, Callable[[], object], Callable[[object], list[torch.Tensor]]]:
    """(the sequences, the call, split): split(call()) is every sequence's output. Unsupported when the backend
    has no layout for this batch."""
    w = workload_of(shape)
    seqs = make_sequences(shape, w, device, seed)
    call, split = (paged if w.page_size is not None else ragged)(backend, shape, w, seqs)
    return seqs, call, split
