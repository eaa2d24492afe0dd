import pytest

from bench.cli import main
from bench.results import ResultsError, read_run, write_atomic
from bench.results.merge import merge_shards
from tests.results_factory import make_record, make_run


def shard(seqs, **kw):
    recs = [make_record(seq=s) for s in seqs] + [make_record(backend="sdpa-cudnn", seq=seqs[0], status="unsupported")]
    return make_run(recs, **kw)


def test_shards_merge_by_case_id():
    merged = merge_shards([shard([256, 512]), shard([1024])], ["a", "b"])
    ids = merged.case_ids()
    assert len(ids) == len(set(ids)) == 5
    assert all(e.timed for e in merged.benchmarks) and len(merged.untimed) == 2
    assert merged.meta.complete is True


def test_a_case_in_two_shards_is_refused():
    with pytest.raises(ResultsError, match="also in a"):
        merge_shards([shard([256]), shard([256])], ["a", "b"])


def test_shards_of_other_sweeps_are_refused():
    with pytest.raises(ResultsError, match="b: its profile differs"):
        merge_shards([shard([256]), shard([512], profile="default")], ["a", "b"])
    with pytest.raises(ResultsError, match="fingerprint differs"):
        merge_shards([shard([256]), shard([512], fingerprint={"threads": 8})], ["a", "b"])


def test_merge_cli(tmp_path, capsys):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "all.json"
    write_atomic(a, shard([256]))
    write_atomic(b, shard([512], complete=False))
    assert main(["merge", str(a), str(b), "--out", str(out)]) == 0
    assert "4 cases from 2 shards (some shard is incomplete)" in capsys.readouterr().out
    assert read_run(out).meta.complete is False
    assert main(["merge", str(a), str(b), "--out", str(out)]) == 2  # never overwrites
    assert "exists" in capsys.readouterr().err
