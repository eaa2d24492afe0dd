"""The readers of traces whose requests reuse each other's prefixes (Mooncake's, Qwen-Bailian's) and of BurstGPT's
lengths-only CSV, one row at a time. Each yields (line, prompt, output, arrival in seconds, block ids); arrivals are
counted from the first row's (bench.traces.requests checks that they never go back).

Mooncake (kvcache-ai/Mooncake, FAST25-release/traces; JSONL):
  {"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]}: one id a 512-token block of the
  prompt, the last block possibly partial, so len(hash_ids) must be ceil(N / 512).
Qwen-Bailian (alibaba-edu/qwen-bailian-usagetraces-anon; JSONL):
  {"chat_id": c, "parent_chat_id": p (-1: a root request), "timestamp": s (seconds), "input_length": N,
  "output_length": M, "type": "text" | "search" | "image" | "file", "turn": t (>= 1), "hash_ids": [...]}: one id a
  16-token block (the dataset's README: salted SipHash of 16-token blocks), so len(hash_ids) must be ceil(N / 16).
  The chat ids, turn and type are checked but not used: the prefix a request reuses is in its hash ids.
BurstGPT (HPMLL/BurstGPT; CSV): header Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type (newer
  releases add Session ID and Elapsed time): Timestamp in seconds, lengths only (no blocks). A row with 0 response
  tokens is a failed request (the dataset's README: its `without_fails` files are the same trace without them): it is
  skipped and counted (the `skipped` tally a replay states), as the without_fails files leave it out. Total tokens must
  be Request tokens + Response tokens.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.traces.rows import TraceError, fields, json_objects, seconds, whole

MOONCAKE_BLOCK, BAILIAN_BLOCK = 512, 16
BAILIAN_TYPES = ("text", "search", "image", "file")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
FAILED = "failed (0 response tokens)"  # the skipped tally's key for BurstGPT's failed requests

Row = tuple[int, int, int, float, tuple[int, ...]]  # line, prompt, output, arrival_s, block ids


def json_format(first: dict[str, Any]) -> str | None:
    """'bailian' or 'mooncake' for a first JSON line of those traces (told apart by chat_id), else None."""
    if "hash_ids" not in first or "input_length" not in first:
        return None
    return "bailian" if "chat_id" in first else "mooncake"


def is_burstgpt(columns: list[str]) -> bool:
    return "Request tokens" in columns and "Response tokens" in columns and "Timestamp" in columns



def _field(path: Path, line: int, obj: dict[str, Any], name: str) -> Any:
    if name not in obj:
        raise TraceError(f"{path}:{line}: no {name}; every row of this trace has one")
    return obj[name]


def _blocks(path: Path, line: int, obj: dict[str, Any], prompt: int, block: int) -> tuple[int, ...]:
    """The row's hash ids: whole numbers >= 0, one a `block`-token block of the prompt (ceil(prompt / block))."""
    ids = _field(path, line, obj, "hash_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise TraceError(f"{path}:{line}: hash_ids must be a list of whole numbers >= 0")
    want = math.ceil(prompt / block)
    if len(ids) != want:
        raise TraceError(f"{path}:{line}: {len(ids)} hash_ids for input_length {prompt}: expected ceil({prompt} / "
                         f"{block}) = {want}, one id a {block}-token block")
    return tuple(ids)


def mooncake_rows(path: Path) -> Iterator[Row]:
    """Mooncake's JSONL: arrival = (timestamp - the first row's) / 1000."""
    start: float | None = None
    for line, obj in json_objects(path):
        ms = seconds(path, line, _field(path, line, obj, "timestamp"), "timestamp")
        start = ms if start is None else start
        prompt = whole(path, line, "input_length", _field(path, line, obj, "input_length"))
        output = whole(path, line, "output_length", _field(path, line, obj, "output_length"))
        yield line, prompt, output, (ms - start) / 1000, _blocks(path, line, obj, prompt, MOONCAKE_BLOCK)


def bailian_rows(path: Path) -> Iterator[Row]:
    """Qwen-Bailian's JSONL: arrival = timestamp - the first row's (seconds)."""
    start: float | None = None
    for line, obj in json_objects(path):
        t = seconds(path, line, _field(path, line, obj, "timestamp"), "timestamp")
        start = t if start is None else start
        whole(path, line, "chat_id", _field(path, line, obj, "chat_id"), low=0)
        parent = _field(path, line, obj, "parent_chat_id")
        if str(parent).strip() != "-1":
            whole(path, line, "parent_chat_id", parent, low=0)
        whole(path, line, "turn", _field(path, line, obj, "turn"))
        kind = _field(path, line, obj, "type")
        if kind not in BAILIAN_TYPES:
            raise TraceError(f"{path}:{line}: type {kind!r} is none of {', '.join(BAILIAN_TYPES)}")
        prompt = whole(path, line, "input_length", _field(path, line, obj, "input_length"))
        output = whole(path, line, "output_length", _field(path, line, obj, "output_length"))
        yield line, prompt, output, t - start, _blocks(path, line, obj, prompt, BAILIAN_BLOCK)


def burstgpt_rows(path: Path, skipped: dict[str, int] | None = None) -> Iterator[Row]:
    """BurstGPT's CSV: arrival = Timestamp - the first row's; failed rows (0 response tokens) counted in `skipped`."""
    start: float | None = None
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        reader.fieldnames = [name.strip() for name in reader.fieldnames or ()]
        missing = [c for c in BURSTGPT_COLUMNS if c not in reader.fieldnames]
        if missing:
            raise TraceError(f"{path}:1: BurstGPT's header lacks {', '.join(missing)}")
        for row in reader:
            line = reader.line_num
            if None in row or any(v is None for v in row.values()):
                raise TraceError(f"{path}:{line}: {fields(row)} fields, expected the header's {len(reader.fieldnames)}")
            t = seconds(path, line, row["Timestamp"], "Timestamp")
            start = t if start is None else start
            prompt = whole(path, line, "Request tokens", row["Request tokens"])
            output = whole(path, line, "Response tokens", row["Response tokens"], low=0)
            total = whole(path, line, "Total tokens", row["Total tokens"])
            if total != prompt + output:
                raise TraceError(f"{path}:{line}: Total tokens {total} is not Request tokens + Response tokens "
                                 f"({prompt} + {output})")
            if output == 0:
                if skipped is not None:
                    skipped[FAILED] = skipped.get(FAILED, 0) + 1
                continue
            yield line, prompt, output, t - start, ()
