"""A request trace, read one line at a time: what a server was asked for, in arrival order.

Formats (told apart by the file's first line):
  Azure CSV      header TIMESTAMP,ContextTokens,GeneratedTokens (Azure's LLM inference traces): one request a row,
                 arrival = TIMESTAMP - the first row's
  CSV            header with prompt_tokens,output_tokens[,arrival_s]
  JSONL          one object a line, {"prompt_tokens": P, "output_tokens": O[, "arrival_s": T]}
  flashinfer     flashinfer-trace workload lines ({"definition": "gqa_paged_decode_h32_kv8_d128_ps1", "workload":
                 {"axes": {...}}}): already steps, not requests (bench.traces.steps reads them)
  mooncake       JSONL whose first object has input_length and hash_ids (Mooncake's traces; bench.traces.reuse)
  bailian        the same with chat_id (Qwen-Bailian's traces; bench.traces.reuse)
  burstgpt       header with Timestamp, Request tokens, Response tokens (BurstGPT's CSV; bench.traces.reuse)
Mooncake's and Bailian's requests carry their prompts' block hash ids (Request.blocks, `block` tokens each).
No arrival times: every request arrives at 0 (an offline batch). Arrivals must not go back in time. A bad row is a
TraceError naming its line; nothing is planned from a file that does not parse to its end.
Named workloads (`azure-conv`, `azure-code`: Azure's traces; `mooncake-conv`, `mooncake-synthetic`: Mooncake's, with
block hashes) are slices shipped in bench/traces/data, with their licences and attribution (its README).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

from bench.traces import reuse
from bench.traces.rows import MAX_TOKENS, Request, TraceError, fields, json_objects, seconds, whole

__all__ = ["MAX_TOKENS", "NAMED", "Request", "TraceError", "file_format", "read_requests", "source_path"]

DATA = Path(__file__).parent / "data"
NAMED = {"azure-conv": DATA / "azure-conv.csv", "azure-code": DATA / "azure-code.csv",
         "mooncake-conv": DATA / "mooncake-conv.jsonl", "mooncake-synthetic": DATA / "mooncake-synthetic.jsonl"}
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BLOCK = {"mooncake": reuse.MOONCAKE_BLOCK, "bailian": reuse.BAILIAN_BLOCK}  # tokens a block hash covers, per format


def source_path(name: str) -> Path:
    """A named workload's file, or the path given; a TraceError when neither exists."""
    path = NAMED.get(name) or Path(name)
    if not path.is_file():
        raise TraceError(f"--workload {name}: no such file, and not a named workload ({', '.join(NAMED)})")
    return path


def file_format(path: Path) -> str:
    """'azure', 'csv', 'jsonl', 'flashinfer', 'mooncake', 'bailian' or 'burstgpt', from the file's first line that is
    not blank."""
    with path.open(encoding="utf-8-sig") as f:
        first = next((text.strip() for text in f if text.strip()), "")
    if not first:
        raise TraceError(f"{path}: empty; expected a CSV header or JSON lines")
    if first.startswith("{"):
        try:
            line = json.loads(first)
        except json.JSONDecodeError as err:
            raise TraceError(f"{path}:1: not JSON ({err.msg})") from None
        if not isinstance(line, dict):
            return "jsonl"
        return "flashinfer" if "workload" in line else reuse.json_format(line) or "jsonl"
    columns = [c.strip() for c in first.split(",")]
    if all(c in columns for c in AZURE_COLUMNS):
        return "azure"
    if "prompt_tokens" in columns and "output_tokens" in columns:
        return "csv"
    if reuse.is_burstgpt(columns):
        return "burstgpt"
    raise TraceError(f"{path}:1: header {first[:80]!r} names neither Azure's columns ({', '.join(AZURE_COLUMNS)}), "
                     "BurstGPT's (Timestamp, Request tokens, Response tokens, ...) nor prompt_tokens,output_tokens"
                     "[,arrival_s]")


def read_requests(path: Path, skipped: dict[str, int] | None = None) -> Iterator[Request]:
    """The file's requests in order, one line at a time (memory stays flat in the trace's length); rows a format
    skips (BurstGPT's failed requests) are counted in `skipped` by reason."""
    kind = file_format(path)
    if kind == "flashinfer":
        raise TraceError(f"{path}: flashinfer-trace workload lines are steps, not requests")
    rows: Iterator[tuple[int, int, int, float | dt.datetime, tuple[int, ...]]] = (
        _json_rows(path) if kind == "jsonl" else reuse.mooncake_rows(path) if kind == "mooncake" else
        reuse.bailian_rows(path) if kind == "bailian" else reuse.burstgpt_rows(path, skipped) if kind == "burstgpt"
        else _csv_rows(path, kind))
    block = BLOCK.get(kind, 0)
    start: dt.datetime | None = None
    last = 0.0
    for line, prompt, output, arrival, blocks in rows:
        if isinstance(arrival, dt.datetime):
            start = start or arrival
            try:
                arrival = (arrival - start).total_seconds()
            except TypeError:  # one row with a UTC offset, another without: no common clock
                raise TraceError(f"{path}:{line}: TIMESTAMP {arrival} and the first row's {start} differ in having "
                                 "a time zone; give every row one, or none") from None
        if arrival < last:
            raise TraceError(f"{path}:{line}: arrival {arrival:g} s is before the previous row's {last:g} s; a trace "
                             "lists requests in arrival order")
        last = arrival
        yield Request(prompt, output, arrival, blocks, block if blocks else 0)


def _tokens(path: Path, line: int, name: str, value: object) -> int:
    return whole(path, line, name, value)


def _seconds(path: Path, line: int, value: object) -> float:
    return seconds(path, line, value)


def _csv_rows(path: Path, kind: str) -> Iterator[tuple[int, int, int, float | dt.datetime, tuple[int, ...]]]:
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        # skipinitialspace strips only before a field: "prompt_tokens ,output_tokens" keeps a trailing space
        reader.fieldnames = [name.strip() for name in reader.fieldnames or ()]
        for row in reader:
            line = reader.line_num
            if None in row or any(v is None for v in row.values()):
                raise TraceError(f"{path}:{line}: {fields(row)} fields, expected the header's {len(reader.fieldnames)}")
            if kind == "azure":
                try:
                    arrival: float | dt.datetime = dt.datetime.fromisoformat(row["TIMESTAMP"].strip())
                except ValueError:
                    raise TraceError(f"{path}:{line}: TIMESTAMP {row['TIMESTAMP']!r} is not a date and time") from None
                yield (line, _tokens(path, line, "ContextTokens", row["ContextTokens"]),
                       _tokens(path, line, "GeneratedTokens", row["GeneratedTokens"]), arrival, ())
            else:
                given = row.get("arrival_s")
                yield (line, _tokens(path, line, "prompt_tokens", row["prompt_tokens"]),
                       _tokens(path, line, "output_tokens", row["output_tokens"]),
                       0.0 if given in (None, "") else _seconds(path, line, given), ())


def _json_rows(path: Path) -> Iterator[tuple[int, int, int, float, tuple[int, ...]]]:
    for line, obj in json_objects(path):
        if "prompt_tokens" not in obj or "output_tokens" not in obj:
            raise TraceError(f"{path}:{line}: expected an object with prompt_tokens and output_tokens")
        yield (line, _tokens(path, line, "prompt_tokens", obj["prompt_tokens"]),
               _tokens(path, line, "output_tokens", obj["output_tokens"]),
               _seconds(path, line, obj.get("arrival_s", 0.0)), ())
