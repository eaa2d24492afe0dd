"""Real traffic (bench.traces): the trace formats and their errors (requests), flashinfer-trace lines as steps, the
continuous-batching schedule against a brute-force per-request simulation written here from schedule's docstring,
the buckets and their error (buckets, replay), and the explicit rows a bucket's batch is written as
(bench.problem.shapes,
bench.serving.workload). Plain Python: no kernels, no runs."""

from __future__ import annotations

import json
import random
from collections import deque
from pathlib import Path

import pytest

from bench.errors import UsageError
from bench.problem.columns import shape_from_fields
from bench.problem.shapes import AttentionShape, ShapeError, parse_rows, rows_label
from bench.serving.workload import workload_of
from bench.traces.buckets import MAX_BUCKETS
from bench.traces.flashinfer import read_steps
from bench.traces.replay import replay
from bench.traces.requests import NAMED, Request, TraceError, read_requests, source_path
from bench.traces.schedule import Knobs, Step, schedule

NAMED_WORKLOADS = ("azure-conv", "azure-code")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def read(path: Path) -> list[Request]:
    return list(read_requests(path))


def trace_error(path: Path) -> str:
    """The TraceError message reading `path` raises (the file is read to its end)."""
    with pytest.raises(TraceError) as err:
        read(path)
    return str(err.value)


# --- an independent simulation of schedule's docstring, one request at a time ----------------------------------------

def brute_chunk(p: list, budget: int, cap: int | None, rows: list[tuple[int, int]]) -> int:
    """The rest of p's prompt, cut to the budget left and to the cap when set: its row appended, its size returned."""
    size = min(p[0].prompt - p[1], budget)
    if cap is not None:
        size = min(size, cap)
    p[1] += size
    rows.append((size, p[1]))
    return size


def brute_schedule(requests: list[Request], knobs: Knobs) -> list[Step]:
    """Every step's rows listed per request: decoding requests take one row (prompt + j keys at their decode step j),
    then prefilling ones their next chunk, then waiting ones are admitted in arrival order while budget and sequences
    remain; a chunk is the rest of the prompt cut to the budget left and to prefill_chunk. The clock advances one
    step at a time (an idle step yields nothing)."""
    step_s = knobs.step_ms / 1000
    upcoming = deque(requests)
    waiting: deque[Request] = deque()
    prefilling: list[list] = []  # [request, prompt tokens done]
    decoding: list[list] = []  # [request, decode step j]
    steps: list[Step] = []
    t = 0
    while upcoming or waiting or prefilling or decoding:
        while upcoming and upcoming[0].arrival_s <= t * step_s:
            waiting.append(upcoming.popleft())
        if not (waiting or prefilling or decoding):
            t += 1
            continue
        keys = [r.prompt + j for r, j in decoding]
        budget = knobs.max_batch_tokens - len(keys)
        rows: list[tuple[int, int]] = []
        for p in prefilling:
            if budget <= 0:
                break
            budget -= brute_chunk(p, budget, knobs.prefill_chunk, rows)
        while waiting and budget > 0 and len(decoding) + len(prefilling) < knobs.max_seqs:
            p = [waiting.popleft(), 0]
            prefilling.append(p)
            budget -= brute_chunk(p, budget, knobs.prefill_chunk, rows)
        steps.append(Step(tuple(rows), len(keys), sum(keys), sum(k * k for k in keys), max(keys, default=0),
                          tuple(sorted(keys))))
        decoding = [[r, j + 1] for r, j in decoding if j + 1 <= r.output - 1]
        for p in [p for p in prefilling if p[1] == p[0].prompt]:
            prefilling.remove(p)
            if p[0].output > 1:
                decoding.append([p[0], 1])
        t += 1
    return steps


def random_trace(seed: int, n: int = 40) -> list[Request]:
    rng = random.Random(seed)
    arrival, out = 0.0, []
    for i in range(n):
        arrival += rng.expovariate(40.0) if i % 13 else rng.uniform(0.5, 1.5)  # bursts, and a few idle gaps
        out.append(Request(rng.randint(1, 150), rng.randint(1, 30), arrival))
    return out


# --- requests: the formats -------------------------------------------------------------------------------------------

def test_azure_csv_arrivals_are_seconds_after_the_first_row(tmp_path):
    path = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.6805900,374,44\n"
                                    "2023-11-16 18:15:50.9951690,396,109\n"
                                    "2023-11-16 18:16:46.6805900,7,1\n")
    got = read(path)
    assert [(r.prompt, r.output) for r in got] == [(374, 44), (396, 109), (7, 1)]
    assert [r.arrival_s for r in got] == pytest.approx([0.0, 4.314579, 60.0])


def test_csv_with_arrival_column_is_read(tmp_path):
    path = write(tmp_path, "t.csv", "prompt_tokens,output_tokens,arrival_s\n10,2,0.5\n20,3,1.25\n")
    assert read(path) == [Request(10, 2, 0.5), Request(20, 3, 1.25)]


def test_csv_columns_may_come_in_any_order(tmp_path):
    path = write(tmp_path, "t.csv", "arrival_s,output_tokens,prompt_tokens\n0,2,10\n3,4,5\n")
    assert read(path) == [Request(10, 2, 0.0), Request(5, 4, 3.0)]


def test_jsonl_is_read_and_blank_lines_are_skipped(tmp_path):
    path = write(tmp_path, "t.jsonl", '{"prompt_tokens": 10, "output_tokens": 2, "arrival_s": 0.5}\n\n'
                                      '{"prompt_tokens": 20, "output_tokens": 3, "arrival_s": 1.25}\n')
    assert read(path) == [Request(10, 2, 0.5), Request(20, 3, 1.25)]


@pytest.mark.parametrize("name, text", [
    ("t.csv", "prompt_tokens,output_tokens\n10,2\n20,3\n"),
    ("t.jsonl", '{"prompt_tokens": 10, "output_tokens": 2}\n{"prompt_tokens": 20, "output_tokens": 3}\n'),
])
def test_without_arrival_times_every_request_arrives_at_zero(tmp_path, name, text):
    assert read(write(tmp_path, name, text)) == [Request(10, 2, 0.0), Request(20, 3, 0.0)]


@pytest.mark.parametrize("name", NAMED_WORKLOADS)
def test_named_workloads_read_3000_requests_in_arrival_order_from_zero(name):
    got = read(source_path(name))
    assert len(got) == 3000
    assert got[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(got, got[1:], strict=False))
    assert got[-1].arrival_s > 0


# --- requests: what is refused ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, text, line, words", [
    ("t.csv", "prompt_tokens,output_tokens\n10,2\n1.5,2\n", 3, "not a whole number"),
    ("t.csv", "prompt_tokens,output_tokens\n10,2\n10,x\n", 3, "not a whole number"),
    ("t.csv", "prompt_tokens,output_tokens\n10,2\n0,2\n", 3, "between 1 and"),
    ("t.csv", "prompt_tokens,output_tokens\n10,2\n10,0\n", 3, "between 1 and"),
    ("t.csv", "prompt_tokens,output_tokens\n10,2\n10\n", 3, "fields"),
    ("t.csv", "prompt_tokens,output_tokens\n10,2\n10,2,7\n", 3, "fields"),
    ("t.csv", "prompt_tokens,output_tokens,arrival_s\n10,2,5\n10,2,4\n", 3, "before the previous row"),
    ("t.csv", "prompt_tokens,output_tokens,arrival_s\n10,2,-1\n", 2, ">= 0"),
    ("t.csv", "prompt_tokens,output_tokens,arrival_s\n10,2,soon\n", 2, "not a number"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50,5,5\n2023-11-16 18:15:49,5,5\n", 3,
     "before the previous row"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50,5,5\nyesterday,5,5\n", 3,
     "not a date and time"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50,5,5\n2023-11-16 18:15:51,0,5\n", 3,
     "ContextTokens 0"),
    ("t.jsonl", '{"prompt_tokens": 10, "output_tokens": 2}\n{"prompt_tokens": 10, "output_tokens": 2.5}\n', 2,
     "not a whole number"),
    ("t.jsonl", '{"prompt_tokens": 10, "output_tokens": 2}\n{"prompt_tokens": 10, "output_tokens": 0}\n', 2,
     "between 1 and"),
    ("t.jsonl", '{"prompt_tokens": 10, "output_tokens": 2}\n{"prompt_tokens": 10}\n', 2, "output_tokens"),
    ("t.jsonl", '{"prompt_tokens": 10, "output_tokens": 2}\n{"prompt_tokens": 10, "output_tokens": 2\n', 2,
     "not JSON"),
    ("t.jsonl", '{"prompt_tokens": 1, "output_tokens": 2}\n\n[1, 2]\n', 3, "expected an object"),
    ("t.jsonl", '{"prompt_tokens": 1, "output_tokens": 1, "arrival_s": 2}\n'
                '{"prompt_tokens": 1, "output_tokens": 1, "arrival_s": 1}\n', 2, "before the previous row"),
    ("t.jsonl", '{"prompt_tokens": 1, "output_tokens": 1, "arrival_s": NaN}\n', 1, ">= 0"),
    ("t.jsonl", '{"prompt_tokens": 1, "output_tokens": 1\n', 1, "not JSON"),
    ("t.csv", "prompt,output\n10,2\n", 1, "header"),
])
def test_a_bad_row_is_a_trace_error_naming_file_and_line(tmp_path, name, text, line, words):
    path = write(tmp_path, name, text)
    message = trace_error(path)
    assert f"{path}:{line}:" in message
    assert words in message


def test_an_empty_file_is_refused_naming_it(tmp_path):
    path = write(tmp_path, "t.csv", "")
    message = trace_error(path)
    assert str(path) in message and "empty" in message


def test_a_flashinfer_file_is_not_read_as_requests(tmp_path):
    path = write(tmp_path, "f.jsonl", json.dumps({"definition": "rmsnorm_h4096", "workload": {"axes": {}}}) + "\n")
    assert "steps, not requests" in trace_error(path)


def test_reading_streams_good_rows_before_a_bad_one_raises(tmp_path):
    """The reader streams: good rows come out before the bad one is reached, which then raises."""
    path = write(tmp_path, "t.csv", "prompt_tokens,output_tokens\n10,2\n10,0\n")
    rows = read_requests(path)
    assert next(rows) == Request(10, 2, 0.0)
    with pytest.raises(TraceError, match=":3:"):
        next(rows)


@pytest.mark.parametrize("header", ["prompt_tokens ,output_tokens", "TIMESTAMP ,ContextTokens ,GeneratedTokens"])
def test_a_header_with_spaces_before_its_commas_is_read_or_refused_as_a_trace_error(tmp_path, header):
    row = "2023-11-16 18:15:46,10,2" if header.startswith("TIMESTAMP") else "10,2"
    path = write(tmp_path, "t.csv", f"{header}\n{row}\n")
    assert [(r.prompt, r.output) for r in read(path)] == [(10, 2)]


def test_timestamps_with_and_without_a_time_zone_are_refused_naming_the_line(tmp_path):
    path = write(tmp_path, "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46,10,2\n2023-11-16 18:15:47+00:00,10,2\n")
    with pytest.raises(TraceError, match=r":3: .*time zone"):
        read(path)


def test_a_jsonl_file_opening_with_a_blank_line_is_read(tmp_path):
    path = write(tmp_path, "t.jsonl", '\n{"prompt_tokens": 10, "output_tokens": 2}\n')
    assert read(path) == [Request(10, 2, 0.0)]


def test_an_unknown_workload_that_is_not_a_file_is_refused(tmp_path):
    with pytest.raises(TraceError, match="not a named workload") as err:
        source_path(str(tmp_path / "azure-chat"))
    assert "azure-conv" in str(err.value) and "azure-code" in str(err.value)
    assert source_path("azure-conv") == NAMED["azure-conv"]


# --- flashinfer-trace lines ------------------------------------------------------------------------------------------

def lines(tmp_path: Path, *objs: dict) -> Path:
    return write(tmp_path, "fi.jsonl", "".join(json.dumps(o) + "\n" for o in objs))


def fi(definition: str, **axes: object) -> dict:
    return {"definition": definition, "workload": {"axes": axes}}


def test_paged_decode_line_is_a_decode_step_of_its_sequences_and_pages(tmp_path):
    path = lines(tmp_path, fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr=5, num_kv_indices=10))
    (step,) = read_steps(path)
    assert step == Step((), 4, 160, 4 * 40 * 40, 40)


def test_paged_decode_remainder_goes_to_the_first_sequences(tmp_path):
    path = lines(tmp_path, fi("gqa_paged_decode_h32_kv8_d128_ps1", len_indptr=4, num_kv_indices=11))
    (step,) = read_steps(path)
    assert (step.decode_rows, step.decode_kv_sum, step.decode_kv_sumsq, step.decode_kv_max) == \
        (3, 11, 4 * 4 + 4 * 4 + 3 * 3, 4)


def test_paged_decode_with_fewer_pages_than_sequences_is_refused(tmp_path):
    path = lines(tmp_path, fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr=5, num_kv_indices=3))
    with pytest.raises(TraceError, match=r":1: num_kv_indices 3 pages cannot hold 4 sequences"):
        list(read_steps(path))


def test_ragged_prefill_rows_sum_to_its_totals(tmp_path):
    path = lines(tmp_path, fi("gqa_ragged_prefill_causal_h32_kv8_d128", len_indptr=4, total_q=10, total_kv=31))
    (step,) = read_steps(path)
    assert len(step.prefill) == 3 and step.decode_rows == 0
    assert sum(q for q, _ in step.prefill) == 10
    assert sum(k for _, k in step.prefill) == 31
    assert all(1 <= q <= k for q, k in step.prefill)


def test_paged_prefill_keys_are_pages_times_page_size(tmp_path):
    path = lines(tmp_path, fi("gqa_paged_prefill_causal_h32_kv8_d128_ps16", len_indptr=3, total_q=8,
                              num_kv_indices=4))
    (step,) = read_steps(path)
    assert step.prefill == ((4, 32), (4, 32))


def test_other_definitions_are_passed_over_between_attention_lines(tmp_path):
    path = lines(tmp_path, fi("rmsnorm_h4096", batch_size=7),
                 fi("gqa_paged_decode_h32_kv8_d128_ps1", len_indptr=2, num_kv_indices=9),
                 fi("gemm_n4096_k4096", M=3))
    assert list(read_steps(path)) == [Step((), 1, 9, 81, 9)]


def test_a_file_without_attention_lines_is_refused_naming_what_it_found(tmp_path):
    path = lines(tmp_path, fi("rmsnorm_h4096", batch_size=7), fi("rmsnorm_h4096", batch_size=8))
    with pytest.raises(TraceError, match="no GQA attention line") as err:
        list(read_steps(path))
    assert "rmsnorm_h4096" in str(err.value)


@pytest.mark.parametrize("obj, words", [
    (fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr="5", num_kv_indices=10), "len_indptr"),
    (fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr=5, num_kv_indices=0), "num_kv_indices"),
    (fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr=5, num_kv_indices=True), "num_kv_indices"),
    (fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr=1, num_kv_indices=10), "no sequence"),
    (fi("gqa_ragged_prefill_causal_h32_kv8_d128", len_indptr=3, total_q=10), "total_kv"),
    (fi("gqa_ragged_prefill_causal_h32_kv8_d128", len_indptr=3, total_q=10, total_kv=6), "does not fit"),
    ({"definition": "gqa_paged_decode_h32_kv8_d128_ps16", "axes": {}}, "expected a flashinfer-trace"),
])
def test_a_bad_flashinfer_line_is_refused_with_its_line(tmp_path, obj, words):
    good = fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr=5, num_kv_indices=10)
    path = lines(tmp_path, good, obj)
    with pytest.raises(TraceError, match=words) as err:
        list(read_steps(path))
    assert f"{path}:2:" in str(err.value)


def test_replay_of_a_flashinfer_file_buckets_its_steps(tmp_path):
    path = lines(tmp_path, fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr=5, num_kv_indices=10),
                 fi("gqa_ragged_prefill_causal_h32_kv8_d128", len_indptr=4, total_q=10, total_kv=31))
    r = replay(str(path))
    assert r.source == "flashinfer" and r.steps == 2 and r.mixed_steps == 0
    assert sorted((b.phase, b.steps, b.rows) for b in r.buckets) == [("decode", 1, 4), ("prefill", 1, 3)]


# --- schedule ---------------------------------------------------------------------------------------------------------

SMALL = Knobs(max_batch_tokens=64, max_seqs=8, step_ms=10.0)


@pytest.fixture(scope="module")
def azure_conv() -> list[Request]:
    return read(NAMED["azure-conv"])


@pytest.mark.parametrize("knobs", [Knobs(), Knobs(max_batch_tokens=512, max_seqs=32, prefill_chunk=128)],
                         ids=["default", "small"])
def test_schedule_conserves_prompt_and_output_tokens(azure_conv, knobs):
    steps = list(schedule(azure_conv, knobs))
    assert sum(q for s in steps for q, _ in s.prefill) == sum(r.prompt for r in azure_conv)
    assert sum(s.decode_rows for s in steps) == sum(r.output - 1 for r in azure_conv)


@pytest.mark.parametrize("knobs", [Knobs(), Knobs(max_batch_tokens=512, max_seqs=32, prefill_chunk=128)],
                         ids=["default", "small"])
def test_no_step_exceeds_the_token_budget_or_the_sequence_cap(azure_conv, knobs):
    steps = list(schedule(azure_conv, knobs))
    assert max(sum(q for q, _ in s.prefill) + s.decode_rows for s in steps) <= knobs.max_batch_tokens
    assert max(len(s.prefill) + s.decode_rows for s in steps) <= knobs.max_seqs
    if knobs.prefill_chunk:
        assert max(q for s in steps for q, _ in s.prefill) <= knobs.prefill_chunk
    # the caps bind: a schedule that never reached them would not test them
    assert max(len(s.prefill) + s.decode_rows for s in steps) == knobs.max_seqs or \
        max(sum(q for q, _ in s.prefill) + s.decode_rows for s in steps) == knobs.max_batch_tokens


def test_one_request_decodes_over_contexts_prompt_plus_one_to_prompt_plus_output_minus_one():
    p, o = 100, 6
    steps = list(schedule([Request(p, o, 0.0)]))
    assert steps[0] == Step(((p, p),))
    decode = steps[1:]
    assert [(s.decode_rows, s.decode_kv_sum, s.decode_kv_max, s.decode_kv_sumsq) for s in decode] == \
        [(1, k, k, k * k) for k in range(p + 1, p + o)]
    assert all(not s.prefill for s in decode)


def test_a_request_with_one_output_token_has_no_decode_step():
    assert list(schedule([Request(7, 1, 0.0)])) == [Step(((7, 7),))]


def test_a_prompt_longer_than_the_budget_is_chunked_and_its_keys_grow():
    steps = list(schedule([Request(10, 2, 0.0)], Knobs(max_batch_tokens=4, max_seqs=2)))
    assert [s.prefill for s in steps] == [((4, 4),), ((4, 8),), ((2, 10),), ()]
    assert steps[-1].decode_kv_sum == 11


def test_prefill_chunk_caps_a_chunk_below_the_budget():
    steps = list(schedule([Request(10, 1, 0.0)], Knobs(prefill_chunk=3)))
    assert [s.prefill for s in steps] == [((3, 3),), ((3, 6),), ((3, 9),), ((1, 10),)]


def test_decode_rows_come_out_of_the_budget_before_a_chunk():
    """A decoding request's row takes one token of the budget; the other request's chunk gets the rest."""
    steps = list(schedule([Request(2, 5, 0.0), Request(20, 1, 0.0)], Knobs(max_batch_tokens=8, max_seqs=2)))
    assert steps[0].prefill == ((2, 2), (6, 6))
    assert steps[1].prefill == ((7, 13),) and steps[1].decode_rows == 1
    assert steps[2].prefill == ((7, 20),) and steps[2].decode_rows == 1


def test_waiting_requests_are_admitted_in_arrival_order_up_to_the_sequence_cap():
    reqs = [Request(1, 3, 0.0), Request(2, 3, 0.0), Request(3, 3, 0.0)]
    steps = list(schedule(reqs, Knobs(max_batch_tokens=16, max_seqs=2)))
    assert steps[0].prefill == ((1, 1), (2, 2))
    assert steps[1].prefill == steps[2].prefill == ()  # no sequence free till both have decoded
    assert steps[3].prefill == ((3, 3),)


def test_schedule_is_deterministic(azure_conv):
    knobs = Knobs(max_batch_tokens=512, max_seqs=32)
    assert list(schedule(azure_conv, knobs)) == list(schedule(list(azure_conv), knobs))


def test_a_later_request_waits_for_the_clock():
    # step_ms 25: the second request (0.06 s) is first seen at step 3 (0.075 s), during the first one's decode
    steps = list(schedule([Request(4, 10, 0.0), Request(5, 1, 0.06)], Knobs(step_ms=25.0)))
    assert [s.prefill for s in steps[:4]] == [((4, 4),), (), (), ((5, 5),)]
    assert len(steps) == 10


def test_an_idle_server_jumps_to_the_next_arrival_on_the_clock():
    # A ends at step 1; B arrives at 1.0 s (step 40) and decodes steps 41..49; C arrives at 1.06 s (step 43)
    reqs = [Request(4, 2, 0.0), Request(3, 10, 1.0), Request(2, 1, 1.06)]
    steps = list(schedule(reqs, Knobs(step_ms=25.0)))
    assert len(steps) == 2 + 10  # no empty step is yielded for the idle gap
    assert [s.prefill for s in steps[2:6]] == [((3, 3),), (), (), ((2, 2),)]
    assert steps[5].decode_kv_sum == 3 + 3  # C comes in at B's third decode step


@pytest.mark.parametrize("kwargs, words", [
    ({"max_batch_tokens": 8, "max_seqs": 16}, "below --max-seqs"),
    ({"max_seqs": 0}, "--max-seqs 0"),
    ({"max_batch_tokens": 0, "max_seqs": 1}, "--max-batch-tokens 0"),
    ({"max_batch_tokens": -5, "max_seqs": -5}, "must be at least 1"),
    ({"prefill_chunk": 0}, "--prefill-chunk 0"),
    ({"step_ms": 0.0}, "--step-ms"),
    ({"step_ms": -1.0}, "--step-ms"),
    ({"step_ms": float("nan")}, "--step-ms"),
])
def test_knobs_refuse_impossible_settings(kwargs, words):
    with pytest.raises(UsageError, match=words):
        Knobs(**kwargs)


def test_knobs_accept_a_budget_equal_to_the_sequence_cap():
    assert Knobs(max_batch_tokens=8, max_seqs=8).max_seqs == 8


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("knobs", [SMALL, Knobs(max_batch_tokens=64, max_seqs=8, prefill_chunk=16, step_ms=10.0),
                                   Knobs(max_batch_tokens=8, max_seqs=8, step_ms=10.0)],
                         ids=["small", "chunk16", "tight"])
def test_schedule_matches_a_per_request_simulation(seed, knobs):
    """The O(1) decode sums (rows, sum, sum of squares, max of keys) and every prefill row, step by step."""
    reqs = random_trace(seed)
    want = brute_schedule(reqs, knobs)
    got = list(schedule(reqs, knobs))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"step {i}"
    # the trace exercises what it is meant to: chunked prompts, mixed steps, many decode rows
    assert any(len(s.prefill) > 1 for s in want) and any(s.prefill and s.decode_rows for s in want)
    assert max(s.decode_rows for s in want) >= 3


def test_an_idle_jump_lands_on_the_first_step_whose_clock_reached_the_arrival():
    reqs = [Request(1, 1, 0.0), Request(1, 10, 0.07), Request(1, 1, 0.09)]
    knobs = Knobs(step_ms=10.0)
    assert 7 * (knobs.step_ms / 1000) >= 0.07
    assert list(schedule(reqs, knobs)) == brute_schedule(reqs, knobs)


# --- buckets and replay -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMED_WORKLOADS)
def test_bucketing_error_is_small_for_the_named_workloads(name):
    r = replay(name)
    assert abs(r.error["packed"]) < 0.1
    assert abs(r.error["padded"]) < 0.2
    assert r.tally.requests == 3000 and r.source == "azure"


@pytest.mark.parametrize("max_buckets", [3, MAX_BUCKETS])
@pytest.mark.parametrize("name", NAMED_WORKLOADS)
def test_each_bucket_is_a_valid_batch_of_its_mean_row_count(name, max_buckets):
    r = replay(name, max_buckets=max_buckets)
    for b in r.buckets:
        groups = parse_rows(b.lengths)
        assert rows_label(groups) == b.lengths
        assert sum(n for n, _, _ in groups) == max(1, round(b.rows / b.steps)), b
        if b.phase == "decode":
            assert all(q == 1 for _, q, _ in groups)
        batch, seq_q, seq_kv = sum(n for n, _, _ in groups), max(q for _, q, _ in groups), \
            max(k for _, _, k in groups)
        shape_from_fields(dict(batch=batch, seq_q=seq_q, seq_kv=seq_kv, n_heads=2, n_kv_heads=1, head_dim=8,
                               mask="causal", lengths=b.lengths))


@pytest.mark.parametrize("max_buckets", [1, 3])
@pytest.mark.parametrize("name", NAMED_WORKLOADS)
def test_buckets_per_phase_never_exceed_max_buckets(name, max_buckets):
    r = replay(name, max_buckets=max_buckets)
    for phase in ("prefill", "decode"):
        assert 1 <= sum(b.phase == phase for b in r.buckets) <= max_buckets
    assert abs(r.error["packed"]) < 0.5  # merged buckets still stand for the same work, roughly


@pytest.mark.parametrize("max_buckets", [3, MAX_BUCKETS])
@pytest.mark.parametrize("name", NAMED_WORKLOADS)
def test_buckets_weigh_every_step_once(name, max_buckets):
    r = replay(name, max_buckets=max_buckets)
    steps = list(schedule(read(NAMED[name]), r.knobs))
    assert r.steps == len(steps)
    assert r.mixed_steps == sum(bool(s.prefill and s.decode_rows) for s in steps)
    assert sum(b.steps for b in r.buckets if b.phase == "decode") == sum(s.decode_rows > 0 for s in steps)
    assert sum(b.steps for b in r.buckets if b.phase == "prefill") == sum(bool(s.prefill) for s in steps)
    assert sum(b.rows for b in r.buckets if b.phase == "decode") == sum(s.decode_rows for s in steps)
    assert sum(b.q_tokens for b in r.buckets if b.phase == "prefill") == r.tally.prompt_tokens


def test_replay_tallies_the_trace_and_its_dict_is_json(tmp_path):
    path = write(tmp_path, "t.csv", "prompt_tokens,output_tokens,arrival_s\n10,2,0\n300,3,0.5\n5,1,2.25\n")
    r = replay(str(path), Knobs(max_batch_tokens=64, max_seqs=4))
    d = json.loads(json.dumps(r.to_dict()))
    assert d["source"] == "csv" and d["requests"] == 3
    assert (d["prompt_tokens"], d["output_tokens"], d["duration_s"]) == (315, 6, 2.25)
    assert d["prompt_hist"] == {"2": 1, "3": 1, "8": 1}  # 5 in [4, 8), 10 in [8, 16), 300 in [256, 512)
    assert d["output_hist"] == {"0": 1, "1": 2}
    assert d["knobs"] == {"max_batch_tokens": 64, "max_seqs": 4, "prefill_chunk": None, "step_ms": 25.0}
    steps = list(schedule(read(path), r.knobs))
    assert d["steps"] == len(steps)
    assert sum(b["steps"] for b in d["buckets"] if b["phase"] == "decode") == sum(s.decode_rows > 0 for s in steps)


@pytest.mark.parametrize("name", NAMED_WORKLOADS)
def test_named_replay_to_dict_is_json(name):
    d = replay(name).to_dict()
    assert json.loads(json.dumps(d))["steps"] == d["steps"] > 0
    assert all(isinstance(b["lengths"], str) and b["lengths"].startswith("rows:") for b in d["buckets"])


# --- explicit rows in a shape -----------------------------------------------------------------------------------------

def rows_shape(**kwargs: object) -> AttentionShape:
    base = {"batch": 3, "seq_q": 4, "seq_kv": 9, "n_heads": 2, "n_kv_heads": 1, "head_dim": 8, "mask": "causal",
            "lengths": "rows:2x1:9+1x4:6"}
    return shape_from_fields(dict(**{**base, **kwargs}))


def test_rows_shape_is_accepted_and_its_workload_lists_every_row_in_order():
    w = workload_of(rows_shape())
    assert (w.q_lens, w.kv_lens, w.page_size) == ((1, 1, 4), (9, 9, 6), None)


def test_parse_rows_and_rows_label_are_inverse():
    assert parse_rows("rows:12x1:640+2x512:1024") == ((12, 1, 640), (2, 512, 1024))
    assert rows_label(((12, 1, 640), (2, 512, 1024))) == "rows:12x1:640+2x512:1024"


@pytest.mark.parametrize("kwargs", [{"batch": 2}, {"batch": 4}, {"seq_q": 5, "seq_kv": 10}, {"seq_q": 3},
                                    {"seq_kv": 10}])
def test_rows_must_match_batch_seq_q_and_seq_kv(kwargs):
    with pytest.raises(ShapeError, match="rows:2x1:9\\+1x4:6") as err:
        rows_shape(**kwargs)
    assert "batch, seq_q and seq_kv" in str(err.value)


@pytest.mark.parametrize("lengths, words", [
    ("rows:2x5:3", "1 <= Q <= K"),
    ("rows:0x1:3", "N >= 1"),
    ("rows:2x0:3", "1 <= Q <= K"),
    ("rows:abc", "NxQ:K"),
    ("rows:2x1:9+", "NxQ:K"),
    ("rows:", "NxQ:K"),
    ("rows:2x1:9,1x4:6", "NxQ:K"),
])
def test_malformed_rows_are_a_shape_error(lengths, words):
    with pytest.raises(ShapeError, match=words):
        parse_rows(lengths)
    with pytest.raises(ShapeError, match=words):
        rows_shape(lengths=lengths)


def test_rows_with_a_page_size_need_every_query_count_below_its_keys():
    w = workload_of(rows_shape(page_size=4))
    assert w.page_size == 4 and w.kv_lens == (9, 9, 6)
    rows_shape(batch=2, lengths="rows:1x4:4+1x1:9")  # a whole prompt beside a decode step: fine unpaged...
    with pytest.raises(ShapeError, match="page_size"):
        rows_shape(batch=2, lengths="rows:1x4:4+1x1:9", page_size=4)  # ...but not paged


def test_finished_decode_rows_do_not_pile_up_below_a_long_running_one():
    """Memory stays flat in the trace's length: the lazy max-heap is rebuilt when finished rows outnumber live ones."""
    from bench.traces.schedule import _Decoding

    d = _Decoding()
    d.add(10_000, last_step=1_000_000)  # one long request, at the top of the heap throughout
    for t in range(10_000):
        d.add(-t, last_step=t)  # each later request starts lower and ends at once
        d.finish(t)
        assert d.rows(t)[0] == 1 and d.rows(t)[3] == t + 10_000
    assert len(d.top) <= 2 * d.n + 64 and len(d.gone) <= 65


# --- the sample of real steps that checks the buckets in time ---------------------------------------------------------

def test_the_sampled_steps_are_seeded_and_stratified_by_kind():
    from bench.traces import replay as replay_module
    from bench.traces.sample import CHECK_STEPS, KINDS, MIN_PER_KIND

    first = replay("azure-conv", max_buckets=4)
    replay_module._replay.cache_clear()
    again = replay("azure-conv", max_buckets=4)
    assert first is not again and first.checks == again.checks  # the same steps, read afresh
    assert replay("azure-conv", max_buckets=12).checks[0].index == first.checks[0].index  # buckets do not move it
    kinds = [c.kind for c in first.checks]
    assert len(kinds) == CHECK_STEPS and set(kinds) == set(KINDS)
    # azure-conv has 2 prefill-only steps (the first ones, before anything decodes): both are in; mixed steps get
    # their least, decode steps (22,293 to 3,328 mixed) the rest
    assert first.kinds["prefill"] == 2 and first.kinds["decode"] > 6 * first.kinds["mixed"]
    assert [kinds.count(k) for k in KINDS] == [2, CHECK_STEPS - 2 - MIN_PER_KIND, MIN_PER_KIND]
    assert sum(first.kinds.values()) == first.steps and first.kinds["mixed"] == first.mixed_steps
    assert [c.index for c in first.checks] == sorted({c.index for c in first.checks})  # distinct, in trace order


def test_a_trace_of_one_kind_gives_the_whole_sample_to_it_and_each_of_its_steps_is_as_likely(tmp_path):
    from bench.traces.sample import CHECK_STEPS, Sampler

    path = lines(tmp_path, *(fi("gqa_paged_decode_h32_kv8_d128_ps16", len_indptr=3, num_kv_indices=4 + i)
                             for i in range(40)))
    r = replay(str(path))
    assert [c.kind for c in r.checks] == ["decode"] * min(CHECK_STEPS, 40)
    taken = [0] * 30
    for seed in range(600):  # Algorithm R: each of 30 steps is in a sample of 3 with probability 1/10
        sampler = Sampler(3, seed)
        for _ in range(30):
            step = Step((), 2, 10, 50, 5)
            sampler.wants(step)
            sampler.keep(step)
        for index, _ in sampler.drawn():
            taken[index] += 1
    assert sum(taken) == 1800 and min(taken) > 30 and max(taken) < 90  # 60 expected each; 4+ sd either way


def test_kinds_share_the_sample_in_proportion_to_their_steps_after_their_least():
    from bench.traces.sample import MIN_PER_KIND, shares

    every = {"prefill": 99, "decode": 99, "mixed": 99}
    assert shares(30, {"prefill": 0, "decode": 900, "mixed": 100}, {"prefill": 0, "decode": 30, "mixed": 30}) == {
        "prefill": 0, "decode": 30 - MIN_PER_KIND, "mixed": MIN_PER_KIND}  # 27:3 by steps; mixed's least first
    assert shares(40, {"prefill": 100, "decode": 200, "mixed": 100}, every) == {
        "prefill": 10, "decode": 20, "mixed": 10}
    # a kind with fewer steps than its share is sampled whole and the rest goes by the others' steps
    assert shares(20, {"prefill": 2, "decode": 300, "mixed": 100}, {"prefill": 2, "decode": 20, "mixed": 20}) == {
        "prefill": 2, "decode": 13, "mixed": 5}
    # fewer than the kinds' least: one each in turn, prefill-only first
    assert shares(4, {"prefill": 10, "decode": 10, "mixed": 10}, every) == {"prefill": 2, "decode": 1, "mixed": 1}


@pytest.mark.parametrize("seed", [0, 1])
def test_a_sampled_step_is_written_out_exactly_as_the_schedule_ran_it(seed, tmp_path):
    from bench.traces.sample import prefill_rows

    reqs = random_trace(seed, n=120)
    path = write(tmp_path, "t.csv", "prompt_tokens,output_tokens,arrival_s\n"
                 + "".join(f"{r.prompt},{r.output},{r.arrival_s}\n" for r in reqs))
    r = replay(str(path), SMALL)
    want = brute_schedule(reqs, SMALL)
    assert {c.kind for c in r.checks} == {"prefill", "decode", "mixed"}
    for c in r.checks:
        step = want[c.index]  # the brute simulation lists each decode row's keys
        assert c.prefill == prefill_rows(step) and bool(c.prefill) == bool(step.prefill)
        assert all(q == 1 for _, q, _ in parse_rows(c.decode)) if c.decode else not step.decode_rows
        assert _sums(c.decode) == (step.decode_rows, step.decode_kv_sum, step.decode_kv_sumsq, step.decode_kv_max,
                                   step.decode_kv)


@pytest.mark.parametrize("name", NAMED_WORKLOADS)
def test_a_sampled_step_is_predicted_by_the_buckets_its_halves_are_weighed_in(name):
    """Every step's halves assigned by the rule the samples use land in the buckets exactly as often as the buckets
    count their steps: the check compares a step with the bucket the replay weighs it in."""
    from collections import Counter

    from bench.traces.buckets import decode_key, nearest, prefill_key
    from bench.traces.sample import checked

    r = replay(name, max_buckets=4)
    pre = [b for b in r.buckets if b.phase == "prefill"]
    dec = [b for b in r.buckets if b.phase == "decode"]
    counted: Counter = Counter()
    for s in schedule(read(NAMED[name]), r.knobs):
        if s.prefill:
            counted["prefill", nearest(pre, prefill_key(sum(q for q, _ in s.prefill), sum(k for _, k in s.prefill),
                                                        len(s.prefill))).lengths] += 1
        if s.decode_rows:
            counted["decode", nearest(dec, decode_key(s.decode_rows, s.decode_kv_sum)).lengths] += 1
    assert counted == Counter({(b.phase, b.lengths): b.steps for b in r.buckets})
    for c in r.checks:
        again = checked(c.index, Step(tuple((q, k) for n, q, k in parse_rows(c.prefill) for _ in range(n))
                                      if c.prefill else (),
                                      *_sums(c.decode)), list(r.buckets))
        assert (again.prefill_bucket, again.decode_bucket) == (c.prefill_bucket, c.decode_bucket)
        assert bool(c.prefill_bucket) == bool(c.prefill) and bool(c.decode_bucket) == bool(c.decode)


def _sums(decode: str) -> tuple:
    keys = [k for n, _, k in parse_rows(decode) for _ in range(n)] if decode else []
    return len(keys), sum(keys), sum(k * k for k in keys), max(keys, default=0), tuple(keys)


def test_the_sample_adds_cases_and_changes_no_bucket_case(monkeypatch):
    """Every profile's cases without the sample are still there, in their order; the new ones are the sampled steps'
    halves, one a backend, after the buckets'."""
    import functools

    from bench.engine import options
    from bench.profiles import PROFILES
    from bench.traces import replay as replay_module
    from bench.traces.sample import CHECK_STEPS, MIN_PER_KIND

    def ids(profile: str, device: str) -> list[str]:
        plan = options.plan(options.RunRequest(profile=profile, device=device), default_out=False, listing=True)
        return [c.id for c in plan.cases]

    profiles = [(p, d) for d in ("cpu", "cuda") for p in PROFILES[d]]
    with_sample = {key: ids(*key) for key in profiles}
    monkeypatch.setattr(replay_module, "replay", functools.partial(replay_module.replay, check_steps=0))
    for key in profiles:
        before, now = ids(*key), with_sample[key]
        assert [i for i in now if i in set(before)] == before, key
        added = [i for i in now if i not in set(before)]
        assert all("lengths=rows:" in i for i in added), key
        if key == ("default", "cpu"):  # azure-conv: 2 prefill-only steps, mixed ones (two halves each) their least,
            mixed = MIN_PER_KIND  # decode-only ones the rest; on 2 backends
            assert len(added) == (2 + (CHECK_STEPS - 2 - mixed) + 2 * mixed) * 2
