"""The run's agenda under a time budget: which cases run in what order, what is left out, and what the plan says
about each question (bench.claims.QUESTIONS; the rules: bench.engine.questions) before the first case.

Order: the cases this device cannot run at all (recorded `unsupported` at once, one console line for all), then
the least of every question that fits (cheapest question first, each one's cases cheapest first with a shape's
backends side by side: `side_by_side`; a question whose least would overrun the budget is not funded, and the plan
says how much more time would fund it), then the rest of what the questions pick (depth, round-robin over the
questions, cheapest first), then everything else (breadth, round-robin over case families:
bench.engine.budget.priority_order). Cases of a dtype this CPU emulates that no
question's least asked for are left out: they are recorded `skipped` with that reason (`--dtype` set by hand, or
`--time-budget none`, runs them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench.backends import get_backend
from bench.claims import QUESTIONS
from bench.claims.question import Context, Question
from bench.engine import sweeps
from bench.engine.budget import DECIDE_SHARE, MARGIN, cases_room, priority_order
from bench.errors import InputError
from bench.plan.cost import predict_all
from bench.problem.case import Case
from bench.profiles import PROFILES, profile
from bench.results.meta import Calibration

# seconds before a run's first case: calibration and the KV-cache measurements (~35 s measured on a 2-core CPU)
BEFORE_FIRST_CASE_S = {"cpu": 35.0, "cuda": 15.0}
FUNDED, OVER, ABSENT, AT_START = "answered", "over budget", "not in this plan", "measured at the start"


@dataclass
class Answer:
    """One question's place in the plan."""

    question: Question
    least: list[Case] = field(default_factory=list)
    picked: int = 0  # cases of the plan that speak to it
    state: str = ABSENT
    cost_s: float = 0.0  # predicted seconds of its least (what is not already funded by an earlier question)
    time_budget_s: float | None = None  # the --time-budget that would fund it, when it is over budget
    elsewhere_s: float | None = None  # predicted seconds of its own command here, when the plan has none of it

    def as_dict(self) -> dict:
        return {"question": self.question.key, "asks": self.question.asks, "state": self.state,
                "least_cases": len(self.least), "picked_cases": self.picked, "least_s": round(self.cost_s, 1),
                "time_budget_s": self.time_budget_s,
                "command": self.question.command if self.question.elsewhere else None,
                "elsewhere_s": self.elsewhere_s}


@dataclass
class Agenda:
    order: list[Case]  # what runs, in order (each still checked against the budget as the run goes)
    left_out: dict[str, str]  # case id -> why it is recorded skipped without running
    answers: list[Answer]
    unrunnable: dict[str, str]  # backend -> why it cannot run on this device (its cases come first in `order`)

    @property
    def least_ids(self) -> set[str]:
        """The cases of the funded questions' least sets: they may use the share kept for deciding."""
        return {c.id for a in self.answers if a.state == FUNDED for c in a.least}


def device_reason(case: Case) -> str | None:
    """Why the case's backend cannot run on this device at all (in any dtype), or None."""
    b = get_backend(case.backend)
    return None if case.device in b.devices else b.unsupported_reason(case.device, case.shape.dtype)


def cut_dtypes(plan: Any, calibration: Calibration) -> tuple[str, ...]:
    """The emulated dtypes to measure at representatives only: where the profile chose the dtypes, not the user
    (a `--dtype` given by hand is measured across the grid)."""
    base = PROFILES.get(plan.device, {}).get(plan.profile)
    if base is None or base.dtypes != plan.sweep.dtypes:
        return ()
    return calibration.emulated


def suggest_budget(seconds: float) -> float:
    """A --time-budget (whole minutes) whose planned share covers `seconds`."""
    return 60.0 * math.ceil(seconds / (MARGIN - DECIDE_SHARE) / 60.0)


def make_agenda(cases: list[Case], ctx: Context, time_budget_s: float, elapsed_s: float) -> Agenda:
    """Order `cases` for a run of `time_budget_s` seconds of which `elapsed_s` are spent (calibration, KV caches)."""
    unrunnable_cases = [c for c in cases if device_reason(c)]
    unrunnable = {c.backend: device_reason(c) or "" for c in unrunnable_cases}
    runnable = [c for c in cases if not device_reason(c)]
    cost = ctx.predicted.get

    answers: list[Answer] = []
    funded: set[str] = set()
    first: list[Case] = []
    spent = elapsed_s
    room = cases_room(time_budget_s, least=True)  # an answer before deciding it
    # the cheapest questions are funded (and run) first: when the run goes slower than predicted, the questions
    # that go unanswered are the fewest
    found = []
    for q in QUESTIONS:
        picked = [c for c in runnable if q.picks(c)]
        least = side_by_side(q.least(picked, ctx), ctx)
        found.append((sum(cost(c.id, 0.0) for c in least), q, picked, least))
    for _, q, picked, least in sorted(found, key=lambda item: item[0]):
        ans = Answer(q, least, len(picked))
        if q.key == "kv":
            ans.state = AT_START
        elif not least and q.elsewhere:
            ans.elsewhere_s = elsewhere_seconds(q, ctx)
        elif least:
            new = [c for c in least if c.id not in funded]
            ans.cost_s = sum(cost(c.id, 0.0) for c in new)
            if spent + ans.cost_s <= room:
                ans.state = FUNDED
                spent += ans.cost_s
                funded.update(c.id for c in new)
                first += new
            else:
                ans.state = OVER
                ans.time_budget_s = suggest_budget(spent + ans.cost_s)
        answers.append(ans)
    answers.sort(key=lambda a: [q.key for q in QUESTIONS].index(a.question.key))  # report order

    emulated_extra = {c.id for c in runnable if c.shape.dtype in ctx.emulated and c.id not in
                      {x.id for a in answers for x in a.least}}
    left_out = {cid: _emulated_reason(ctx, cid, cases) for cid in emulated_extra}
    unfunded = [c for a in answers if a.state == OVER for c in a.least if c.id not in funded]
    placed = funded | {c.id for c in unfunded} | emulated_extra
    depth = _round_robin([[c for c in runnable if q.picks(c) and c.id not in placed] for q in QUESTIONS], ctx)
    placed |= {c.id for c in depth}
    rest = [c for c in runnable if c.id not in placed]
    breadth = priority_order(rest, {c.id: cost(c.id, 0.0) for c in rest})
    order = unrunnable_cases + first + depth + _dedupe(unfunded) + breadth
    return Agenda(order, left_out, answers, unrunnable)


def elsewhere_seconds(q: Question, ctx: Context) -> float | None:
    """The predicted seconds of the question's own command on this machine (None if it cannot be planned here)."""
    axes = {f.metadata["flag"]: f for f in sweeps.axis_fields()}
    try:
        base = profile(q.elsewhere.get("profile", "default"), ctx.device)
        sweep = base.with_axes(**{axes[k].name: axes[k].metadata["parse"](v) for k, v in q.elsewhere.items()
                                  if k != "profile"})
        cases = sweeps.cases(sweep, ctx.device)
    except InputError:
        return None
    before = BEFORE_FIRST_CASE_S.get(ctx.device, 30.0)
    return before + sum(predict_all(cases, ctx.calibration, sweep.case_budget_s, sweep.cold_plan()).values())


def _emulated_reason(ctx: Context, case_id: str, cases: list[Case]) -> str:
    dtype = next(c.shape.dtype for c in cases if c.id == case_id)
    share = ""
    gemm, main = ctx.calibration.gemm_by_dtype.get(dtype), ctx.calibration.gemm_flops_per_s
    if gemm and main:
        share = f" (GEMM at {100 * gemm / main:.1f}% of fp32's)"
    return f"{dtype} is emulated on this CPU{share}: one shape per question; --dtype {dtype} runs all"


def side_by_side(cases: list[Case], ctx: Context) -> list[Case]:
    """Cheapest first, each shape's backends next to each other (a shape taking its cheapest backend's place): a
    claim that sets backends against each other sums many cases timed a minute apart (a replayed trace: every
    bucket and sampled step of each), and cheapest first had timed one backend's cases in one stretch and the
    other's in another, so that a slow spell of the host slowed one side only (over 63 saved default runs of a
    2-core AMD EPYC, the trace's two backends' ratio went down to 1.0x where 17-18 of naive's 36 cases ran in a
    spell and sdpa-flash's 1-3, and up to 1.4-1.5x the other way round, against 1.2-1.3x otherwise)."""
    def cost(c: Case) -> float:
        return ctx.predicted.get(c.id, 0.0)

    shapes: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        shapes[(c.shape, c.phase, c.pass_, c.device)].append(c)
    groups = sorted((sorted(g, key=cost) for g in shapes.values()), key=lambda g: cost(g[0]))
    return [c for g in groups for c in g]


def _round_robin(groups: list[list[Case]], ctx: Context) -> list[Case]:
    """The first (cheapest) case of each group, then the second of each, ...; a case in two groups once."""
    ranked = []
    for g in groups:
        g = sorted(g, key=lambda c: ctx.predicted.get(c.id, 0.0))
        ranked += [(rank, ctx.predicted.get(c.id, 0.0), c) for rank, c in enumerate(g)]
    return _dedupe([c for _, _, c in sorted(ranked, key=lambda item: (item[0], item[1]))])


def _dedupe(cases: list[Case]) -> list[Case]:
    seen: set[str] = set()
    out = []
    for c in cases:
        if c.id not in seen:
            seen.add(c.id)
            out.append(c)
    return out


def fmt_s(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _what(cases: list[Case]) -> str:
    """The least of a question in a few words: backends, and the sizes it varies."""
    backends = ", ".join(dict.fromkeys(c.backend for c in cases))
    dtypes = ", ".join(dict.fromkeys(c.shape.dtype for c in cases))
    varied: dict[str, set[int]] = defaultdict(set)
    for c in cases:
        varied["Hq" if c.phase == "prefill" else "KV"].add(c.shape.n_heads if c.phase == "prefill" else c.shape.seq_kv)
        if c.phase == "prefill":
            varied["S"].add(c.shape.seq_q)
    sizes = "; ".join(f"{k} {min(v)}–{max(v)}" if len(v) > 1 else f"{k} {min(v)}" for k, v in varied.items())
    return f"{backends} · {dtypes} · {sizes}"


def plan_lines(agenda: Agenda, time_budget_s: float, elapsed_s: float, emulated: tuple[str, ...] = ()) -> list[str]:
    """What the plan says before the first case: per question whether it will be answered, and how much more time
    would answer one that cannot fit."""
    lines = [f"plan for the {fmt_s(time_budget_s)} time budget ({fmt_s(elapsed_s)} spent on calibration and KV "
             "caches):"]
    width = max(len(a.question.key) for a in agenda.answers)
    for a in agenda.answers:
        head = f"  {a.question.key:<{width}}  "
        if a.state == FUNDED:
            lines.append(head + f"answered: {len(a.least)} cases, ~{fmt_s(a.cost_s)} ({_what(a.least)})")
        elif a.state == OVER:
            lines.append(head + f"will not fit: its least ({len(a.least)} cases) needs ~{fmt_s(a.cost_s)}; "
                         f"--time-budget {int((a.time_budget_s or 0) // 60)}m would answer it")
        elif a.state == AT_START:
            lines.append(head + "answered from the KV caches allocated at the start")
        else:
            when = f" in about {fmt_s(a.elsewhere_s)} here" if a.elsewhere_s else ""
            what = (f"its {a.picked} cases here cannot answer it" if a.picked else "not in this plan")
            lines.append(head + f"{what}: `{a.question.command}` measures it{when}")
    lines.append(f"  then up to {fmt_s(DECIDE_SHARE * time_budget_s)} re-measures the claims' open conditions in "
                 "interleaved blocks, a round of them per fresh worker")
    over = [a for a in agenda.answers if a.state == OVER]
    if over:
        total = elapsed_s + sum(a.cost_s for a in agenda.answers if a.state in (FUNDED, OVER))
        lines.append(f"  every question answered: --time-budget {int(suggest_budget(total) // 60)}m")
    if agenda.unrunnable:
        n = sum(1 for c in agenda.order if c.backend in agenda.unrunnable)
        reasons = sorted(set(agenda.unrunnable.values()))
        lines.append(f"  {len(agenda.unrunnable)} backends cannot run here ({'; '.join(reasons)}): their {n} cases "
                     "are recorded unsupported")
    for dtype in emulated:
        n = sum(1 for r in agenda.left_out.values() if r.startswith(dtype))
        if n:
            lines.append(f"  {dtype} is emulated on this CPU: measured at one shape per question; {n} other "
                         f"{dtype} cases recorded skipped")
    return lines
