"""A run planned to a time budget (--time-budget): which cases run, in which order, and when one no longer fits.

Cases are run family by family in rounds: first the cheapest case of every family (a family is the case id
without its sizes: backend, variant, dtype, mask, phase, pass, device and any later shape field), then the
second cheapest of each, and so on. So a budget that runs out leaves every figure and claim the small shapes of
every family, not the whole of a few. Before each case the planner asks whether the case's prediction, scaled
by how the predictions have fared so far in this run, still fits what is left; a case that does not is recorded
`skipped` with its predicted time, and the planner goes on with the next (a smaller one may fit).
"""

from __future__ import annotations

import re
from collections import defaultdict

from bench.engine.sweeps import Case

SIZES = re.compile(r"^(b|hq|hkv|q|kv|d)\d+$")
MARGIN = 0.9  # plan to this share of the budget: the end-of-run calibration and the file need the rest


def family(case: Case) -> str:
    """The case id without its sizes: cases that differ only in batch, heads, lengths or head dim."""
    parts = case.id.split("/")
    parts[2] = "-".join(token for token in parts[2].split("-") if not SIZES.match(token))
    return "/".join(parts)


def priority_order(cases: list[Case], predicted: dict[str, float]) -> list[Case]:
    """Round-robin over the families, each family's cases from the cheapest up."""
    by_family: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        by_family[family(case)].append(case)
    ranked = []
    for members in by_family.values():
        members.sort(key=lambda c: predicted[c.id])
        ranked += [(rank, predicted[c.id], c) for rank, c in enumerate(members)]
    return [c for _, _, c in sorted(ranked, key=lambda item: (item[0], item[1]))]


class Planner:
    """Whether the next case fits: elapsed time so far plus its prediction, scaled by measured / predicted."""

    def __init__(self, budget_s: float | None) -> None:
        self.budget_s = budget_s
        self.predicted_done = 0.0
        self.measured_done = 0.0

    @property
    def scale(self) -> float:
        """How far off the predictions have been in this run (bounded: a few odd cases must not swing it)."""
        if self.predicted_done < 1.0:
            return 1.0
        return min(5.0, max(0.2, self.measured_done / self.predicted_done))

    def fits(self, predicted_s: float, elapsed_s: float) -> bool:
        """elapsed_s: the run's time so far, calibration included."""
        if self.budget_s is None:
            return True
        return elapsed_s + self.scale * predicted_s <= MARGIN * self.budget_s

    def ran(self, predicted_s: float, measured_s: float) -> None:
        self.predicted_done += predicted_s
        self.measured_done += measured_s

    def eta_s(self, remaining_predicted_s: float, elapsed_s: float = 0.0) -> float:
        """Seconds left: the scaled predictions of what is left, and with a budget no more than the budget's rest
        (whatever will not fit is skipped, in no time)."""
        eta = self.scale * remaining_predicted_s
        if self.budget_s is not None:
            eta = min(eta, max(0.0, MARGIN * self.budget_s - elapsed_s))
        return eta
