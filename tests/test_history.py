"""`bench history`: commits ordered by date, medians per case, change points judged like compare, bad input."""

from __future__ import annotations

import random

import pytest

from bench.cli import main
from bench.regress.history import HistoryError, build_history, commit_of, family
from bench.results import RunDocument, write_atomic
from bench.results.record import Record
from tests.results_factory import make_record, make_run

CASES = [(b, s, hkv) for b in ("sdpa", "naive", "sdpa-flash") for s in (256, 512) for hkv in (8, 2)]  # 12 cases
SHAS = {"c1": "a" * 40, "c2": "b" * 40, "c3": "c" * 40}
# c3 without an offset: taken as UTC, and still ordered with the others
DATES = {"c1": "2026-11-01T10:00:00+00:00", "c2": "2026-11-02T10:00:00+00:00", "c3": "2026-11-03T10:00:00"}


def run_at(commit: str, slow_backend: str | None = None, factor: float = 1.0, seed: int = 0) -> dict:
    rng = random.Random(f"{commit}-{seed}")
    recs = []
    for backend, seq, hkv in CASES:
        m = 1e-4 * seq / 256 * (2 if backend == "naive" else 1) * (factor if backend == slow_backend else 1.0)
        samples = [m * (1 + rng.uniform(-0.02, 0.02)) for _ in range(20)]
        recs.append(make_record(backend=backend, seq=seq, n_kv_heads=hkv, median_s=m, samples=samples))
    doc = make_run(recs, run_id=f"run-{commit}-{seed}")
    doc["commit_info"] = {"id": SHAS[commit], "time": DATES[commit], "dirty": False}
    return doc


def write(tmp_path, name: str, doc: dict) -> str:
    path = tmp_path / name
    write_atomic(path, doc)
    return str(path)


@pytest.fixture
def three_commits(tmp_path):
    # files named against the date order, so the order must come from the commits' dates
    return [write(tmp_path, "z.json", run_at("c1")), write(tmp_path, "a.json", run_at("c2", "sdpa", 1.5)),
            write(tmp_path, "m.json", run_at("c3", "sdpa", 1.5))]


def test_commits_are_ordered_by_date_and_the_change_names_its_commit(three_commits):
    history = build_history(three_commits)
    assert [p.commit for p in history.points] == [SHAS["c1"], SHAS["c2"], SHAS["c3"]]
    sdpa = {make_record(backend="sdpa", seq=s, n_kv_heads=h)["case_id"] for _, s, h in CASES}
    assert {c.case_id for c in history.changes} == sdpa  # only sdpa moved, and only once
    assert {(c.commit, c.previous, c.verdict) for c in history.changes} == {(SHAS["c2"], SHAS["c1"], "regressed")}
    some = next(iter(sdpa))
    assert history.medians[some][1] / history.medians[some][0] == pytest.approx(1.5, rel=0.05)


def test_case_pattern_filters_cases_and_changes(three_commits):
    history = build_history(three_commits, case="naive/*")
    assert history.medians and all(cid.startswith("naive/") for cid in history.medians)
    assert not history.changes


def test_several_files_of_one_commit_are_pooled(tmp_path):
    paths = [write(tmp_path, "1.json", run_at("c1")), write(tmp_path, "2.json", run_at("c1", seed=1)),
             write(tmp_path, "3.json", run_at("c2"))]
    history = build_history(paths)
    assert [len(p.files) for p in history.points] == [2, 1]
    assert not history.changes


def test_commit_falls_back_to_the_code_s_own_commit():
    doc = RunDocument.from_dict(run_at("c1"))
    doc.commit_info = {"id": "unversioned", "time": None}  # a run started outside the checkout
    doc.machine_info["attnbench"]["git_commit"] = "0" * 40
    with pytest.raises(HistoryError, match="commit 000000000000 has no date"):  # unknown here: no date to order by
        commit_of(doc, "x.json")


def test_family_label():
    assert family(Record.from_dict(make_record(n_kv_heads=2))) == "prefill · GQA · fp32 · causal · fwd"


def test_cli_writes_summary_and_a_figure_per_family(three_commits, tmp_path, capsys):
    out = tmp_path / "hist"
    assert main(["history", *three_commits, "--out", str(out)]) == 0
    text = (out / "history.md").read_text()
    assert f"`{SHAS['c2'][:8]}`" in text and "regressed" in text
    figures = sorted(p.name for p in out.glob("*.png"))
    families = {family(Record.from_dict(make_record(n_kv_heads=h))) for _, _, h in CASES}
    assert len(figures) == len(families) == 2
    assert all(name in text for name in figures)


def _bad_inputs(tmp_path) -> dict[str, tuple[list[str], str]]:
    no_commit = run_at("c1")
    no_commit["commit_info"] = {}
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"benchmarks": [')
    empty = tmp_path / "empty"
    empty.mkdir()
    return {
        "no files": ([str(empty)], "no results files"),
        "no commit": ([write(tmp_path, "nocommit.json", no_commit)], "no commit recorded"),
        "corrupt": ([str(corrupt)], "not valid JSON"),
        "missing": ([str(tmp_path / "nope.json")], "no such file"),
        "no case": ([write(tmp_path, "ok.json", run_at("c1")), "--case", "flex/*"], "matches no case"),
    }


@pytest.mark.parametrize("case", ["no files", "no commit", "corrupt", "missing", "no case"])
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, capsys):
    argv, message = _bad_inputs(tmp_path)[case]
    assert main(["history", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
