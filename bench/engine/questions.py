"""The questions a run answers, and the least set of its cases that answers each.

A question funds the claims whose spec names it, and the figures it lists; it lives in the module of one of those
claims (bench.claims.<claim>), beside the thresholds it chooses with, and the claims' registry (bench.claims.QUESTIONS)
lists every question in the planner's order. Each says which of the plan's cases speak to it (`picks`) and which of
those are the least that answers it (`least`); the rule of each is its claim module's docstring. Most choose the
textbook backend and the fused kernel whose cases cost least here (bench.claims.question), at the dtypes this machine
runs natively.

A plan without a question's cases names its claim's command (the spec's). The time budget's planner
(bench.engine.agenda, bench.engine.budget) funds every question's least first, then the rest of what the questions
pick (depth), then everything else (breadth). A dtype the CPU emulates (calibration's `emulated`) is measured at one
representative shape per question: its other cases would spend the budget on missing hardware.
"""

from __future__ import annotations

from bench.claims import QUESTIONS
from bench.claims.question import Context, Question

__all__ = ["QUESTIONS", "Context", "Question"]
