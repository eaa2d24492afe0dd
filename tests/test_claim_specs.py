"""One spec per claim (bench.claims), read by the planner and the report: each question's least set of cases, as
the CPU default plans it, decides its claims — timings on one side of the threshold read holds, on the other does
not hold, from exactly those cases; never inconclusive or not measured."""

from __future__ import annotations

import json
from collections.abc import Callable

import pandas as pd
import pytest

from bench.analysis.load import read_results
from bench.analysis.verdict import FAILS, HOLDS, NOT_MEASURED
from bench.backends import get_backend
from bench.claims import (
    AUTO_WITHIN,
    CLAIMS,
    DECODE_SPEEDUP,
    HEADS_TOLERANCE,
    IDEAL_SHARE,
    PAGING_WITHIN,
    QUESTIONS,
    REGISTRY,
    SPARSE_BEATS,
    VARIANTS_WITHIN,
    WRAPPER_WITHIN,
    ClaimSpec,
    judge_of,
    spec,
)
from bench.claims.question import Context
from bench.engine import options
from bench.engine.agenda import make_agenda
from bench.engine.machine import kind_facts
from bench.plan.cost import predict_all
from bench.problem.case import Case
from bench.problem.columns import shape_fields, shape_from_fields
from bench.results import RunMeta
from bench.results.record import new_record
from tests.machines import EPYC
from tests.results_factory import make_run


@pytest.fixture(scope="module")
def planned() -> tuple[dict[str, list[Case]], RunMeta]:
    """Each question's least set in the CPU default's plan, by question key, and the run's facts (its traces)."""
    plan = options.plan(options.RunRequest(profile="default", device="cpu"), default_out=False, listing=True)
    ctx = Context("cpu", predict_all(plan.cases, EPYC, plan.sweep.case_budget_s), ("bf16",), EPYC)
    agenda = make_agenda(plan.cases, ctx, plan.sweep.time_budget_s, 35.0)
    return {a.question.key: a.least for a in agenda.answers}, RunMeta(**kind_facts(plan))


def test_every_spec_has_its_judge_in_report_order_and_every_question_funds_a_claim():
    assert all(callable(judge_of(s)) and judge_of(s).__module__ == s.judge.split(":")[0] for s in CLAIMS)
    # a claim owns its whole path: its spec, its judge and (unless another claim's) its question in its module
    assert all(s.judge.startswith(f"{m.__name__}:") for m, _ in REGISTRY for s in m.SPECS)
    assert sorted(q.key for m, _ in REGISTRY for q in m.QUESTIONS) == sorted(q.key for q in QUESTIONS)
    assert len({s.key for s in CLAIMS}) == len({s.text for s in CLAIMS}) == len(CLAIMS)
    keys = {q.key for q in QUESTIONS}
    assert {s.question for s in CLAIMS if s.question} <= keys
    assert all(q.claims for q in QUESTIONS)
    for q in QUESTIONS:
        assert q.command == q.claims[0].command and all(c.text in q.asks for c in q.claims)


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda s: s.key)
def test_a_run_without_its_cases_reads_not_measured_in_the_specs_words(claim: ClaimSpec, tmp_path):
    v = judge_of(claim)(_frame([_timed(_case("naive", 512), 1e-3)], tmp_path), RunMeta())
    assert v.verdict == NOT_MEASURED and v.claim == claim.text and claim.command in v.numbers


# -- the least set decides each claim ------------------------------------------------------------------------------

def _case(backend: str, seq: int) -> Case:

    return Case(backend, shape_from_fields(dict(batch=1, seq_q=seq, seq_kv=seq, n_heads=8, n_kv_heads=8, head_dim=64,
                                                dtype="fp32", mask="causal")), "prefill", "fwd", "cpu")


def _timed(c: Case, t: float, **fields) -> dict:
    """The engine's record of `c` timed at t seconds (a 1% CI), with `fields` overridden."""
    rec = new_record(c, get_backend(c.backend).memory, threads=2).to_dict()
    rec.update(status="ok", reason="", median_s=t, ci_low_s=0.99 * t, ci_high_s=1.01 * t, iqr_s=0.02 * t, rounds=5,
               noisy=False, peak_mem_bytes=rec["model_mem_bytes"], samples=[t] * 5, total_s=t)
    rec.update(fields)
    return rec


def _frame(records: list[dict], folder) -> pd.DataFrame:
    path = folder / "run.json"
    path.write_text(json.dumps(make_run(records, run_id="least")))
    return read_results(path)[0]


def _base(c: Case) -> float:
    """A plain time: the FLOPs at 10 GFLOP/s, the bytes at 10 GB/s."""
    rec = new_record(c, get_backend(c.backend).memory, threads=2)
    return rec.flops / 1e10 + rec.bytes / 1e10


def _fused(c: Case) -> bool:
    return get_backend(c.backend).memory == "tiled"


def _heads(c: Case, holds: bool) -> dict:
    # at fixed d_model the FLOPs are equal: free heads keep the time, a per-head cost grows it
    return _timed(c, 1e-2 * (1 if holds else c.shape.n_heads / 2))


def _memory(c: Case, holds: bool) -> dict:
    # each side on its own model (holds) or on the other's: the score matrix as S, the fused kernel as S²
    s = c.shape.seq_kv
    quadratic = _fused(c) != holds
    return _timed(c, _base(c), peak_mem_bytes=(s * s if quadratic else 4096 * s) * 4)


def _decode(c: Case, holds: bool) -> dict:
    # a step held by its KV reads speeds up by Hq/Hkv; one held by work that scales with Hq does not at all
    s = c.shape
    return _timed(c, 1e-6 * s.seq_kv * (s.n_kv_heads if holds else s.n_heads))


def _mla(c: Case, holds: bool) -> dict:
    s = c.shape
    t = 1e-6 * s.seq_kv * s.n_kv_heads
    return _timed(c, t * (0.5 if holds else 3.0) if (s.mla is not None and s.mla.form == "absorbed") else t)


def _layer(c: Case, holds: bool) -> dict:
    # attention as S (so its share does not rise), the projections 1/10 of it (holds) or 10x it (does not)
    s = c.shape
    attention = 1e-6 * s.seq_kv
    return _timed(c, attention * (1 + (0.1 if holds else 10.0)) if s.scope == "layer" else attention)


def _paging(c: Case, holds: bool) -> dict:
    contiguous = 1e-3
    return _timed(c, contiguous if shape_fields(c.shape)["page_size"] is None else contiguous * (1.1 if holds else 2.0))


def _variants(c: Case, holds: bool) -> dict:
    plain = 1e-3
    varied = bool(c.shape.score.variants) or c.shape.mask.chunk is not None
    return _timed(c, plain * (1.1 if holds else 2.0) if varied else plain)


def _trace(c: Case, holds: bool) -> dict:
    # on the grid sdpa-flash is twice as fast as naive; on the trace's batches it stays so (holds) or is not
    serving = shape_fields(c.shape)["lengths"] is not None
    if c.backend != "sdpa-flash":
        return _timed(c, _base(c) * 2.0)
    return _timed(c, _base(c) * (3.0 if serving and not holds else 1.0))


def _wrapper(c: Case, holds: bool) -> dict:
    wrapper = get_backend(c.backend).wraps is not None
    return _timed(c, _base(c) * ((1.05 if holds else 2.0) if wrapper else 1.0))


def _sparse_world(c: Case, holds: bool) -> dict:
    # dense as S²; a sparse method at its density x 1.2 of dense (beats it, near the ideal) or at 2x dense
    dense = 1e-3 * (c.shape.seq_kv / 512) ** 2
    if not c.shape.sparsity.sparse:
        return _timed(c, dense * (1.0 if c.backend == "sdpa-flash" else 1.5))
    density = new_record(c, get_backend(c.backend).memory, threads=2).density
    return _timed(c, dense * (1.2 * density if holds else 2.0))


def _linear_world(c: Case, holds: bool) -> dict:
    # dense as S² (a decode step as its KV); a linear prefill at half of dense (holds) or twice it, a linear decode
    # step flat (holds) or growing as its KV like dense's
    dense = 1e-3 * (c.shape.seq_kv / 1024) ** (2 if c.phase == "prefill" else 1)
    if c.shape.linear.method is None:
        return _timed(c, dense)
    if c.phase == "prefill":
        return _timed(c, dense * (0.5 if holds else 2.0))
    return _timed(c, 2e-4 if holds else 2 * dense)


def _auto_choice(c: Case, holds: bool) -> dict:
    # the automatic backend 1.05x its fastest kernel (within AUTO_WITHIN) or 2x it
    automatic = bool(get_backend(c.backend).chooses)
    return _timed(c, _base(c) * ((1.05 if holds else 2.0) if automatic else 1.0))


def _verify(c: Case, holds: bool) -> dict:
    # a draft's verification 1.1x its one-query step (within VERIFY_WITHIN) or 2x it
    step = 1e-3
    return _timed(c, step if c.shape.draft is None else step * (1.1 if holds else 2.0))


def _cascade_world(c: Case, holds: bool) -> dict:
    # a plain step as its bytes; the cascade's at half the best plain step's (holds) or twice it
    plain = 1e-3 * c.shape.batch * c.shape.seq_kv / 1024
    return _timed(c, plain * ((0.5 if holds else 2.0) if get_backend(c.backend).cascade else 1.0))


WORLDS: dict[str, tuple[Callable[[Case, bool], dict], str]] = {
    "heads": (_heads, f"time across head counts within {HEADS_TOLERANCE}× (holds) or growing with Hq"),
    "memory": (_memory, "the fused kernel's peak memory as S and the naive one's as S² (holds), or the other way"),
    "fused-decode": (_decode, f"a decode step as its KV reads ({DECODE_SPEEDUP[0]:g}× or more) or as Hq"),
    "expanding-decode": (_decode, "the same, for the kernels that expand K/V"),
    "mla": (_mla, "MLA's step half GQA's (holds) or 3× it"),
    "layer": (_layer, "attention 10/11 of the layer (holds) or 1/11, at every length"),
    "paging": (_paging, f"a paged step 1.1× a contiguous one (within {PAGING_WITHIN}×) or 2×"),
    "variants": (_variants, f"each variant 1.1× its plain twin (within {VARIANTS_WITHIN}×) or 2×"),
    "sparse": (_sparse_world, f"sparse at 1.2 × density of dense (≤ {SPARSE_BEATS}×) or at 2× dense"),
    "sparse-ideal": (_sparse_world, f"sparse within 1/1.2 of the ideal (≥ {IDEAL_SHARE}) or slower than dense"),
    "trace": (_trace, "the grid's faster kernel stays faster on the trace's batches (holds) or not"),
    "auto-choice": (_auto_choice, f"the automatic SDPA 1.05× its fastest kernel (within {AUTO_WITHIN}×) or 2×"),
    "wrapper": (_wrapper, f"transformers' path 1.05× the kernel it calls (within {WRAPPER_WITHIN}×) or 2×"),
    "linear": (_linear_world, "linear prefill at half the dense kernel's time (holds) or twice it"),
    "linear-decode": (_linear_world, "a linear decode step flat over KV (holds) or growing as dense's"),
    "cascade": (_cascade_world, "the cascade's decode step half the best plain step's at every (P, B) or twice it"),
    "verify": (_verify, "each draft's verification 1.1× its one-query step (within 1.25×) or 2×"),
}


def _kv_run(holds: bool, monkeypatch) -> RunMeta:
    """The run's facts for the KV claim: llama-3-8b's twins as transformers caches them (holds), or under a cache that
    repeats K/V to all Hq heads before keeping them, as an implementation without grouped KV would (does not)."""
    pytest.importorskip("transformers")
    from transformers.cache_utils import DynamicLayer

    from bench.models.kvcache import measured_twins
    from bench.models.presets import preset

    llama = preset("llama-3-8b")
    if not holds:
        update = DynamicLayer.update

        def all_heads(self, keys, values, *args, **kwargs):
            repeat = llama.n_heads // keys.shape[1]
            update(self, keys.repeat_interleave(repeat, 1), values.repeat_interleave(repeat, 1), *args, **kwargs)
            return keys, values  # one step from an empty cache: attention reads this step's K/V either way

        monkeypatch.setattr(DynamicLayer, "update", all_heads)
    return RunMeta(kv_measured=measured_twins(llama))


# claims judged from the run's facts, not its cases (their question funds none): facts on each side of the threshold
RUN_WORLDS: dict[str, tuple[Callable, str]] = {
    "kv": (_kv_run, "llama-3-8b's transformers cache keeping Hkv heads (holds) or all Hq heads"),
}


def test_every_claim_a_question_funds_has_a_world_here():
    assert set(WORLDS) | set(RUN_WORLDS) == {s.key for s in CLAIMS if s.question}


@pytest.mark.parametrize("key", sorted(WORLDS))
def test_the_least_set_decides_its_claim_both_ways(key: str, planned, tmp_path):
    least, run = planned
    claim = spec(key)
    cases = least[claim.question]
    assert cases, f"the CPU default funds no case for {key}"
    world, _ = WORLDS[key]
    judge = judge_of(claim)
    for holds, expected in ((True, HOLDS), (False, FAILS)):
        folder = tmp_path / expected.replace(" ", "-")
        folder.mkdir()
        v = judge(_frame([world(c, holds) for c in cases], folder), run)
        assert v.verdict == expected, (key, holds, v.numbers, v.why)


@pytest.mark.parametrize("key", sorted(RUN_WORLDS))
def test_the_runs_facts_decide_its_claim_both_ways(key: str, planned, tmp_path, monkeypatch):
    least, _ = planned
    claim = spec(key)
    assert not least[claim.question]  # judged from the run's facts: its question funds no case
    world, _ = RUN_WORLDS[key]
    df = _frame([_timed(_case("naive", 512), 1e-3)], tmp_path)
    for holds, expected in ((True, HOLDS), (False, FAILS)):
        v = judge_of(claim)(df, world(holds, monkeypatch))
        assert v.verdict == expected, (key, holds, v.numbers, v.why)
