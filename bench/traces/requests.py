"""A request trace, read one line at a time: what a server was asked for, in arrival order.

Formats (told apart by the file's first line):
  Azure CSV      header TIMESTAMP,ContextTokens,GeneratedTokens (Azure's LLM inference traces): one request a row,
                 arrival = TIMESTAMP - the first row's
  CSV            header with prompt_tokens,output_tokens[,arrival_s]
  JSONL          one object a line, {"prompt_tokens": P, "output_tokens": O[, "arrival_s": T]}
  flashinfer     flashinfer-trace workload lines ({"definition": "gqa_paged_decode_h32_kv8_d128_ps1", "workload":
                 {"axes": {...}}}): already steps, not requests (bench.traces.steps reads them)
No arrival times: every request arrives at 0 (an offline batch). Arrivals must not go back in time. A bad row is a
TraceError naming its line; nothing is planned from a file that does not parse to its end.
Named workloads (`azure-conv`, `azure-code`) are slices of Azure's traces shipped in bench/traces/data, with their
licence and attribution.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.errors import InputError

DATA = Path(__file__).parent / "data"
NAMED = {"azure-conv": DATA / "azure-conv.csv", "azure-code": DATA / "azure-code.csv"}
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MAX_TOKENS = 10_000_000  # a prompt or output longer than this is a broken row, not a request


class TraceError(InputError):
    """A workload file that cannot be read; the message names the file, the line and the rule."""


@dataclass(frozen=True)
class Request:
    prompt: int  # prompt tokens (>= 1)
    output: int  # generated tokens (>= 1: the first comes out of the prefill step)
    arrival_s: float  # seconds after the trace's start


def source_path(name: str) -> Path:
    """A named workload's file, or the path given; a TraceError when neither exists."""
    path = NAMED.get(name) or Path(name)
    if not path.is_file():
        raise TraceError(f"--workload {name}: no such file, and not a named workload ({', '.join(NAMED)})")
    return path


def file_format(path: Path) -> str:
    """'azure', 'csv', 'jsonl' or 'flashinfer', from the file's first line that is not blank."""
    with path.open(encoding="utf-8-sig") as f:
        first = next((text.strip() for text in f if text.strip()), "")
    if not first:
        raise TraceError(f"{path}: empty; expected a CSV header or JSON lines")
    if first.startswith("{"):
        try:
            line = json.loads(first)
        except json.JSONDecodeError as err:
            raise TraceError(f"{path}:1: not JSON ({err.msg})") from None
        return "flashinfer" if isinstance(line, dict) and "workload" in line else "jsonl"
    columns = [c.strip() for c in first.split(",")]
    if all(c in columns for c in AZURE_COLUMNS):
        return "azure"
    if "prompt_tokens" in columns and "output_tokens" in columns:
        return "csv"
    raise TraceError(f"{path}:1: header {first[:80]!r} names neither Azure's columns ({', '.join(AZURE_COLUMNS)}) "
                     "nor prompt_tokens,output_tokens[,arrival_s]")


def read_requests(path: Path) -> Iterator[Request]:
    """The file's requests in order, one line at a time (memory stays flat in the trace's length)."""
    kind = file_format(path)
    if kind == "flashinfer":
        raise TraceError(f"{path}: flashinfer-trace workload lines are steps, not requests")
    rows = _json_rows(path) if kind == "jsonl" else _csv_rows(path, kind)
    start: dt.datetime | None = None
    last = 0.0
    for line, prompt, output, arrival in rows:
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
        yield Request(prompt, output, arrival)


def _tokens(path: Path, line: int, name: str, value: object) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise TraceError(f"{path}:{line}: {name} {value!r} is not a whole number") from None
    if not 1 <= n <= MAX_TOKENS:
        raise TraceError(f"{path}:{line}: {name} {n} must be between 1 and {MAX_TOKENS:,}")
    return n


def _seconds(path: Path, line: int, value: object) -> float:
    try:
        t = float(str(value).strip())
    except ValueError:
        raise TraceError(f"{path}:{line}: arrival_s {value!r} is not a number") from None
    if not t >= 0 or t == float("inf"):
        raise TraceError(f"{path}:{line}: arrival_s {t} must be a finite number of seconds >= 0")
    return t


def _csv_rows(path: Path, kind: str) -> Iterator[tuple[int, int, int, float | dt.datetime]]:
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        # skipinitialspace strips only before a field: "prompt_tokens ,output_tokens" keeps a trailing space
        reader.fieldnames = [name.strip() for name in reader.fieldnames or ()]
        for row in reader:
            line = reader.line_num
            if None in row or any(v is None for v in row.values()):
                raise TraceError(f"{path}:{line}: {len(row)} fields, expected the header's {len(reader.fieldnames)}")
            if kind == "azure":
                try:
                    arrival: float | dt.datetime = dt.datetime.fromisoformat(row["TIMESTAMP"].strip())
                except ValueError:
                    raise TraceError(f"{path}:{line}: TIMESTAMP {row['TIMESTAMP']!r} is not a date and time") from None
                yield (line, _tokens(path, line, "ContextTokens", row["ContextTokens"]),
                       _tokens(path, line, "GeneratedTokens", row["GeneratedTokens"]), arrival)
            else:
                given = row.get("arrival_s")
                yield (line, _tokens(path, line, "prompt_tokens", row["prompt_tokens"]),
                       _tokens(path, line, "output_tokens", row["output_tokens"]),
                       0.0 if given in (None, "") else _seconds(path, line, given))


def _json_rows(path: Path) -> Iterator[tuple[int, int, int, float]]:
    with path.open(encoding="utf-8") as f:
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                raise TraceError(f"{path}:{line}: not JSON ({err.msg})") from None
            if not isinstance(obj, dict) or "prompt_tokens" not in obj or "output_tokens" not in obj:
                raise TraceError(f"{path}:{line}: expected an object with prompt_tokens and output_tokens")
            yield (line, _tokens(path, line, "prompt_tokens", obj["prompt_tokens"]),
                   _tokens(path, line, "output_tokens", obj["output_tokens"]),
                   _seconds(path, line, obj.get("arrival_s", 0.0)))
