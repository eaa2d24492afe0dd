"""`bench run --plan`: the run's plan without running it — what each kind says of the sweep first (its
`plan_lines`, bench.kinds.expansion), per question whether it will be answered, then every case with its predicted
seconds and what the time budget makes of it (runs, over budget, left out).

On the device here the ceilings are measured first (the run's own calibration); for a GPU that is not here
(`--device cuda --gpu H200` on any machine) they come from its spec sheet (bench.measure.spec_sheets.spec_calibration),
so a CUDA plan can be read before a GPU is booked.
"""

from __future__ import annotations

from bench.claims.question import Context
from bench.engine.agenda import BEFORE_FIRST_CASE_S, FUNDED, cut_dtypes, fmt_s, make_agenda, plan_lines
from bench.engine.budget import DECIDE_SHARE, cases_room
from bench.engine.options import Plan
from bench.engine.sweeps import parts
from bench.kinds import REGISTRY
from bench.plan.cost import predict_all
from bench.results.meta import Calibration


def preview_lines(plan: Plan, calibration: Calibration) -> list[str]:
    predicted = predict_all(plan.cases, calibration, plan.sweep.case_budget_s, plan.sweep.cold_plan())
    emulated = cut_dtypes(plan, calibration)
    ctx = Context(plan.device, predicted, emulated, calibration)
    budget = plan.sweep.time_budget_s
    elapsed = BEFORE_FIRST_CASE_S.get(plan.device, 30.0)
    source = "; ".join(calibration.notes) or "measured here"
    lines = [f"ceilings ({source}): GEMM {(calibration.gemm_flops_per_s or 0) / 1e9:,.0f} GFLOP/s, "
             f"copy {(calibration.copy_bytes_per_s or 0) / 1e9:,.0f} GB/s"]
    lines += [line for kind in REGISTRY for line in kind.plan_lines(parts(plan.sweep))]
    if budget is None or budget == float("inf"):
        total = sum(predicted.values())
        lines.append(f"no time budget: all {len(plan.cases)} cases run, predicted {fmt_s(elapsed + total)}")
        return lines + [f"  {predicted[c.id]:8.1f} s  {c.id}" for c in plan.cases]
    agenda = make_agenda(plan.cases, ctx, budget, elapsed)
    lines += plan_lines(agenda, budget, elapsed, emulated)
    funded = {c.id for a in agenda.answers if a.state == FUNDED for c in a.least}
    spent, fate = elapsed, {}
    for c in agenda.order:
        if spent + predicted[c.id] <= cases_room(budget, least=c.id in funded):
            spent += predicted[c.id]
            fate[c.id] = "least" if c.id in funded else "runs"
        else:
            fate[c.id] = "over budget"
    fate.update(dict.fromkeys(agenda.left_out, "left out"))
    runs = sum(1 for f in fate.values() if f in ("least", "runs"))
    lines.append(f"predicted: {runs} of {len(plan.cases)} cases run in {fmt_s(spent)} of the {fmt_s(budget)} budget "
                 f"(the cases end by {fmt_s(cases_room(budget))}; then up to {fmt_s(DECIDE_SHARE * budget)} "
                 "re-measures the claims' open conditions in interleaved blocks, a round of them per fresh worker; the "
                 f"closing calibration and the file use the rest of {fmt_s(budget)})")
    order = agenda.order + [c for c in plan.cases if c.id in agenda.left_out]
    return lines + [f"  {predicted[c.id]:8.1f} s  {fate[c.id]:<11}  {c.id}" for c in order]
