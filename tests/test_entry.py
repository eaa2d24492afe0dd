"""The typed entry (bench.results.entry.Entry): what readers get, and what a rewritten file keeps."""

from __future__ import annotations

import json
from pathlib import Path

from bench.results import Entry, RunDocument, json_safe, read_run
from bench.results.entry import case_entry, pooled_entry
from bench.results.record import RECORD_FIELDS, Record
from tests.results_factory import make_record, make_run

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "results" / "example").glob("*.json"))


def _kept(old, new) -> bool:
    """Every key and value of `old` is in `new` (new may add keys: fields a later version records)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and _kept(v, new[k]) for k, v in old.items())
    if isinstance(old, list):
        return isinstance(new, list) and len(old) == len(new) and all(map(_kept, old, new))
    return old == new


def test_rewriting_a_results_file_through_its_entries_loses_nothing():
    assert EXAMPLES
    for path in EXAMPLES:
        raw = json.loads(path.read_text())
        rewritten = json_safe(read_run(path).to_dict())
        assert _kept(raw, rewritten), path.name
        added = {k for e in rewritten["benchmarks"] for k in e["extra_info"]} - {
            k for e in raw["benchmarks"] for k in e["extra_info"]}
        assert added <= set(RECORD_FIELDS), added  # only fields the file predates, each as null


def test_readers_get_typed_fields_and_unknown_keys_travel_along():
    doc = make_run([make_record(seq=64)])
    entry_dict = doc["benchmarks"][0]
    entry_dict["extra_info"]["from_a_later_version"] = 7
    entry_dict["other_tool"] = {"x": 1}
    entry = RunDocument.from_dict(doc).entries()[0]
    assert isinstance(entry.record, Record) and entry.record.shape.seq_q == 64 and entry.record.median_s > 0
    assert entry.timed and entry.samples == tuple(entry_dict["stats"]["data"])
    assert entry.unknown == {"from_a_later_version": 7} and entry.other == {"other_tool": {"x": 1}}
    back = entry.to_dict()
    assert back["extra_info"]["from_a_later_version"] == 7 and back["other_tool"] == {"x": 1}
    assert Entry.from_dict(back) == entry


def test_a_pooled_entry_keeps_its_passes_in_the_file_and_back():
    first = RunDocument.from_dict(make_run([make_record()])).entries()[0]
    pooled = pooled_entry(first, [1.0, 2.0, 3.0, 4.0], pass_rounds=(2, 2), pass_gemm=(1e9, None))
    assert pooled.record.median_s == 2.5 and pooled.record.rounds == 4 and pooled.record.ci_low_s is None
    info = pooled.to_dict()["extra_info"]
    assert info["pass_rounds"] == [2, 2] and info["pass_gemm"] == [1e9, None]
    again = Entry.from_dict(pooled.to_dict())
    assert again.pass_rounds == (2, 2) and again.pass_gemm == (1e9, None) and again.samples == (1.0, 2.0, 3.0, 4.0)


def test_an_untimed_case_is_filed_apart_from_the_timed_ones():
    doc = RunDocument()
    doc.add(case_entry(Record(case_id="a", status="ok"), [1.0, 2.0]))
    doc.add(case_entry(Record(case_id="b", status="unsupported", reason="no")))
    assert [e.case_id for e in doc.benchmarks] == ["a"] and [e.case_id for e in doc.untimed] == ["b"]
    assert doc.to_dict()["attnbench"]["untimed"][0]["stats"] is None
