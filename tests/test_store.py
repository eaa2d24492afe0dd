"""The run's journal (bench.results.store): one line per finished case, the results file written from it, a torn
last line tolerated and named, and no finished case lost to a crash at any moment."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.results import (
    Entry,
    ResultsError,
    ResultsStore,
    RunDocument,
    RunMeta,
    entries,
    journal_path,
    read_journal,
    read_run,
)
from tests.results_factory import make_record, make_run

REPO = Path(__file__).resolve().parents[1]


def some_entries(n: int) -> list[Entry]:
    doc = make_run([make_record(seq=32 * (i + 1), status="ok" if i % 3 else "unsupported") for i in range(n)])
    return RunDocument.from_dict(doc).entries()


def new_store(path: Path) -> ResultsStore:
    meta = RunMeta(run_id="r", profile="quick", sweep_id="s", cases=10)
    return ResultsStore.new(path, meta, {"node": "test"}, {}, "5.3.1", "2026-11-29T08:00:00")


def test_each_case_is_one_journal_line_and_the_file_is_written_at_the_end(tmp_path):
    out = tmp_path / "r.json"
    store = new_store(out)
    assert read_run(out).entries() == [] and journal_path(out).exists()
    cases = some_entries(5)
    for i, entry in enumerate(cases):
        store.add(entry)
        assert len(journal_path(out).read_bytes().splitlines()) == 2 + i  # the run line, then one per case
        assert entries(json.loads(out.read_text())) == []  # the file is not rewritten per case
        assert read_run(out).entries() == store.doc.entries()  # but every reader sees the journal
    store.finish(complete=True)
    assert not journal_path(out).exists()
    done = read_run(out)
    assert done.meta.complete is True and done.entries() == store.doc.entries()
    assert {e.case_id for e in done.entries()} == {e.case_id for e in cases}


def test_an_interrupted_run_keeps_its_journal_and_resumes_from_it(tmp_path):
    out = tmp_path / "r.json"
    store = new_store(out)
    cases = some_entries(4)
    for entry in cases[:2]:
        store.add(entry)
    store.finish(complete=False)
    assert journal_path(out).exists()
    assert entries(json.loads(out.read_text())) == read_run(out).entries()  # the file caught up on interrupt
    again = ResultsStore.resume(out)
    for entry in cases[2:]:
        again.add(entry)
    again.finish(complete=True)
    final = read_run(out)
    assert final.case_ids() == again.doc.case_ids()
    assert len(final.entries()) == 4 and final.meta.complete is True


def test_a_torn_last_line_is_named_cut_off_and_appended_after(tmp_path):
    out = tmp_path / "r.json"
    store = new_store(out)
    cases = some_entries(3)
    store.add(cases[0])
    store._journal.write(json.dumps({"case": cases[1].to_dict()}).encode()[:57])  # a crash in the middle of a line
    store._journal.flush()
    doc = read_run(out)
    assert doc.case_ids() == [cases[0].case_id]
    assert len(doc.notes) == 1 and "last line (line 3) was cut short" in doc.notes[0]
    resumed = ResultsStore.resume(out)
    resumed.add(cases[2])
    again = read_run(out)
    assert again.notes == [] and again.case_ids() == [cases[0].case_id,
                                                      cases[2].case_id]


@pytest.mark.parametrize("text, message", [
    ("", "empty journal"),
    ('{"case": {}}\n', "no 'run' line first"),
    ("RUN\n{}\n", "line 1 is not a journal line"),
])
def test_a_corrupt_journal_is_one_error_naming_it(tmp_path, text, message):
    out = tmp_path / "r.json"
    journal_path(out).write_text(text)
    with pytest.raises(ResultsError, match=message):
        read_run(out)


def test_a_bad_line_before_the_last_is_corruption_not_a_crash(tmp_path):
    out = tmp_path / "r.json"
    store = new_store(out)
    store.add(some_entries(1)[0])
    store._journal.write(b"garbage\n")
    store.add(some_entries(2)[1])
    with pytest.raises(ResultsError, match="line 3 is not a journal line"):
        read_journal(journal_path(out))


def test_resume_of_a_file_without_journal_starts_one(tmp_path):
    out = tmp_path / "r.json"
    store = new_store(out)
    for entry in some_entries(2):
        store.add(entry)
    store.finish(complete=False)
    journal_path(out).unlink()  # e.g. a file written by an older attnbench
    resumed = ResultsStore.resume(out)
    assert read_journal(journal_path(out))[0].entries() == resumed.doc.entries() == read_run(out).entries()


CHILD = """
import sys
from pathlib import Path
from bench.results import RunDocument, RunMeta
from bench.results import ResultsStore
from tests.results_factory import make_record, make_run
out = Path(sys.argv[1])
store = ResultsStore.new(out, RunMeta(run_id="r", sweep_id="s"), {}, {}, "5.3.1", "now")
for i in range(100000):
    entry = RunDocument.from_dict(make_run([make_record(seq=i + 1)])).entries()[0]
    store.add(entry)
    print(entry.case_id, flush=True)  # reported only once recorded
"""


@pytest.mark.slow  # a real process, killed mid-run
def test_kill_9_at_any_moment_loses_no_finished_case(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    reported = []
    deadline = time.monotonic() + 60
    while len(reported) < 40 and time.monotonic() < deadline:
        reported.append(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGKILL)
    reported += proc.stdout.read().split()
    proc.wait()
    assert len(reported) >= 40
    doc = read_run(out)
    assert set(reported) <= set(doc.case_ids())  # every case it said was recorded, and perhaps one more
    assert len(doc.case_ids()) - len(reported) <= 1


def test_the_recording_cost_script_measures_both_stores(tmp_path):
    from bench.results.record_cost import cost

    before, after = cost(20, tmp_path, repeats=2)
    assert before > 0 and after > 0
    assert (tmp_path / "before-20.json").exists() and (tmp_path / "after-20.json").exists()


def test_a_last_line_that_lost_only_its_newline_is_kept_and_ended(tmp_path):
    out = tmp_path / "r.json"
    store = new_store(out)
    cases = some_entries(2)
    store.add(cases[0])
    store._journal.truncate(store._journal.tell() - 1)  # the crash cut the newline alone
    store._journal.close()
    assert read_run(out).case_ids() == [cases[0].case_id]
    resumed = ResultsStore.resume(out)
    resumed.add(cases[1])
    assert read_run(out).case_ids() == [c.case_id for c in cases]
