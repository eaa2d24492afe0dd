"""A sparse line, its dense twins and the best dense kernel: the one definition that the planner's sparse questions
(bench.claims.sparse) and the report's sparse analysis (bench.analysis.sparse_cost, bench.analysis.traits, the sparse
figures) read. Pure functions over a Case's or a record's fields; nothing here imports pandas.

- A sparse kernel executes a keep-set sparsely: its kept blocks, or its gathered keys (the registry's `executes`
  trait is "blocks" or "selected", for a backend that takes a sparsity at all). The others take a keep-set as a
  boolean mask and compute every pair.
- A line is one sparse method (a sparsity on one backend) over the lengths: the cases that share every field of
  LINE_FIELDS, i.e. every record field but the lengths and the batch, with decode's queries per step (`step_q`) kept
  apart. Where each length has one batch (a GPU sweep at fixed tokens per batch shrinks B as S grows) its cases are
  one line (one_line); else each batch is a line.
- A sparse case's dense twins are the dense cases of its shape: every field of TWIN_FIELDS equal (all record shape
  fields, phase and pass, but the sparsity).
- The best dense kernel at a shape is the fastest dense kernel measured at that shape, among the backends the run
  offers that shape (fastest): what "sparse beats dense" means to a user is beating the dense attention they would
  otherwise run, and that is whichever dense kernel is fastest there, of any kind (a materialising kernel that wins
  at short lengths, a kernel that compiles). So the planner funds every dense twin the run offers on its device, and
  the report takes the fastest of those measured ok; a narrower field of rivals would flatter sparse attention.
- A sparse case's speedup twin is its own backend's dense run where the run has one, else (a kernel that runs only
  sparse attention) the best dense kernel.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from bench.backends import BACKENDS
from bench.problem.columns import shape_fields
from bench.results.record import SHAPE_KEYS

if TYPE_CHECKING:
    from bench.problem.case import Case

T = TypeVar("T")

TWIN_FIELDS: tuple[str, ...] = tuple(k for k in SHAPE_KEYS if k != "sparsity")
LINE_FIELDS: tuple[str, ...] = ("backend", "sparsity", "step_q",
                                *(k for k in SHAPE_KEYS if k not in ("sparsity", "seq_q", "seq_kv", "batch")))


def executes_sparsely(backend: str) -> bool:
    """Whether the backend executes a keep-set sparsely (its blocks, its gathered keys), not as a boolean mask."""
    b = BACKENDS.get(backend)
    return b is not None and bool(b.sparsity) and b.executes in ("blocks", "selected")


def step_q(phase: str, seq_q: int) -> int:
    """Decode's queries per step (a line keeps them apart); 0 for prefill, whose Sq is its length."""
    return int(seq_q) if phase == "decode" else 0


def case_fields(case: Case) -> dict[str, Any]:
    """A case as the record fields these definitions read: its shape columns, backend, phase, pass and step_q."""
    return {**shape_fields(case.shape), "backend": case.backend, "phase": case.phase, "pass": case.pass_,
            "step_q": step_q(case.phase, case.shape.seq_q)}


def line_key(fields: Mapping[str, Any]) -> tuple:
    """What the cases of one line share (LINE_FIELDS)."""
    return tuple(fields[k] for k in LINE_FIELDS)


def twin_key(fields: Mapping[str, Any]) -> tuple:
    """What a sparse case shares with its dense twins (TWIN_FIELDS)."""
    return tuple(fields[k] for k in TWIN_FIELDS)


def one_line(batches_per_length: Iterable[Collection[int]]) -> bool:
    """Whether one method's cases over the lengths are one line: each length has a single batch."""
    return all(len(set(batches)) <= 1 for batches in batches_per_length)


def split(cases: list[T], length: Callable[[T], int], batch: Callable[[T], int]) -> list[list[T]]:
    """One method's cases as its lines: all of them where one_line, else one line per batch (smallest first)."""
    batches: dict[int, set[int]] = defaultdict(set)
    for c in cases:
        batches[length(c)].add(batch(c))
    if one_line(batches.values()):
        return [cases]
    return [[c for c in cases if batch(c) == b] for b in sorted({batch(c) for c in cases})]


def fastest(candidates: Iterable[T], seconds: Callable[[T], float]) -> T | None:
    """The best dense kernel among the dense twins measured at one shape: the least time (the first on a tie);
    None when there is none."""
    best: T | None = None
    best_s = float("inf")
    for c in candidates:
        s = seconds(c)
        if best is None or s < best_s:
            best, best_s = c, s
    return best
