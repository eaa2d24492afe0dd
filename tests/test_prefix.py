"""Shared-prefix batches and cascade attention (bench.kinds.prefix, bench.prefix): the `prefix` shape field through
columns and case ids (old ids unchanged), its input errors (one line, exit 2), the cascade against float64 plain
attention over several (B, P, L, GQA) decode steps and suffix prefills, the log-sum-exp merge, the byte counts, the
claim judged both ways on synthetic frames, its least set funded by the CPU default's planner, and the report's
section and figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.analysis.load import read_results
from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, NOT_MEASURED
from bench.backends import Unsupported, get_backend
from bench.claims.cascade import CASCADE_BEATS, CASCADE_LOSES, cascade_wins, region
from bench.engine.sweeps import cases
from bench.errors import InputError, UsageError
from bench.kinds import KINDS, check_shape, kind_of
from bench.kinds.base import ReferenceCache
from bench.plan.sweep import from_flags
from bench.prefix.cascade import cascade, make_inputs, merge, naive_part, sdpa_part
from bench.prefix.counts import kv_bytes, method_bytes, prefix_flops
from bench.problem.case import Case
from bench.problem.columns import shape_fields, shape_from_fields
from bench.problem.masks import Mask
from bench.problem.shapes import ShapeError
from bench.reference import compare_to_reference, reference_attention
from bench.results.record import new_record
from tests.command import bench
from tests.results_factory import make_run


def shape(prefix: int | None = 1024, suffix: int = 64, batch: int = 4, seq_q: int = 1, hq: int = 8, hkv: int = 2,
          d: int = 32, **more):
    fields = dict(batch=batch, seq_q=seq_q, seq_kv=(prefix or 0) + suffix, n_heads=hq, n_kv_heads=hkv, head_dim=d,
                  dtype="fp32", mask="causal", prefix=prefix) | more
    return shape_from_fields(fields)


# --- the shape field and the sweep --------------------------------------------------------------------------------

def test_the_prefix_field_round_trips_and_stays_out_of_old_ids():
    s = shape(1024, 64)
    assert shape_fields(s)["prefix"] == 1024 and shape_from_fields(shape_fields(s)) == s
    c = Case("cascade-naive", s, "decode", "fwd", "cpu")
    assert c.id == "cascade-naive/gqa/b4-hq8-hkv2-q1-kv1088-d32-prefix=1024/fp32/causal/decode/fwd/cpu"
    assert c.kind == "prefix" and kind_of(c) is KINDS["prefix"]
    dense = Case("sdpa-flash", shape(None, 1088), "decode", "fwd", "cpu")
    assert dense.id == "sdpa-flash/gqa/b4-hq8-hkv2-q1-kv1088-d32/fp32/causal/decode/fwd/cpu"  # as before
    assert dense.kind == "dense" and shape_fields(dense.shape)["prefix"] is None


@pytest.mark.parametrize("more, words", [
    (dict(prefix=0), "must be a positive integer"),
    (dict(prefix=-5), "must be a positive integer"),
    (dict(prefix=1088, suffix=0), "not shorter than the context"),
    (dict(seq_q=65), "do not fit in the suffix"),
    (dict(mask="window:64"), "mask none or causal"),
    (dict(score="softcap:50"), "plain attention alone"),
])
def test_a_bad_prefix_is_one_shape_error(more, words):
    fields = dict(prefix=1024, suffix=64) | more
    with pytest.raises(ShapeError, match=words):
        shape(fields.pop("prefix"), fields.pop("suffix"), **fields)


def test_a_sweep_with_prefix_runs_plain_and_cascade_cases_alone():
    sweep = from_flags({"prefix": "1024,4096", "suffix": "64,128", "batch": "1,8", "heads": "8", "kv-heads": "2",
                        "phase": "decode,prefill", "mask": "causal", "backend": "naive,sdpa-flash,cascade-naive,"
                        "hf-gdn,topk-gather", "dtype": "fp32"})
    found = cases(sweep, "cpu")
    assert {c.backend for c in found} == {"naive", "sdpa-flash", "cascade-naive"}  # no linear or sparse-only kernel
    assert all(c.shape.prefix in (1024, 4096) and c.pass_ == "fwd" for c in found)
    decode = [c for c in found if c.phase == "decode"]
    prefill = [c for c in found if c.phase == "prefill"]
    assert {c.shape.seq_q for c in decode} == {1} and len(decode) == 2 * 2 * 2 * 3
    assert all(c.shape.seq_q == c.shape.seq_kv - c.shape.prefix for c in prefill) and len(prefill) == len(decode)
    assert cases(from_flags({"backend": "cascade-naive", "seq": "256"}), "cpu") == []  # no prefix: not offered


@pytest.mark.parametrize("flags, error, words", [
    ({"prefix": "0"}, InputError, "--prefix: prefix=0 must be a positive integer"),
    ({"prefix": "1024", "suffix": "-1"}, InputError, "--suffix: suffix=-1 must be a positive integer"),
])
def test_bad_prefix_flags_are_refused_by_name(flags, error, words):
    with pytest.raises(error, match=words):
        from_flags(flags)


def test_queries_beyond_the_suffix_are_a_usage_error():
    with pytest.raises(UsageError, match="--decode-q 8 exceeds --suffix 4"):
        cases(from_flags({"prefix": "64", "suffix": "4", "decode-q": "8", "phase": "decode", "mask": "causal"}), "cpu")


@pytest.mark.parametrize("args, words", [(["--prefix", "0"], "must be a positive integer"),
                                         (["--prefix", "1024", "--suffix", "0"], "must be a positive integer")])
def test_bad_prefix_flags_exit_2_with_one_line(args, words, tmp_path):
    proc = bench("run", *args, "--phase", "decode", "--mask", "causal", "--plan", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and words in proc.stderr


# --- the math -----------------------------------------------------------------------------------------------------

POINTS = [  # (B, P, L, Sq, Hq, Hkv, mask): decode steps, suffix prefills, MHA, GQA, MQA, one request, no mask
    (4, 100, 37, 1, 8, 2, "causal"), (3, 64, 16, 16, 4, 4, "causal"), (2, 33, 20, 7, 6, 1, "causal"),
    (1, 50, 10, 1, 4, 2, "causal"), (5, 40, 12, 12, 8, 2, "none"), (3, 129, 65, 65, 4, 2, "causal"),
]


@pytest.mark.parametrize("b, p, suffix, sq, hq, hkv, mask", POINTS)
@pytest.mark.parametrize("part", [naive_part, sdpa_part], ids=["naive", "sdpa"])
def test_cascade_equals_float64_plain_attention(part, b, p, suffix, sq, hq, hkv, mask):
    s = shape(p, suffix, batch=b, seq_q=sq, hq=hq, hkv=hkv, mask=mask)
    x = make_inputs(s, "cpu", seed=3)
    k, v = x.whole()
    assert k.shape == (b, hkv, p + suffix, 32)
    assert torch.equal(k[b - 1, :, :p], x.k_prefix[0])  # the prefix copied into every request's cache
    ref = reference_attention(x.q, k, v, mask=s.mask)
    check = compare_to_reference(cascade(part, x, s.mask), ref)
    assert check.ok, check.describe()


def test_cascade_in_bf16_is_within_bf16_tolerance():
    s = shape(200, 40, batch=3, seq_q=40, dtype="bf16")
    x = make_inputs(s, "cpu", seed=5)
    k, v = x.whole()
    check = compare_to_reference(cascade(naive_part, x, s.mask), reference_attention(x.q, k, v, mask=s.mask))
    assert check.ok, check.describe()


def test_the_merge_is_the_log_sum_exp_weighting_and_does_not_overflow():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8)
    o1, l1 = naive_part(q, k[:, :, :6], v[:, :, :6], Mask())
    o2, l2 = naive_part(q, k[:, :, 6:], v[:, :, 6:], Mask())
    whole = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, -1) @ v
    assert torch.allclose(merge(o1, l1, o2, l2), whole, atol=1e-6)
    w = l1.exp() / (l1.exp() + l2.exp())  # the formula as written
    assert torch.allclose(merge(o1, l1, o2, l2), w.unsqueeze(-1) * o1 + (1 - w.unsqueeze(-1)) * o2, atol=1e-6)
    big = merge(o1, l1 + 1000.0, o2, l2)  # e^{l} would overflow: the part with the larger sum takes all the weight
    assert torch.isfinite(big).all() and torch.allclose(big, o1)
    assert torch.allclose(l1, torch.logsumexp(q @ k[:, :, :6].transpose(-1, -2) / 8**0.5, -1), atol=1e-6)


def test_the_kind_checks_plain_and_cascade_backends_against_float64():
    kind = KINDS["prefix"]
    refs = ReferenceCache()
    for backend in ("naive", "sdpa-flash", "cascade-naive", "cascade-sdpa"):
        for sq in (1, 16):
            case = Case(backend, shape(96, 16, batch=3, seq_q=sq), "decode", "fwd", "cpu")
            check, _ = kind.check(case, kind.setup(case), refs)
            assert check.ok, (backend, sq, check.describe())
            out = kind.timed_call(case, kind.setup(case))()
            assert tuple(out.shape) == (3, 8, sq, 32)


def test_a_large_case_is_checked_on_a_smaller_batch_then_shorter_lengths():
    s = check_shape(shape(16384, 256, batch=32, seq_q=256, hq=32, hkv=32, d=128))
    assert s.prefix is not None and s.batch == 2 and s.seq_q <= s.seq_kv - s.prefix
    assert s.batch * s.n_heads * s.seq_q * s.seq_kv <= 1 << 25
    small = shape(1024, 64)
    assert check_shape(small) == small


def test_unsupported_cascades_say_why_in_one_line():
    kind = KINDS["prefix"]
    with pytest.raises(Unsupported, match="runs only on CUDA"):
        kind.setup(Case("flashinfer-cascade", shape(dtype="bf16"), "decode", "fwd", "cpu"))
    from bench.prefix.cascade import flashinfer_cascade

    x = make_inputs(shape(), "cpu", 0)
    with pytest.raises(Unsupported, match="FlashInfer is not installed"):
        flashinfer_cascade(x.q, x.k_prefix, x.v_prefix, x.k_suffix, x.v_suffix, mask=Mask(True))
    with pytest.raises(Unsupported, match="forward only"):
        kind.setup(Case("cascade-naive", shape(), "decode", "fwd+bwd", "cpu"))
    assert "cascade only" in get_backend("cascade-naive").sparsity_reason("none")


@pytest.mark.slow  # compiles (or tries to) FlexAttention on the CPU
def test_cascade_flex_on_the_cpu_is_unsupported_in_torchs_words():
    from bench.prefix.cascade import cascade_flex

    x = make_inputs(shape(), "cpu", 0)
    try:
        out = cascade_flex(x.q, x.k_prefix, x.v_prefix, x.k_suffix, x.v_suffix, mask=Mask(True))
    except Unsupported as err:
        assert str(err).startswith("cascade-flex: ") and "\n" not in str(err)
        return
    k, v = x.whole()  # a torch that compiles return_lse on a CPU: then it must be right
    assert compare_to_reference(out, reference_attention(x.q, k, v, mask=Mask(True))).ok


# --- the counts ---------------------------------------------------------------------------------------------------

def test_plain_reads_the_prefix_b_times_and_cascade_once():
    s = shape(1000, 24, batch=8, seq_q=1, hq=8, hkv=2, d=64)
    qo = 2 * 8 * 8 * 1 * 64 * 4
    assert kv_bytes(s, "plain") == 2 * 2 * 64 * 8 * 1024 * 4
    assert kv_bytes(s, "cascade") == 2 * 2 * 64 * (1000 + 8 * 24) * 4
    assert method_bytes(s, "plain") == qo + kv_bytes(s, "plain")
    plain = new_record(Case("sdpa-flash", s, "decode", "fwd", "cpu"), "tiled", threads=2)
    casc = new_record(Case("cascade-sdpa", s, "decode", "fwd", "cpu"), "tiled", threads=2)
    assert plain.flops == casc.flops == prefix_flops(s) == 4 * 8 * 8 * 64 * 1024  # plain attention's FLOPs
    assert plain.bytes == plain.plain_bytes == casc.plain_bytes and casc.bytes == casc.cascade_bytes
    assert casc.kv_cache_bytes == kv_bytes(s, "cascade") and plain.kv_cache_bytes == kv_bytes(s, "plain")
    one = shape(1000, 24, batch=1)
    assert method_bytes(one, "plain") == method_bytes(one, "cascade")  # one request: nothing to share


# --- the claim ----------------------------------------------------------------------------------------------------

def record(c: Case, t: float) -> dict:
    rec = new_record(c, get_backend(c.backend).memory, threads=2).to_dict()
    rec.update(status="ok", reason="", median_s=t, ci_low_s=0.99 * t, ci_high_s=1.01 * t, iqr_s=0.02 * t, rounds=5,
               noisy=False, samples=[t] * 5)
    return rec


def frame(recs: list[dict], folder: Path):
    path = folder / "run.json"
    path.write_text(json.dumps(make_run(recs, run_id="prefix")))
    return read_results(path)[0]


def world(ratio, prefixes=(1024, 4096), batches=(1, 16)) -> list[dict]:
    """cascade-sdpa at ratio(P, B) x the best plain step (sdpa-flash; naive slower) at each point."""
    recs = []
    for p in prefixes:
        for b in batches:
            t = 1e-5 * b * p / 1024
            s = shape(p, 128, batch=b, d=64)
            recs += [record(Case("sdpa-flash", s, "decode", "fwd", "cpu"), t),
                     record(Case("naive", s, "decode", "fwd", "cpu"), 3 * t),
                     record(Case("cascade-sdpa", s, "decode", "fwd", "cpu"), ratio(p, b) * t)]
    return recs


def test_the_claim_holds_fails_and_depends_on_where_the_cascade_wins(tmp_path):
    assert CASCADE_BEATS < 1 < CASCADE_LOSES
    v = cascade_wins(frame(world(lambda p, b: 0.5), tmp_path))
    assert v.verdict == HOLDS and len(v.conditions) == 4 and "31×" in v.numbers, v.numbers
    assert all(d["plain_backend"] == "sdpa-flash" for d in v.detail)
    (tmp_path / "loses").mkdir()
    v = cascade_wins(frame(world(lambda p, b: 2.0), tmp_path / "loses"))
    assert v.verdict == FAILS and "second call" in v.why, v.numbers
    (tmp_path / "region").mkdir()  # wins at batch 16 from either prefix, never at batch 1
    v = cascade_wins(frame(world(lambda p, b: 0.3 if b > 1 else 1.5), tmp_path / "region"))
    assert v.verdict == DEPENDS and "B 1: nowhere, B 16: P ≥ 1,024" in v.numbers, v.numbers
    assert all(c.pairs and c.pairs[0][1].startswith("sdpa-flash/") for c in v.conditions)


def test_the_region_needs_every_longer_prefix():
    from bench.analysis.verdict import INCONCLUSIVE

    assert region([(1024, 8, HOLDS), (4096, 8, INCONCLUSIVE), (16384, 8, HOLDS), (1024, 1, FAILS)]) == \
        {1: None, 8: 16384}


def test_a_level_point_and_one_at_its_bound_are_decided_not_faster(tmp_path):
    """Level with plain attention (its interval inside 0.95-1.05) is no win: the claim depends where the cascade
    wins elsewhere, instead of waiting on a point no number of rounds decides; a point whose estimate sits on 0.95
    (within the band around it) is at its bound, which for this claim's margin counts as not faster."""
    v = cascade_wins(frame(world(lambda p, b: 0.3 if b > 1 else 1.0), tmp_path))
    assert v.verdict == DEPENDS and "level with the best plain step" in v.why, v.why
    assert {d["verdict"] for d in v.detail if d["batch"] == 1} == {FAILS}
    (tmp_path / "bound").mkdir()
    v = cascade_wins(frame(world(lambda p, b: 0.3 if b > 1 else 0.95), tmp_path / "bound"))
    assert v.verdict == DEPENDS and {d["verdict"] for d in v.detail if d["batch"] == 1} == {FAILS}
    assert all(c.at_bound for c in v.conditions if "B 1" in c.name and not c.name.endswith("B 16"))


def test_no_cascade_case_is_not_measured(tmp_path):
    v = cascade_wins(frame([record(Case("naive", shape(None, 512, batch=1), "decode", "fwd", "cpu"), 1e-3)],
                           tmp_path))
    assert v.verdict == NOT_MEASURED and "--prefix" in v.numbers


def test_the_planner_funds_the_claims_least_set_in_the_default_profile():
    from bench.claims.question import Context
    from bench.engine import options
    from bench.engine.agenda import make_agenda
    from bench.plan.cost import predict_all
    from tests.machines import EPYC

    plan = options.plan(options.RunRequest(profile="default", device="cpu"), default_out=False, listing=True)
    ctx = Context("cpu", predict_all(plan.cases, EPYC, plan.sweep.case_budget_s), ("bf16",), EPYC)
    agenda = make_agenda(plan.cases, ctx, plan.sweep.time_budget_s, 35.0)
    least = {a.question.key: a.least for a in agenda.answers}["cascade"]
    assert {c.backend for c in least} == {"sdpa-flash", "cascade-sdpa"}
    assert {(c.shape.prefix, c.shape.batch) for c in least} == {(1024, 1), (1024, 16), (4096, 1), (4096, 16)}
    ids = {c.id for c in plan.cases}
    assert all(c.id in ids for c in least)


# --- the report ---------------------------------------------------------------------------------------------------

def test_the_section_and_the_figure_show_plain_against_cascade(tmp_path):
    from bench.report.figures.prefix import prefix_decode
    from bench.report.sections import prefix as section

    df = frame(world(lambda p, b: 0.3 if b > 1 else 1.5), tmp_path)
    blocks = section.section(df, None, None)  # it reads the rows alone
    assert blocks and blocks[0].text == "Shared-prefix batches"
    tables = [b for b in blocks if hasattr(b, "rows")]
    assert len(tables[0].rows) == 4 and tables[-1].headers[-1] == "plain / cascade"
    fig = prefix_decode(df)
    assert fig is not None and len(fig.axes) == 2
    (tmp_path / "none").mkdir()
    assert prefix_decode(frame([record(Case("naive", shape(None, 512, batch=1), "decode", "fwd", "cpu"), 1e-3)],
                               tmp_path / "none")) is None
