"""Traces whose requests reuse each other's prefixes: Mooncake's, Qwen-Bailian's and BurstGPT's readers (a bad row
refused by its line), the LRU prefix cache and its hit accounting on hand-made traces whose answers are worked out
below, the schedule with the cache, the shipped Mooncake slices, the report's with/without-cache table, and
`bench run --prefix-cache` on the command line (bad input: one line, exit 2, nothing run)."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest

from bench.errors import UsageError
from bench.traces.cache import CacheStats, PrefixCache, Sharing, prefix_tokens
from bench.traces.replay import replay
from bench.traces.requests import NAMED, Request, TraceError, file_format, read_requests
from bench.traces.reuse import FAILED
from bench.traces.schedule import Knobs, schedule

MOONCAKE = [{"timestamp": 1000, "input_length": 600, "output_length": 3, "hash_ids": [7, 8]},
            {"timestamp": 1500, "input_length": 512, "output_length": 1, "hash_ids": [7]}]
BAILIAN = [{"chat_id": 1, "parent_chat_id": -1, "timestamp": 2.5, "input_length": 20, "output_length": 4,
            "type": "text", "turn": 1, "hash_ids": [1, 2]},
           {"chat_id": 2, "parent_chat_id": 1, "timestamp": 3.0, "input_length": 40, "output_length": 2,
            "type": "search", "turn": 2, "hash_ids": [1, 2, 3]}]
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n"
            "7,GPT-4,1000,0,1000,API log\n"
            "9.5,ChatGPT,30,12,42,API log\n")


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --- readers ----------------------------------------------------------------------------------------------------------

def test_mooncake_rows_carry_their_512_token_blocks_and_arrive_in_seconds_from_the_first(tmp_path):
    path = jsonl(tmp_path / "m.jsonl", MOONCAKE)
    assert file_format(path) == "mooncake"
    got = list(read_requests(path))
    assert got == [Request(600, 3, 0.0), Request(512, 1, 0.5)]
    assert [r.blocks for r in got] == [(7, 8), (7,)] and {r.block for r in got} == {512}
    assert [got[0].block_tokens(i) for i in range(2)] == [512, 88]  # the last block is what is left


@pytest.mark.parametrize("change, words", [
    ({"hash_ids": [7, 8]}, "2 hash_ids for input_length 512: expected ceil(512 / 512) = 1"),
    ({"hash_ids": []}, "0 hash_ids for input_length 512"),
    ({"input_length": 1100}, "1 hash_ids for input_length 1100: expected ceil(1100 / 512) = 3"),
    ({"hash_ids": "7,8"}, "hash_ids must be a list of whole numbers"),
    ({"hash_ids": [7, -1]}, "hash_ids must be a list of whole numbers"),
    ({"input_length": 0}, "input_length 0 must be between 1"),
    ({"output_length": "x"}, "output_length 'x' is not a whole number"),
    ({"timestamp": -3}, "timestamp -3.0 must be a finite number"),
    ({"timestamp": 500}, "before the previous row's"),
])
def test_a_bad_mooncake_row_is_refused_by_its_line(tmp_path, change, words):
    path = jsonl(tmp_path / "m.jsonl", [MOONCAKE[0], MOONCAKE[1] | change])
    with pytest.raises(TraceError, match=r".*") as err:
        list(read_requests(path))
    assert str(err.value).startswith(f"{path}:2: ") and words in str(err.value)


def test_a_mooncake_row_without_hash_ids_is_refused_naming_the_field(tmp_path):
    path = jsonl(tmp_path / "m.jsonl", [MOONCAKE[0], {k: v for k, v in MOONCAKE[1].items() if k != "hash_ids"}])
    with pytest.raises(TraceError, match=r":2: no hash_ids"):
        list(read_requests(path))


def test_bailian_rows_carry_their_16_token_blocks(tmp_path):
    path = jsonl(tmp_path / "b.jsonl", BAILIAN)
    assert file_format(path) == "bailian"
    got = list(read_requests(path))
    assert got == [Request(20, 4, 0.0), Request(40, 2, 0.5)]
    assert [r.blocks for r in got] == [(1, 2), (1, 2, 3)] and {r.block for r in got} == {16}


@pytest.mark.parametrize("change, words", [
    ({"hash_ids": [1, 2]}, "2 hash_ids for input_length 40: expected ceil(40 / 16) = 3"),
    ({"type": "video"}, "type 'video' is none of text, search, image, file"),
    ({"turn": 0}, "turn 0 must be between 1"),
    ({"parent_chat_id": -2}, "parent_chat_id -2 must be between 0"),
    ({"chat_id": None}, "chat_id None is not a whole number"),
])
def test_a_bad_bailian_row_is_refused_by_its_line(tmp_path, change, words):
    path = jsonl(tmp_path / "b.jsonl", [BAILIAN[0], BAILIAN[1] | change])
    with pytest.raises(TraceError) as err:
        list(read_requests(path))
    assert str(err.value).startswith(f"{path}:2: ") and words in str(err.value)


def test_burstgpt_skips_failed_requests_and_counts_them(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(BURSTGPT)
    assert file_format(path) == "burstgpt"
    skipped: dict[str, int] = {}
    got = list(read_requests(path, skipped))
    assert got == [Request(472, 18, 0.0), Request(30, 12, 4.5)] and got[0].blocks == ()
    assert skipped == {FAILED: 1}
    assert "1 rows skipped: failed (0 response tokens)" in replay(str(path)).summary()


def test_burstgpt_with_session_columns_is_read(tmp_path):
    path = tmp_path / "burst3.csv"
    path.write_text("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "1,,2.5,GPT-4,10,5,15,API log\n")
    assert list(read_requests(path)) == [Request(10, 5, 0.0)]


@pytest.mark.parametrize("row, words", [
    ("8,ChatGPT,30,12,40,API log", "Total tokens 40 is not Request tokens + Response tokens (30 + 12)"),
    ("8,ChatGPT,0,12,12,API log", "Request tokens 0 must be between 1"),
    ("8,ChatGPT,30,-1,29,API log", "Response tokens -1 must be between 0"),
    ("x,ChatGPT,30,12,42,API log", "Timestamp 'x' is not a number"),
    ("8,ChatGPT,30,12,42", "5 fields, expected the header's 6"),
])
def test_a_bad_burstgpt_row_is_refused_by_its_line(tmp_path, row, words):
    path = tmp_path / "burst.csv"
    path.write_text(BURSTGPT.splitlines()[0] + "\n" + BURSTGPT.splitlines()[1] + "\n" + row + "\n")
    with pytest.raises(TraceError) as err:
        list(read_requests(path))
    assert str(err.value).startswith(f"{path}:3: ") and words in str(err.value)


@pytest.mark.parametrize("name", ["mooncake-conv", "mooncake-synthetic"])
def test_the_shipped_mooncake_slices_parse_with_a_block_hash_per_512_tokens(name):
    got = list(read_requests(NAMED[name]))
    assert len(got) == 500 and got[0].arrival_s == 0.0 and got[-1].arrival_s > 0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(got, got[1:], strict=False))
    assert all(r.block == 512 and len(r.blocks) == math.ceil(r.prompt / 512) for r in got)
    assert file_format(NAMED[name]) == "mooncake"


def test_the_shipped_data_names_each_sources_licence():
    data = NAMED["mooncake-conv"].parent
    readme = (data / "README.md").read_text()
    assert "Apache License 2.0" in readme and "kvcache-ai/Mooncake" in readme and "FAST 25" in readme
    assert "Apache License" in (data / "LICENSE-mooncake").read_text()


# --- the cache --------------------------------------------------------------------------------------------------------

def test_the_cache_keeps_capacity_blocks_evicting_the_least_recently_used():
    cache = PrefixCache(3)
    cache.use((1, 2, 3))  # used last to first: 1 is the most recent
    assert list(cache.blocks) == [3, 2, 1]
    cache.use((4,))
    assert list(cache.blocks) == [2, 1, 4] and cache.stats.evictions == 1
    assert cache.hits((1, 2, 9)) == 2 and cache.hits((3, 1)) == 0  # the leading run up to the first miss (3: evicted)
    assert cache.hits((9, 2)) == 0


def test_a_request_longer_than_the_cache_keeps_its_leading_blocks():
    cache = PrefixCache(2)
    cache.use((1, 2, 3))  # 3, then 2, then 1: 3 is evicted first
    assert list(cache.blocks) == [2, 1] and cache.stats.evictions == 1


def test_a_lookup_counts_the_leading_hits_and_never_the_last_prompt_token():
    stats = CacheStats()
    cache = PrefixCache(8, stats)
    cache.use((1, 2))
    assert cache.lookup(Request(10, 1, 0.0, (1, 2, 3), 4)) == 8  # blocks 1 and 2: 4 + 4 tokens
    assert cache.lookup(Request(8, 1, 0.0, (1, 2), 4)) == 7  # all of it cached: the last token is still computed
    assert cache.lookup(Request(6, 1, 0.0, (5, 2), 4)) == 0  # 2 is cached, but not the leading block
    assert (stats.requests, stats.prompt_tokens, stats.cached_tokens) == (3, 24, 15)
    assert (stats.blocks, stats.block_hits) == (7, 4)
    assert stats.hit_rate == pytest.approx(15 / 24) and stats.block_hit_rate == pytest.approx(4 / 7)


def test_zero_blocks_is_not_a_cache():
    with pytest.raises(UsageError, match="--prefix-cache 0: a cache must hold at least 1 block; give none"):
        Knobs(prefix_cache=0)
    with pytest.raises(ValueError):
        PrefixCache(0)


# --- the schedule with the cache --------------------------------------------------------------------------------------

# Blocks of 4 tokens; a step every 25 ms. A (8 tokens: blocks 1, 2) prefills at step 0 and decodes at step 1; its
# blocks enter the cache when its prefill ends (step 0). B (10 tokens: 1, 2, 3) arrives at 0.05 s = step 2: blocks
# 1 and 2 hit, 8 tokens cached, so it prefills 2 queries over 10 keys instead of 10 over 10.
HAND = [Request(8, 2, 0.0, (1, 2), 4), Request(10, 1, 0.05, (1, 2, 3), 4)]
SMALL = {"max_batch_tokens": 16, "max_seqs": 4}


def test_a_hand_made_trace_prefills_only_its_uncached_tokens_over_the_whole_context():
    stats = CacheStats()
    cached = [s.prefill for s in schedule(HAND, Knobs(**SMALL, prefix_cache=4), stats=stats)]
    plain = [s.prefill for s in schedule(HAND, Knobs(**SMALL))]
    assert plain == [((8, 8),), (), ((10, 10),)]
    assert cached == [((8, 8),), (), ((2, 10),)]
    assert (stats.prompt_tokens, stats.cached_tokens, stats.blocks, stats.block_hits) == (18, 8, 5, 2)
    assert stats.hit_rate == pytest.approx(8 / 18)


def test_requests_admitted_together_both_prefill_a_prefix_neither_has_finished():
    same = [Request(8, 1, 0.0, (1, 2), 4), Request(8, 1, 0.0, (1, 2), 4)]
    stats = CacheStats()
    steps = [s.prefill for s in schedule(same, Knobs(**SMALL, prefix_cache=8), stats=stats)]
    assert steps == [((8, 8), (8, 8))] and stats.cached_tokens == 0


def test_an_evicted_prefix_is_prefilled_again():
    # A's blocks 1, 2 enter a cache of 2; C (blocks 5, 6) pushes them out; D (1, 2) then finds nothing
    reqs = [Request(8, 1, 0.0, (1, 2), 4), Request(8, 1, 0.025, (5, 6), 4), Request(8, 1, 0.05, (1, 2), 4)]
    stats = CacheStats()
    steps = [s.prefill for s in schedule(reqs, Knobs(**SMALL, prefix_cache=2), stats=stats)]
    assert steps == [((8, 8),), ((8, 8),), ((8, 8),)]
    assert stats.cached_tokens == 0 and stats.evictions == 4  # 1, 2 (by 5, 6), then 5, 6 (by D's 1, 2)
    bigger = CacheStats()
    assert [s.prefill for s in schedule(reqs, Knobs(**SMALL, prefix_cache=4), stats=bigger)][2] == ((1, 8),)


def test_decode_rows_that_share_leading_blocks_are_counted_with_their_prefix():
    # three requests decode together from step 1: two share blocks 1, 2 (8 tokens), the third starts with 9
    reqs = [Request(10, 3, 0.0, (1, 2, 3), 4), Request(9, 3, 0.0, (1, 2, 4), 4), Request(5, 3, 0.0, (9, 5), 4)]
    steps = list(schedule(reqs, Knobs(max_batch_tokens=32, max_seqs=4)))
    assert [(s.decode_rows, s.shared_rows, s.shared_group, s.shared_prefix) for s in steps] == \
        [(0, 0, 0, 0), (3, 2, 2, 8), (3, 2, 2, 8)]


def test_the_largest_sharing_group_and_its_common_prefix():
    sharing = Sharing()
    for blocks, prompt in (((1, 2, 3), 12), ((1, 2, 5), 12), ((1, 7), 6), ((4,), 3)):
        sharing.add(Request(prompt, 5, 0.0, blocks, 4), 10)
    assert sharing.now() == (3, 3, 4)  # rows 1-3 share block 1 only
    sharing.finish(10)
    assert sharing.now() == (0, 0, 0)
    assert prefix_tokens([Request(6, 1, 0.0, (1, 9), 4), Request(6, 1, 0.0, (1, 9), 4)]) == 6  # partial last block


def test_the_cache_prefills_fewer_tokens_of_a_shipped_trace_and_conserves_the_prompt():
    reqs = list(read_requests(NAMED["mooncake-conv"]))
    stats = CacheStats()
    cached = sum(q for s in schedule(reqs, Knobs(prefix_cache=1 << 20), stats=stats) for q, _ in s.prefill)
    plain = sum(q for s in schedule(reqs, Knobs()) for q, _ in s.prefill)
    assert plain == sum(r.prompt for r in reqs) == stats.prompt_tokens
    assert cached == plain - stats.cached_tokens < plain and stats.hit_rate > 0.1


def test_a_replay_with_a_cache_keeps_the_schedule_without_it_and_says_both():
    played = replay("mooncake-conv", Knobs(prefix_cache=1 << 20), 3)
    assert played.without is not None and played.without.cache is None and not played.without.checks
    assert played.without.steps == replay("mooncake-conv", Knobs(), 3).steps
    d = json.loads(json.dumps(played.to_dict()))
    cache = d["prefix_cache"]
    assert cache["capacity"] == 1 << 20 and 0 < cache["hit_rate"] < 1 and cache["without"]["buckets"]
    assert d["block_requests"] == 500 and d["shared_steps"] > 0
    assert "prefix cache of 1,048,576 blocks:" in played.summary() and "steps against" in played.summary()


def test_both_schedules_share_one_set_of_buckets_each_weighed_by_its_own_steps():
    played = replay("mooncake-conv", Knobs(prefix_cache=1 << 20), 3)
    assert [b.lengths for b in played.buckets] == [b.lengths for b in played.without.buckets]
    reqs = list(read_requests(NAMED["mooncake-conv"]))
    for r, knobs in ((played, Knobs(prefix_cache=1 << 20)), (played.without, Knobs())):
        steps = list(schedule(reqs, knobs))
        for phase, has in (("prefill", lambda s: bool(s.prefill)), ("decode", lambda s: s.decode_rows > 0)):
            assert sum(b.steps for b in r.buckets if b.phase == phase) == sum(map(has, steps))
        assert sum(b.q_tokens for b in r.buckets if b.phase == "prefill") == sum(q for s in steps for q, _ in s.prefill)
    assert abs(played.error["packed"]) < 0.1 and abs(played.without.error["packed"]) < 0.1


def test_a_cache_on_a_trace_without_blocks_is_said_to_miss_and_schedules_once():
    played = replay("azure-conv", Knobs(prefix_cache=64), 3)
    assert played.without is None and played.cache.cached_tokens == 0
    assert "no block hashes in this trace, so it cannot hit" in played.summary()
    assert "prefix_cache" in played.to_dict() and "without" not in played.to_dict()["prefix_cache"]


def test_a_replay_without_a_cache_is_as_it_was():
    d = replay("azure-conv", Knobs(), 3).to_dict()
    assert not {"prefix_cache", "block_requests", "shared_steps", "skipped"} & set(d)
    assert all(set(b) == {"phase", "lengths", "steps", "rows", "q_tokens", "kv_tokens", "packed", "padded"}
               for b in d["buckets"])


# --- the report -------------------------------------------------------------------------------------------------------

def test_the_report_prices_the_trace_with_and_without_the_cache(tmp_path):
    from bench.analysis.load import read_results
    from bench.analysis.time_to_serve import serve_table
    from bench.report.sections.traces import cache_blocks
    from tests.results_factory import make_record, make_run

    prefill, decode = "rows:2x64:64", "rows:4x1:512"

    def bucket(backend: str, phase: str, median_s: float) -> dict:
        lengths, batch, seq = (prefill, 2, 64) if phase == "prefill" else (decode, 4, 512)
        rec = make_record(backend, n_kv_heads=2, seq=seq, batch=batch, phase=phase, median_s=median_s,
                          lengths=lengths, page_size=16 if phase == "decode" else None)
        rec["case_id"] += f"-lengths={lengths}"
        return rec

    buckets = [{"phase": "prefill", "lengths": prefill, "steps": 10}, {"phase": "decode", "lengths": decode,
                                                                       "steps": 100}]
    without = [{"phase": "prefill", "lengths": prefill, "steps": 30}, {"phase": "decode", "lengths": decode,
                                                                       "steps": 100}]
    w = {"source": "mooncake", "requests": 10, "prompt_tokens": 1280, "output_tokens": 400, "steps": 110,
         "buckets": buckets, "prefix_cache": {"capacity": 64, "prompt_tokens": 1280, "cached_tokens": 320,
                                              "blocks": 40, "block_hits": 10, "evictions": 0, "hit_rate": 0.25,
                                              "without": {"steps": 130, "buckets": without}}}
    path = tmp_path / "run.json"
    # naive: 10 x 2 ms + 100 x 1 ms = 120 ms with, 160 ms without; flex: 10 x 1 + 100 x 0.5 = 60 ms, 80 ms without
    path.write_text(json.dumps(make_run([bucket("naive", "prefill", 2e-3), bucket("naive", "decode", 1e-3),
                                         bucket("flex", "prefill", 1e-3), bucket("flex", "decode", 0.5e-3)])))
    df = read_results(path)[0]
    mine = serve_table(df, {"w": w})
    blocks = cache_blocks(df, "w", w, mine)
    said, table = blocks[0].text, blocks[1]
    assert "25.0% of the prompt tokens were cached (320 of 1,280; 10 of 40 blocks hit" in said
    assert "130 steps against 110, priced with the same buckets" in said
    assert "with the cache flex is fastest (60 ms); without the cache flex is fastest (80 ms)" in said
    assert [row[0] for row in table.rows] == ["flex", "naive"]
    assert table.rows[1][1:] == ["120 ms", "160 ms", "25.0%"]
    assert cache_blocks(df, "w", {k: v for k, v in w.items() if k != "prefix_cache"}, mine) == []


# --- the command line -------------------------------------------------------------------------------------------------

@pytest.fixture
def cli(monkeypatch):
    """bench.cli.main, its options recorded from the modules where bench/commands/arguments.json predates
    --prefix-cache (the lead regenerates that file)."""
    from bench.cli import main
    from bench.commands import spec

    if "--prefix-cache" not in spec.SPEC_FILE.read_text():
        monkeypatch.setattr(spec, "load", functools.cache(spec.record))
    return main


@pytest.mark.parametrize("value, words", [("0", "--prefix-cache"), ("-4", "--prefix-cache"),
                                          ("lots", "expected one integer")])
def test_a_bad_cache_capacity_is_one_line_and_exit_2_before_anything_runs(cli, capsys, tmp_path, value, words):
    out = tmp_path / "run.json"
    assert cli(["run", "--workload", "mooncake-conv", "--prefix-cache", value, "--backend", "naive",
                "--device", "cpu", "--plan", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and not out.exists()


def test_a_mismatched_hash_list_is_refused_by_line_with_exit_2(cli, capsys, tmp_path):
    path = jsonl(tmp_path / "m.jsonl", [MOONCAKE[0], MOONCAKE[1] | {"hash_ids": [7, 8]}])
    assert cli(["run", "--workload", str(path), "--prefix-cache", "8", "--backend", "naive", "--device", "cpu",
                "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:2: 2 hash_ids for input_length 512" in err


def test_the_plan_says_the_caches_hit_rate_and_times_both_schedules_buckets(cli, capsys):
    # on the CPU: the float64 check of a decode bucket with 2-key rows beside 30,000-key ones is not halved there
    # (bench.kinds.serving halves a row of 2 keys to 1, which a paged decode row refuses)
    assert cli(["run", "--workload", "mooncake-conv", "--prefix-cache", "16384", "--buckets", "2", "--backend",
                "naive", "--device", "cpu", "--plan"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("trace mooncake-conv:"))
    assert "prefix cache of 16,384 blocks: 16.4% of prompt tokens cached" in line
    played = replay("mooncake-conv", Knobs(prefix_cache=16384), 2)
    both = {(b.phase, b.lengths) for b in played.buckets + played.without.buckets}
    checks = sum(bool(c.prefill) + bool(c.decode) for c in played.checks)
    assert sum("lengths=rows:" in line for line in out.splitlines()) == len(both) + checks
    assert cli(["run", "--workload", "mooncake-conv", "--prefix-cache", "none", "--buckets", "2", "--backend",
                "naive", "--device", "cpu", "--plan"]) == 0
    assert "prefix cache" not in capsys.readouterr().out
