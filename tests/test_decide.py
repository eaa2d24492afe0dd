"""The run's deciding phase: open conditions re-measured in ABBA blocks, each block in a fresh worker."""

from dataclasses import dataclass, replace

import pytest

from bench.engine import decide
from bench.engine.execute import RunnerSetup
from bench.engine.outcome import Outcome
from bench.report.conditions import condition
from bench.results.meta import Calibration
from bench.results.record import new_record


@dataclass
class FakeCase:
    id: str


class FakeWorkers:
    """Times each case as given, times a factor per worker process (a worker's state), counting fresh workers."""

    def __init__(self, seconds: dict[str, float], worker_factor=lambda n: 1.0) -> None:
        self.seconds, self.worker_factor = seconds, worker_factor
        self.workers, self.live, self.calls = 0, False, []

    def start(self, setup: RunnerSetup) -> None:
        self.setup = setup

    def close(self) -> None:
        self.live = False

    def run(self, case, timeout_s):
        if not self.live:
            self.workers, self.live = self.workers + 1, True
        self.calls.append((self.workers, case.id))
        record = replace(_RECORD, status="ok", median_s=self.seconds[case.id] * self.worker_factor(self.workers))
        return Outcome(record, [])


from bench.problem.case import Case  # noqa: E402
from bench.problem.shapes import AttentionShape  # noqa: E402

_RECORD = new_record(Case("naive", AttentionShape(1, 2, 2, 16, 16, 8), "prefill", "fwd", "cpu"), "materializing", 1)


def _open(monkeypatch, low=1.8, high=2.3):
    cond = condition("sdpa · fp32 · GQA", 2.05, (low, high), 2.0, holds_above=True, pairs=[("mha", "gqa")])
    monkeypatch.setattr(decide, "open_conditions", lambda doc, path, by_id: [
        decide.OpenCondition("fused-decode", cond)])


def _decide(workers, left=lambda: 100.0):
    by_id = {i: FakeCase(i) for i in ("mha", "gqa")}
    setup = RunnerSetup(Calibration(), None, 1.0, None, 1)
    return decide.decide(None, None, by_id, setup, 1, left, lambda line: None, executor=workers)


def test_each_block_runs_in_a_fresh_worker_in_abba_order_until_its_blocks_decide(monkeypatch):
    _open(monkeypatch)
    workers = FakeWorkers({"mha": 2.4e-3, "gqa": 1e-3})
    [got] = _decide(workers)
    blocks = got["blocks"]
    assert got["claim"] == "fused-decode" and len(blocks) == 6  # the fewest blocks with a 95% interval decide it
    assert workers.workers == 6 and {b["worker"] for b in blocks} == set(range(1, 7))
    for n, b in enumerate(blocks, start=1):
        ids = [case for worker, case in workers.calls if worker == n]
        assert ids in (["mha", "gqa", "gqa", "mha"], ["gqa", "mha", "mha", "gqa"]) and b["order"] in ("ABBA", "BAAB")
        assert b["ratio"] == pytest.approx(2.4)
    assert workers.setup.case_budget_s == decide.SLICE_BUDGET_S


def test_a_condition_on_its_bound_stops_once_its_blocks_show_it_and_time_left_stops_the_phase(monkeypatch):
    _open(monkeypatch)
    flip = FakeWorkers({"mha": 2e-3, "gqa": 1e-3}, worker_factor=lambda n: 1.0)
    flip.seconds = {"mha": 2e-3, "gqa": 1e-3}
    # a ratio on the bound, one block a little above, the next a little below: never decided
    flip.run = _alternating(flip)
    [got] = _decide(flip)
    assert len(got["blocks"]) == 6  # the fewest with an interval: it sits on 2x, more blocks would not decide it
    clock = iter([100.0, 100.0, 100.0, 0.0, 0.0, 0.0, 0.0])
    [short] = _decide(FakeWorkers({"mha": 2.4e-3, "gqa": 1e-3}), left=lambda: next(clock, 0.0))
    assert len(short["blocks"]) < 6


def _alternating(workers):
    plain = FakeWorkers.run

    def run(case, timeout_s):
        out = plain(workers, case, timeout_s)
        factor = 1.05 if workers.workers % 2 and case.id == "mha" else 0.95 if case.id == "mha" else 1.0
        return Outcome(replace(out.record, median_s=out.record.median_s * factor), [])
    return run


def test_a_run_decides_once_its_least_sets_are_in_and_before_its_depth():
    from types import SimpleNamespace

    from bench.engine.session import Session

    session = Session.__new__(Session)
    done: set[str] = set()
    session.schedule = SimpleNamespace(least={"a", "b"}, decided=False)
    session.store = SimpleNamespace(doc=SimpleNamespace(case_ids=lambda: sorted(done)))
    assert not session._least_done(FakeCase("unsupported-first"))  # unrunnable cases come before the least sets
    done.update({"a"})
    assert not session._least_done(FakeCase("b"))
    done.update({"b"})
    assert session._least_done(FakeCase("depth"))  # the first case past the least sets
    session.schedule.decided = True
    assert not session._least_done(FakeCase("more depth"))  # once only


def test_a_condition_one_worker_s_ci_decided_near_its_bound_still_gets_enough_blocks_to_decide(monkeypatch):
    _open(monkeypatch, low=2.04, high=2.08)  # holds by its CI, 2% from the bound
    [got] = _decide(FakeWorkers({"mha": 1.9e-3, "gqa": 1e-3}))  # fresh workers say otherwise
    assert len(got["blocks"]) == 6 and all(b["ratio"] == pytest.approx(1.9) for b in got["blocks"])
