"""flashinfer-trace workload lines -> steps: a captured engine's attention calls, already scheduled.

Each JSONL line is {"definition": NAME, "workload": {"axes": {...}}}; the GQA attention definitions say a step's
shape in their axes (their per-sequence offsets live in safetensors files, not in the line, so the sequences of a
line share its tokens equally, remainders to the first):
  gqa_paged_decode_..._ps<P>   len_indptr - 1 sequences, one query each, num_kv_indices pages of P tokens in all
  gqa_ragged_prefill_...       len_indptr - 1 sequences, total_q queries over total_kv keys in all
  gqa_paged_prefill_..._ps<P>  len_indptr - 1 sequences, total_q queries over num_kv_indices pages of P tokens
Other definitions (norms, GEMMs, MoE, MLA) are counted and passed over; a file with no attention line is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.traces.requests import TraceError
from bench.traces.schedule import Step


def split(total: int, n: int) -> list[int]:
    """`total` shared by `n` as equally as whole numbers allow, the remainder to the first."""
    base, extra = divmod(total, n)
    return [base + (i < extra) for i in range(n)]


def _axis(path: Path, line: int, axes: dict, name: str) -> int:
    value = axes.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TraceError(f"{path}:{line}: axis {name} is {value!r}; expected a positive integer")
    return value


def step_of(path: Path, line: int, definition: str, axes: dict) -> Step | None:
    """The line's step, or None for a definition that is not GQA attention."""
    page = re.search(r"_ps(\d+)", definition)
    page_size = int(page.group(1)) if page else 1
    if definition.startswith("gqa_paged_decode"):
        n = _axis(path, line, axes, "len_indptr") - 1
        if n < 1:
            raise TraceError(f"{path}:{line}: len_indptr {n + 1} holds no sequence")
        pages = _axis(path, line, axes, "num_kv_indices")
        if pages < n:
            raise TraceError(f"{path}:{line}: num_kv_indices {pages} pages cannot hold {n} sequences; each decoding "
                             "sequence has at least one page")
        kv = [max(2, k) for k in split(pages * page_size, n)]
        return Step((), n, sum(kv), sum(k * k for k in kv), max(kv), tuple(sorted(kv)))
    if definition.startswith(("gqa_ragged_prefill", "gqa_paged_prefill")):
        n = _axis(path, line, axes, "len_indptr") - 1
        if n < 1:
            raise TraceError(f"{path}:{line}: len_indptr {n + 1} holds no sequence")
        total_kv = _axis(path, line, axes, "total_kv") if "ragged" in definition else \
            _axis(path, line, axes, "num_kv_indices") * page_size
        q, kv = split(_axis(path, line, axes, "total_q"), n), split(total_kv, n)
        if any(a < 1 or a > b for a, b in zip(q, kv, strict=True)):
            raise TraceError(f"{path}:{line}: total_q {sum(q)} over {n} sequences does not fit {sum(kv)} keys")
        return Step(tuple(zip(q, kv, strict=True)))
    return None


def read_steps(path: Path, explicit: Callable[[Step], bool] | None = None) -> Iterator[Step]:
    """The file's attention steps, one line at a time, each offered to `explicit` as bench.traces.schedule does (a
    decode step here always carries its rows one by one: the line's equal shares)."""
    found = 0
    other: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
                definition, axes = obj["definition"], obj["workload"]["axes"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise TraceError(f"{path}:{line}: expected a flashinfer-trace workload line, {{\"definition\": ..., "
                                 "\"workload\": {\"axes\": {...}}}") from None
            step = step_of(path, line, str(definition), axes if isinstance(axes, dict) else {})
            if step is None:
                other.add(str(definition))
                continue
            found += 1
            if explicit is not None:
                explicit(step)
            yield step
    if not found:
        raise TraceError(f"{path}: no GQA attention line (definitions found: {', '.join(sorted(other)) or 'none'}); "
                         "attention shapes come from gqa_paged_decode, gqa_ragged_prefill and gqa_paged_prefill")
