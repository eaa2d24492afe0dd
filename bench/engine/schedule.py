"""A run's schedule: every case's predicted time (bench.plan.cost), the order its cases run in, whether the next
one still fits the time budget (bench.engine.budget), and under a budget the questions' agenda
(bench.engine.agenda) said before the first case. The session asks it; it measures nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.engine.budget import DECIDE_SHARE, MARGIN, TimeBudget, priority_order
from bench.engine.console import fmt_eta
from bench.engine.options import Plan
from bench.plan.cost import predict_all
from bench.problem.case import Case
from bench.results.meta import Calibration

MIN_TIMEOUT_S = 60.0  # a case's default limit is never under a minute (a compile, a loaded machine)
TIMEOUT_FACTOR = 10.0  # ... and a generous multiple of its prediction: only a hang gets near it


class Schedule:
    def __init__(self, plan: Plan, started: float) -> None:
        self.plan = plan
        self.started = started  # the time budget counts from here, calibration included
        budget = plan.sweep.time_budget_s
        self.budget = TimeBudget(budget if budget is not None and budget != float("inf") else None)
        self.predicted: dict[str, float] = {}
        self.agenda: Any = None  # bench.engine.agenda.Agenda: the order under a time budget
        self.least: set[str] = set()  # its funded questions' least cases (they may use the share kept to decide)
        self.decided = False  # the open conditions were decided (once, after every case)
        self.decide_started: float | None = None
        self.quiet: set[str] = set()  # cases the plan announced as a group: counted, not listed one by one
        self.over_budget = 0  # cases recorded skipped because they no longer fit the time budget

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def predict(self, calibration: Calibration, case_budget_s: float) -> None:
        """Every case's predicted seconds, for the ETA, the time budget, the timeout and the record."""
        self.predicted = predict_all(self.plan.cases, calibration, case_budget_s, self.plan.sweep.cold_plan())

    def announce(self, mine: list[Case], calibration: Calibration, say: Callable[[str], None]) -> list[dict] | None:
        """Under a time budget, the questions' agenda (its answers are returned for the run's metadata); in any
        run, one line for the backends this device cannot run at all instead of one per case."""
        from bench.claims.question import Context
        from bench.engine.agenda import cut_dtypes, device_reason, make_agenda, plan_lines

        emulated = cut_dtypes(self.plan, calibration)
        ctx = Context(self.plan.device, self.predicted, emulated, calibration)
        unrunnable = {c.id for c in mine if device_reason(c)}
        self.quiet = set(unrunnable)
        if self.budget.time_budget_s is None:
            if unrunnable:
                backends = sorted({c.backend for c in mine if c.id in unrunnable})
                reasons = sorted({device_reason(c) or "" for c in mine if c.id in unrunnable})
                say(f"{len(backends)} backends cannot run here ({'; '.join(reasons)}): their {len(unrunnable)} "
                    "cases are recorded unsupported")
            return None
        elapsed = self.elapsed_s()
        self.agenda = make_agenda(mine, ctx, self.budget.time_budget_s, elapsed)
        self.least = self.agenda.least_ids
        for line in plan_lines(self.agenda, self.budget.time_budget_s, elapsed, emulated):
            say(line)
        return [a.as_dict() for a in self.agenda.answers]

    def order(self, mine: list[Case]) -> tuple[list[tuple[Case, str]], list[Case]]:
        """The cases the agenda leaves out (each with its reason: recorded at once), then the order to run the rest:
        the agenda's, or under a bare budget the small shapes of every family first, or else the cases this device
        cannot run first (they are recorded at once)."""
        if self.agenda is not None:
            left_out = self.agenda.left_out
            self.quiet |= set(left_out)
            return ([(c, left_out[c.id]) for c in mine if c.id in left_out],
                    [c for c in self.agenda.order if c.id not in left_out])
        if self.budget.time_budget_s is not None:
            return [], priority_order(mine, self.predicted)
        return [], sorted(mine, key=lambda c: c.id not in self.quiet)

    def fits(self, case: Case) -> bool:
        """Whether the case, as its prediction is faring in this run, still fits the time budget."""
        return not self.predicted or self.budget.fits(self.predicted[case.id], self.elapsed_s(), case.shape.dtype,
                                                      case.id in self.least)

    def over_budget_reason(self, case: Case) -> str:
        """Why a case that no longer fits is skipped; counted for one line at the end, not one per case."""
        self.over_budget += 1
        self.quiet.add(case.id)
        return (f"predicted {self.predicted[case.id]:.1f} s (x{self.budget.scale(case.shape.dtype):.2f} as this "
                f"run goes): over the {self.budget.time_budget_s:.0f} s time budget")

    def timeout_s(self, case: Case) -> float | None:
        """--case-timeout, or by default a generous multiple of the prediction, never under a minute."""
        given = self.plan.sweep.case_timeout_s
        if given is not None:
            return None if given == float("inf") else given
        return max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * (self.predicted.get(case.id) or 0.0))

    def ran(self, case: Case, wall_s: float) -> None:
        """How the case's prediction fared, so the next predictions of its dtype are scaled by it."""
        if (predicted := self.predicted.get(case.id)) is not None:
            self.budget.ran(predicted, wall_s, case.shape.dtype)

    def eta_s(self, left: list[Case]) -> float:
        """The cost model's seconds left, scaled by how it has fared in this run."""
        return self.budget.eta_s([(self.predicted[c.id], c.shape.dtype) for c in left], self.elapsed_s())

    def decide_s_left(self) -> float:
        """Seconds the run may still spend deciding open conditions: the share kept for it (DECIDE_SHARE), counted
        from when deciding starts, and never past the budget's planned share (MARGIN); 0 without a budget."""
        if self.budget.time_budget_s is None:
            return 0.0
        if self.decide_started is None:
            self.decide_started = self.elapsed_s()
        budget = self.budget.time_budget_s
        return min(self.decide_started + DECIDE_SHARE * budget, MARGIN * budget) - self.elapsed_s()

    def closing_lines(self) -> list[str]:
        if not self.over_budget:
            return []
        return [f"{self.over_budget} cases did not fit the {fmt_eta(self.budget.time_budget_s or 0)} time budget: "
                "recorded skipped (--time-budget none runs them all)"]
