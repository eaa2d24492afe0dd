"""What every trace reader shares: a request, the error a bad row raises, and the checks a field's value passes.

A request's prompt and output are whole numbers from 1 to MAX_TOKENS; an arrival is a finite number of seconds >= 0.
A trace with block hashes (Mooncake's, Qwen-Bailian's) gives each request the ids of its prompt's blocks of
`block` tokens, in order, the last block possibly partial: equal ids mean equal block content and an equal prefix up
to there. A trace without them leaves `blocks` empty and `block` 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import InputError

MAX_TOKENS = 10_000_000  # a prompt or output longer than this is a broken row, not a request


class TraceError(InputError):
    """A workload file that cannot be read; the message names the file, the line and the rule."""


@dataclass(frozen=True)
class Request:
    prompt: int  # prompt tokens (>= 1)
    output: int  # generated tokens (>= 1: the first comes out of the prefill step)
    arrival_s: float  # seconds after the trace's start
    blocks: tuple[int, ...] = field(default=(), compare=False)  # the prompt's block hash ids, in order (or none)
    block: int = field(default=0, compare=False)  # tokens a block (0: the trace has no blocks)

    def block_tokens(self, i: int) -> int:
        """Prompt tokens in block i: `block`, the last one what is left of the prompt."""
        return max(0, min(self.block, self.prompt - i * self.block))


def whole(path: object, line: int, name: str, value: object, low: int = 1) -> int:
    """A whole number from `low` to MAX_TOKENS, written as one (4.0 and true are not)."""
    try:
        n = int(str(value).strip())
    except ValueError:
        raise TraceError(f"{path}:{line}: {name} {value!r} is not a whole number") from None
    if not low <= n <= MAX_TOKENS:
        raise TraceError(f"{path}:{line}: {name} {n} must be between {low} and {MAX_TOKENS:,}")
    return n


def seconds(path: object, line: int, value: object, name: str = "arrival_s") -> float:
    """A finite number of seconds >= 0."""
    try:
        t = float(str(value).strip())
    except ValueError:
        raise TraceError(f"{path}:{line}: {name} {value!r} is not a number") from None
    if not t >= 0 or t == float("inf"):
        raise TraceError(f"{path}:{line}: {name} {t} must be a finite number of seconds >= 0")
    return t


def fields(row: dict[str | None, object]) -> int:
    """How many fields a csv.DictReader row really had (it pads a short row with None, puts a long row's extra fields
    under the key None)."""
    extra = row.get(None)
    return sum(v is not None for k, v in row.items() if k is not None) + (len(extra) if isinstance(extra, list) else 0)


def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """A JSON-lines file's objects with their line numbers, blank lines skipped; a line that is not a JSON object is
    a TraceError naming it."""
    with path.open(encoding="utf-8") as f:
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                raise TraceError(f"{path}:{line}: not JSON ({err.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{path}:{line}: expected an object (a JSON object a line), not {type(obj).__name__}")
            yield line, obj
