"""The plan built from the questions (bench.claims.QUESTIONS, bench.engine.agenda): each claim and figure's least
set of cases, funded first under a time budget; emulated dtypes at representatives; the unrunnable backends as one
line; `bench run --plan`, for this CPU and for a GPU from its spec sheet."""

from __future__ import annotations

import io
import re

import pytest

from bench.claims import LENGTH_SPAN, MIN_HEADS, MIN_KV_LENGTHS, MIN_LENGTHS
from bench.claims.question import Context
from bench.cli import main
from bench.engine import options, sweeps
from bench.engine.agenda import AT_START, FUNDED, OVER, cut_dtypes, make_agenda, plan_lines
from bench.engine.console import LiveConsole, LogConsole
from bench.measure.spec_sheets import spec_calibration
from bench.plan.cost import predict_all
from bench.problem.columns import shape_fields
from bench.results import read_run
from bench.results.meta import Calibration
from tests.machines import EPYC


def _agenda(profile: str = "default", device: str = "cpu", calibration: Calibration | None = None,
            time_budget_s: float | None = None, elapsed_s: float = 35.0):
    plan = options.plan(options.RunRequest(profile=profile, device=device), default_out=False, listing=True)
    calibration = calibration or EPYC
    predicted = predict_all(plan.cases, calibration, plan.sweep.case_budget_s)
    ctx = Context(device, predicted, cut_dtypes(plan, calibration), calibration)
    return plan, make_agenda(plan.cases, ctx, time_budget_s or plan.sweep.time_budget_s, elapsed_s), ctx


@pytest.fixture(scope="module")
def cpu_default():
    return _agenda()


def _answer(agenda, key):
    return next(a for a in agenda.answers if a.question.key == key)


def test_each_question_of_the_cpu_default_gets_its_least_and_every_one_is_funded(cpu_default):
    _, agenda, _ = cpu_default
    states = {a.question.key: a.state for a in agenda.answers}
    assert states == {"heads": FUNDED, "scaling": FUNDED, "decode": FUNDED, "mla": FUNDED, "layer": FUNDED,
                      "kv": AT_START, "paging": FUNDED, "variants": FUNDED, "sparse": FUNDED, "sparse-ideal": FUNDED,
                      "trace": FUNDED, "wrapper": FUNDED, "linear": FUNDED, "linear-decode": FUNDED,
                      "cascade": FUNDED, "auto-choice": FUNDED,
        "verify": FUNDED}
    heads = _answer(agenda, "heads").least
    for backend in {c.backend for c in heads}:
        mine = [c for c in heads if c.backend == backend]
        assert len({c.shape.n_heads for c in mine}) >= MIN_HEADS
        assert len({c.shape.n_heads * c.shape.head_dim for c in mine}) == 1  # one d_model
    assert {"naive"} < {c.backend for c in heads}  # the textbook backend and a fused kernel


def test_the_cpu_defaults_mla_paging_and_variants_each_come_with_what_they_are_judged_against(cpu_default):
    _, agenda, _ = cpu_default
    mla = _answer(agenda, "mla").least
    latent = [c for c in mla if (c.shape.mla is not None and c.shape.mla.form == "absorbed")]
    twins = [c for c in mla if c.shape.mla is None]
    assert latent and {c.shape.variant for c in twins} >= {"gqa", "mqa"}
    for c in latent:  # each MLA step has a GQA/MQA twin at its Hq, context and value head dim
        assert any((t.backend, t.shape.n_heads, t.shape.seq_kv, t.shape.head_dim)
                   == (c.backend, c.shape.n_heads, c.shape.seq_kv, c.shape.mla.v_head_dim) for t in twins)
    paging = _answer(agenda, "paging").least
    assert {shape_fields(c.shape)["page_size"] for c in paging} == {None, 16, 128}  # contiguous beside two page sizes
    variants = _answer(agenda, "variants").least
    varied = [c for c in variants if c.shape.score.variants or c.shape.mask.chunk is not None]
    assert {c.shape.score.label for c in varied} >= {"softcap:50", "alibi", "sinks"}
    assert any(c.shape.mask.chunk for c in varied)
    plain = {(c.backend, c.shape.seq_q, c.shape.n_kv_heads) for c in variants if c not in varied}
    assert all((c.backend, c.shape.seq_q, c.shape.n_kv_heads) in plain for c in varied)


def test_a_scaling_line_has_four_lengths_over_8x_in_each_native_dtype_and_the_emulated_one_a_representative(
        cpu_default):
    _, agenda, _ = cpu_default
    least = _answer(agenda, "scaling").least
    fp32 = [c for c in least if c.shape.dtype == "fp32"]
    assert len({c.backend for c in fp32}) == 2
    for backend in {c.backend for c in fp32}:
        seqs = sorted({c.shape.seq_q for c in fp32 if c.backend == backend})
        assert len(seqs) >= MIN_LENGTHS and seqs[-1] >= LENGTH_SPAN * seqs[0]
    bf16 = [c for c in least if c.shape.dtype == "bf16"]
    assert len(bf16) == 2 and len({c.backend for c in bf16}) == 2  # one shape per backend, not the grid


def test_decode_least_has_three_kv_lengths_for_mha_gqa_and_mqa(cpu_default):
    _, agenda, _ = cpu_default
    least = [c for c in _answer(agenda, "decode").least if c.shape.dtype == "fp32"]
    for backend in {c.backend for c in least}:
        for variant in ("mha", "gqa", "mqa"):
            kv = {c.shape.seq_kv for c in least if c.backend == backend and c.shape.variant == variant}
            assert len(kv) >= MIN_KV_LENGTHS, (backend, variant)


def test_the_wrapper_least_times_transformers_where_it_skips_its_mask_and_where_it_builds_one(cpu_default):
    """A square prefill and a one-query decode alone cannot fail the wrapper claim: transformers makes torch's own
    is_causal call there. The least funds a chunked prefill too, each beside the kernels it calls at its shape."""
    from bench.backends.hf import BUILDS, SKIPS, mask_kind

    _, agenda, _ = cpu_default
    least = _answer(agenda, "wrapper").least
    hf = [c for c in least if c.backend == "hf-sdpa"]
    kinds = {c.id: mask_kind(c.backend, c.shape.seq_q, c.shape.seq_kv, c.shape.mask) for c in hf}
    assert set(kinds.values()) == {SKIPS, BUILDS}
    for c in hf:
        assert {"sdpa", "sdpa-flash"} <= {t.backend for t in least if t.shape == c.shape and t.phase == c.phase}


def test_layer_least_reaches_past_where_the_cost_model_puts_attention_at_half(cpu_default):
    from bench.claims.layer import predicted_share

    _, agenda, ctx = cpu_default
    least = _answer(agenda, "layer").least
    layered = [c for c in least if c.shape.scope == "layer"]
    assert {c.shape.seq_q for c in layered} == {c.shape.seq_q for c in least if c.shape.scope == "attention"}
    longest = max(layered, key=lambda c: c.shape.seq_q)
    assert predicted_share(longest, ctx) >= 0.5  # the plan goes at least to the predicted crossing
    assert len({c.shape.seq_q for c in layered}) >= 3


def test_the_agenda_orders_unrunnable_then_least_then_the_rest_and_cuts_the_emulated_grid(cpu_default):
    plan, agenda, _ = cpu_default
    ids = [c.id for c in agenda.order]
    assert len(ids) == len(set(ids)) and set(ids) | set(agenda.left_out) == {c.id for c in plan.cases}
    unrunnable = [i for i, c in enumerate(agenda.order) if c.backend in agenda.unrunnable]
    assert set(agenda.unrunnable) == {"sdpa-efficient", "sdpa-cudnn", "flash-attn"}
    assert unrunnable == list(range(len(unrunnable)))  # first: recorded at once
    least = {c.id for a in agenda.answers for c in a.least}
    first_other = next(i for i, c in enumerate(agenda.order) if i >= len(unrunnable) and c.id not in least)
    assert {c.id for c in agenda.order[len(unrunnable):first_other]} == least
    assert agenda.left_out and all(cid.split("/")[3] == "bf16" for cid in agenda.left_out)
    assert all("emulated" in why and "--dtype bf16" in why and len(why) <= 110 for why in agenda.left_out.values())


def test_a_question_that_cannot_fit_says_what_budget_would_answer_it():
    _, agenda, _ = _agenda(time_budget_s=60.0, elapsed_s=35.0)
    over = [a for a in agenda.answers if a.state == OVER]
    assert over
    for a in over:
        assert a.time_budget_s is not None and a.time_budget_s * 0.9 >= 35.0 + a.cost_s and a.time_budget_s % 60 == 0
    lines = "\n".join(plan_lines(agenda, 60.0, 35.0, ("bf16",)))
    assert "will not fit" in lines and "--time-budget" in lines and "every question answered" in lines


def test_a_question_its_plan_leaves_out_names_the_command_that_measures_it():
    plan, agenda, _ = _agenda(profile="quick", time_budget_s=600.0)
    lines = "\n".join(plan_lines(agenda, 600.0, 35.0, ("bf16",)))
    assert re.search(r"paging +not in this plan: `python -m bench run --profile serving .*--page-size", lines)


def test_a_dtype_set_by_hand_is_measured_across_the_grid():
    by_hand = options.RunRequest(profile="default", device="cpu", axes={"dtypes": "bf16"})
    plan = options.plan(by_hand, default_out=False, listing=True)
    assert cut_dtypes(plan, EPYC) == ()
    default = options.plan(options.RunRequest(profile="default", device="cpu"), default_out=False, listing=True)
    assert cut_dtypes(default, EPYC) == ("bf16",)


def test_the_cuda_default_answers_every_question_on_an_h200_by_the_cost_model():
    _, agenda, _ = _agenda(device="cuda", calibration=spec_calibration("H200"), elapsed_s=15.0)
    assert {a.question.key: a.state for a in agenda.answers} == {
        "heads": FUNDED, "scaling": FUNDED, "decode": FUNDED, "mla": FUNDED, "layer": FUNDED, "kv": AT_START,
        "paging": FUNDED, "variants": FUNDED, "sparse": FUNDED, "sparse-ideal": FUNDED, "trace": FUNDED,
        "wrapper": FUNDED, "linear": FUNDED, "linear-decode": FUNDED, "cascade": FUNDED, "auto-choice": FUNDED,
        "verify": FUNDED}


def test_bench_run_plan_prints_the_questions_and_each_cases_prediction(capsys):
    assert main(["run", "--profile", "default", "--device", "cuda", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "planned from the H200 spec sheet" in out and re.search(r"\n  variants +answered", out)
    case_lines = [line for line in out.splitlines() if line.endswith("/cuda")]
    assert len(case_lines) == len(sweeps.cases(sweeps.profile("default", "cuda"), "cuda"))
    assert all(line.split()[1] == "s" for line in case_lines)
    assert main(["run", "--gpu", "H200", "--list"]) == 2  # --gpu goes with --plan
    assert "--gpu goes with --plan" in capsys.readouterr().err


def test_an_unknown_gpu_is_named():
    from bench.errors import UsageError

    with pytest.raises(UsageError, match="no spec sheet"):
        spec_calibration("RTX 9999")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_log_console_lists_each_case_but_the_ones_announced_as_a_group():
    lines: list[str] = []
    log = LogConsole(lines.append)
    log.finished("a  ok  1 ms", "ok", 1, 3, 65.0)
    log.finished("b  unsupported  runs only on CUDA", "unsupported", 2, 3, 60.0, quiet=True)
    assert lines == ["[1/3 eta 1m05s] a  ok  1 ms"]


def test_the_live_console_counts_statuses_and_lists_only_the_cases_that_ran():
    stream = _Terminal()
    live = LiveConsole(stream)
    live.say("plan ...")
    live.running("case/a")
    live.finished("case/a  ok  1 ms", "ok", 1, 3, 30.0)
    live.finished("case/b  unsupported  why", "unsupported", 2, 3, 20.0)
    live.finished("case/c  skipped  why", "skipped", 3, 3, 0.0)
    live.close()
    text = stream.getvalue()
    assert "case/a  ok" in text and "case/b  unsupported" not in text and "plan ..." in text
    assert live.counts == {"ok": 1, "unsupported": 1, "skipped": 1}


def test_a_budgeted_run_says_its_plan_records_every_case_and_keeps_the_plan(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("bench.measure.calibrate.calibrate", lambda device, dtypes=None: EPYC)
    monkeypatch.setattr("bench.models.kvcache.measured_presets", lambda device: [])
    out = tmp_path / "r.json"
    args = ["run", "--backend", "naive,sdpa,sdpa-cudnn", "--heads", "2", "--kv-heads", "2", "--seq", "32,64",
            "--dtype", "fp32", "--mask", "causal", "--phase", "prefill", "--budget", "0.02", "--device", "cpu",
            "--time-budget", "5m", "--in-process", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "plan for the 5m00s time budget" in printed
    assert "1 backends cannot run here (sdpa-cudnn: runs only on CUDA, not on CPU): their 2 cases" in printed
    assert "sdpa-cudnn/" not in printed.split("plan for")[1].split("==")[0]  # no line per unrunnable case
    doc = read_run(out)
    assert len(doc.entries()) == 6
    assert [q["question"] for q in doc.meta.questions] == ["heads", "scaling", "decode", "mla", "layer", "kv",
                                                            "paging", "variants", "sparse", "sparse-ideal", "trace",
                                                            "wrapper", "linear", "linear-decode", "cascade",
                                                            "auto-choice", "verify"]


def test_a_questions_cases_run_cheapest_first_with_each_shapes_backends_side_by_side(cpu_default):
    """The replayed trace sums each backend's buckets and sampled steps: timed as one stretch per backend, a slow
    spell of the host slowed one side of the ratio only."""
    _, agenda, ctx = cpu_default
    trace = {c.id for c in _answer(agenda, "trace").least if c.shape.serving is not None}
    order = [c for c in agenda.order if c.id in trace]
    shape = [(c.shape, c.phase, c.pass_) for c in order]
    assert len({c.backend for c in order}) >= 2 and len(set(shape)) < len(order)
    for i, key in enumerate(shape):  # a shape's backends are next to each other
        later = [j for j in range(i + 1, len(shape)) if shape[j] == key]
        assert later == list(range(i + 1, i + 1 + len(later)))
    first = [min(ctx.predicted[c.id] for c in order if (c.shape, c.phase, c.pass_) == key)
             for key in dict.fromkeys(shape)]
    assert first == sorted(first)  # the shapes by their cheapest backend's prediction
