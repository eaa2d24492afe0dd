"""A run planned to a time budget (--time-budget): which cases run, in which order, and when one no longer fits.

Cases are run family by family in rounds: first the cheapest case of every family (bench.problem.case.family_key: cases
that differ only in batch, heads, lengths or head dim), then the second cheapest of each, and so on. So a budget
that runs out leaves every figure and claim the small shapes of every family, not the whole of a few. Before each
case TimeBudget asks whether the case's prediction, scaled by how the predictions have fared so far in this run,
still fits what is left; a case that does not is recorded `skipped` with its predicted time, and the run goes on
with the next (a smaller one may fit).
"""

from __future__ import annotations

from collections import defaultdict

from bench.problem.case import Case, family_key

MARGIN = 0.9  # plan to this share of the budget: the end-of-run calibration and the file need the rest
# ... of which this share is kept to re-measure the claims' open conditions once their least sets have run
# (bench.engine.decide). The least cases may use it (an answer first, then deciding it); depth and breadth may not.
# A third: since the least sets hold every condition a claim judges, depth adds lengths to the figures, not answers.
DECIDE_SHARE = 1 / 3


def cases_room(time_budget_s: float, least: bool = False) -> float:
    """The seconds of a budget the sweep's cases may take: for a claim's least case all the closing leaves, for any
    other case what the closing and deciding leave."""
    return (MARGIN if least else MARGIN - DECIDE_SHARE) * time_budget_s


def priority_order(cases: list[Case], predicted: dict[str, float]) -> list[Case]:
    """Round-robin over the families, each family's cases from the cheapest up."""
    by_family: dict[tuple, list[Case]] = defaultdict(list)
    for case in cases:
        by_family[family_key(case)].append(case)
    ranked = []
    for members in by_family.values():
        members.sort(key=lambda c: predicted[c.id])
        ranked += [(rank, predicted[c.id], c) for rank, c in enumerate(members)]
    return [c for _, _, c in sorted(ranked, key=lambda item: (item[0], item[1]))]


class TimeBudget:
    """Whether the next case fits: the run's time so far plus the case's prediction, scaled by how the predictions
    of its dtype (a CPU may emulate one: far slower than the model's GEMM ceiling says) have fared in this run."""

    def __init__(self, time_budget_s: float | None) -> None:
        self.time_budget_s = time_budget_s
        self.done: dict[str | None, list[float]] = defaultdict(lambda: [0.0, 0.0])  # key -> [predicted, measured]

    def scale(self, key: str | None = None) -> float:
        """measured / predicted so far for `key` (else the whole run's; bounded: a few odd cases must not swing
        it), 1 before anything ran."""
        predicted, measured = self.done[key] if self.done[key][0] >= 0.5 else self.done[None]
        if predicted < 0.5:
            return 1.0
        return min(20.0, max(0.05, measured / predicted))

    def fits(self, predicted_s: float, elapsed_s: float, key: str | None = None, least: bool = False) -> bool:
        """elapsed_s: the run's time so far, calibration included; least: a case a claim's answer needs."""
        if self.time_budget_s is None:
            return True
        return elapsed_s + self.scale(key) * predicted_s <= cases_room(self.time_budget_s, least)

    def ran(self, predicted_s: float, measured_s: float, key: str | None = None) -> None:
        for k in {key, None}:
            self.done[k][0] += predicted_s
            self.done[k][1] += measured_s

    def eta_s(self, remaining: list[tuple[float, str | None]], elapsed_s: float = 0.0) -> float:
        """Seconds left: the scaled predictions of what is left, and with a budget no more than the budget's rest
        (whatever will not fit is skipped, in no time)."""
        eta = sum(self.scale(key) * predicted for predicted, key in remaining)
        if self.time_budget_s is not None:
            eta = min(eta, max(0.0, cases_room(self.time_budget_s) - elapsed_s))
        return eta
