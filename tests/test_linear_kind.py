"""Linear attention as a kind of case: the `linear` shape field through columns and case ids (old ids unchanged), its
input errors (one line, exit 2), its offer to the linear backends alone, a tiny sweep run end to end on the CPU
(checked against the float64 recurrence, then timed), and both claims judged both ways on synthetic frames."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.analysis.load import read_results
from bench.analysis.verdict import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED
from bench.backends import get_backend
from bench.claims.linear import (
    DENSE_GROWS,
    FLAT_WITHIN,
    LINEAR_BEATS,
    LINEAR_LOSES,
    MIN_LINEAR_LENGTHS,
    linear_crossover,
    linear_decode,
)
from bench.kinds import KINDS, check_shape, kind_of
from bench.kinds.expansion import offered
from bench.problem.case import Case
from bench.problem.columns import COLUMNS, shape_fields, shape_from_fields
from bench.problem.linear import Linear
from bench.problem.shapes import ShapeError
from bench.results.record import new_record
from tests.command import bench
from tests.results_factory import make_run


def shape(linear: str = "gdn:64", seq: int = 256, seq_q: int | None = None, **more):
    fields = dict(batch=1, seq_q=seq if seq_q is None else seq_q, seq_kv=seq, n_heads=4, n_kv_heads=2, head_dim=32,
                  dtype="fp32", mask="causal", linear=linear) | more
    return shape_from_fields(fields)


# --- the shape field ----------------------------------------------------------------------------------------------

def test_the_linear_field_is_a_later_column_and_round_trips():
    assert [c.default for c in COLUMNS if c.name == "linear"] == ["none"]
    assert Linear.parse("gdn") == Linear("gdn", 64) and Linear.parse("none").label == "none"
    s = shape("gdn:64")
    assert s.linear == Linear("gdn", 64) and shape_fields(s)["linear"] == "gdn:64"
    assert shape_from_fields(shape_fields(s)) == s
    c = Case("hf-gdn", s, "prefill", "fwd", "cpu")
    assert c.id == "hf-gdn/gqa/b1-hq4-hkv2-q256-kv256-d32-linear=gdn:64/fp32/causal/prefill/fwd/cpu"
    assert c.kind == "linear" and kind_of(c) is KINDS["linear"]
    dense = Case("sdpa-flash", shape("none"), "prefill", "fwd", "cpu")
    assert dense.id == "sdpa-flash/gqa/b1-hq4-hkv2-q256-kv256-d32/fp32/causal/prefill/fwd/cpu"  # as before
    assert dense.kind == "dense"


@pytest.mark.parametrize("text, words", [("gdn:48", "not a positive power of two"), ("mamba", "unknown method"),
                                         ("gdn:x", "not an integer")])
def test_a_bad_linear_value_is_one_shape_error(text, words):
    with pytest.raises(ShapeError, match=words):
        shape(text)


def test_a_chunk_must_divide_the_prefill_and_the_rest_must_be_plain():
    with pytest.raises(ShapeError, match="chunk 64 does not divide the prefill length 100"):
        shape("gdn:64", seq=100)
    with pytest.raises(ShapeError, match="causal mask alone"):
        shape(mask="none")
    with pytest.raises(ShapeError, match="causal mask alone"):
        shape(score="softcap:50")
    with pytest.raises(ShapeError, match="one token"):
        shape(seq=1024, seq_q=4)
    shape(seq=1000, seq_q=1)  # a decode step's context need not be whole chunks


def test_linear_backends_are_offered_their_methods_alone_and_dense_ones_no_linear_case():
    gdn, lin, dense = shape("gdn:64"), shape("linear:64"), shape("none")
    assert offered("hf-gdn", gdn) and not offered("hf-gdn", lin) and not offered("hf-gdn", dense)
    assert offered("torch-linear", lin) and not offered("torch-linear", gdn)
    assert offered("sdpa-flash", dense) and not offered("sdpa-flash", gdn) and not offered("naive", lin)
    assert "runs linear attention only" in get_backend("fla-gdn").sparsity_reason("none")


def test_a_long_prefill_is_checked_on_whole_chunks_and_a_decode_step_as_it_is():
    assert check_shape(shape(seq=8192)).seq_q == 256
    assert check_shape(shape("gdn:512", seq=8192)).seq_q == 1024  # two chunks at least
    assert check_shape(shape(seq=65536, seq_q=1)).seq_kv == 65536


def test_the_record_counts_the_chunked_prefill_and_the_state_of_a_decode_step():
    prefill = new_record(Case("hf-gdn", shape(seq=256), "prefill", "fwd", "cpu"), "tiled", threads=2)
    decode = new_record(Case("hf-gdn", shape(seq=4096, seq_q=1), "decode", "fwd", "cpu"), "tiled", threads=2)
    longer = new_record(Case("hf-gdn", shape(seq=16384, seq_q=1), "decode", "fwd", "cpu"), "tiled", threads=2)
    assert prefill.flops > 0 and decode.flops == longer.flops and decode.bytes == longer.bytes
    assert decode.kv_cache_bytes == 1 * 4 * 32 * 32 * 4  # B x Hv x d_k x d_v float32


# --- the command line ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--linear", "gdn:48", "--seq", "128"], "chunk 48 is not a positive power of two"),
    (["--linear", "gdn", "--seq", "100"], "chunk 64 does not divide the prefill length 100"),
    (["--linear", "rwkv", "--seq", "128"], "unknown method 'rwkv'"),
])
def test_bad_linear_flags_exit_2_with_one_line(args, words, tmp_path):
    proc = bench("run", *args, "--mask", "causal", "--plan", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and words in proc.stderr


@pytest.mark.slow  # runs a sweep
def test_a_tiny_linear_sweep_runs_end_to_end_on_the_cpu(tmp_path):
    proc = bench("run", "--profile", "quick", "--linear", "none,gdn,linear", "--backend",
                 "hf-gdn,torch-linear,sdpa-flash", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--seq",
                 "128", "--mask", "causal", "--dtype", "fp32", "--phase", "prefill,decode", "--decode-q", "1",
                 "--decode-kv", "256", "--budget", "0.05", "--device", "cpu", "--out", "r.json", cwd=tmp_path,
                 timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df, _ = read_results(tmp_path / "r.json")
    assert len(df) == 6 and set(df["status"]) == {"ok"}, df[["case_id", "status", "reason"]]
    linear = df[df["linear"] != "none"]
    assert sorted(linear["backend"]) == ["hf-gdn", "hf-gdn", "torch-linear", "torch-linear"]
    assert (linear["max_abs_err"].fillna(0) >= 0).all() and (linear["median_s"] > 0).all()


# --- the claims on synthetic frames -------------------------------------------------------------------------------

def record(c: Case, t: float) -> dict:
    rec = new_record(c, get_backend(c.backend).memory, threads=2).to_dict()
    rec.update(status="ok", reason="", median_s=t, ci_low_s=0.99 * t, ci_high_s=1.01 * t, iqr_s=0.02 * t, rounds=5,
               noisy=False, samples=[t] * 5)
    return rec


def frame(recs: list[dict], folder: Path):
    path = folder / "run.json"
    path.write_text(json.dumps(make_run(recs, run_id="linear")))
    return read_results(path)[0]


def prefill_world(ratios: list[float], lengths=(1024, 2048, 4096, 8192)) -> list[dict]:
    """hf-gdn at ratio x the best dense kernel (sdpa-flash; naive slower) at each length."""
    recs = []
    for seq, ratio in zip(lengths, ratios, strict=True):
        t = 1e-3 * (seq / 1024) ** 2
        recs += [record(Case("sdpa-flash", shape("none", seq), "prefill", "fwd", "cpu"), t),
                 record(Case("naive", shape("none", seq), "prefill", "fwd", "cpu"), 3 * t),
                 record(Case("hf-gdn", shape("gdn:64", seq), "prefill", "fwd", "cpu"), ratio * t)]
    return recs


def decode_world(linear_growth: float, dense_growth: float, kvs=(1024, 4096, 16384)) -> list[dict]:
    """Decode steps whose time grows by these factors from the shortest KV to the longest (geometrically)."""
    recs = []
    for i, kv in enumerate(kvs):
        at = i / (len(kvs) - 1)
        recs += [record(Case("sdpa-flash", shape("none", kv, seq_q=1), "decode", "fwd", "cpu"),
                        1e-4 * dense_growth ** at),
                 record(Case("hf-gdn", shape("gdn:64", kv, seq_q=1), "decode", "fwd", "cpu"),
                        2e-4 * linear_growth ** at)]
    return recs


def test_the_crossover_holds_with_s_star_where_linear_stays_below_dense(tmp_path):
    v = linear_crossover(frame(prefill_world([2.0, 1.2, 0.8, 0.5]), tmp_path))
    assert v.verdict == HOLDS, v.numbers
    assert v.detail[0]["s_star"] == 4096 and v.detail[0]["best_dense"] == "sdpa-flash"
    assert "S*=4096" in v.numbers and "GB200" in v.numbers


def test_the_crossover_does_not_hold_over_enough_lengths_and_is_open_over_too_few(tmp_path):
    assert LINEAR_LOSES > 1 > LINEAR_BEATS and MIN_LINEAR_LENGTHS == 3
    v = linear_crossover(frame(prefill_world([3.0, 2.5, 2.0, 1.5]), tmp_path))
    assert v.verdict == FAILS and v.detail[0]["s_star"] is None, v.numbers
    (tmp_path / "few").mkdir()
    v = linear_crossover(frame(prefill_world([3.0, 2.0], lengths=(1024, 2048)), tmp_path / "few"))
    assert v.verdict == INCONCLUSIVE and "cannot say it never wins" in v.why


def test_the_decode_claim_holds_flat_against_growing_and_fails_otherwise(tmp_path):
    v = linear_decode(frame(decode_world(1.0, 8.0), tmp_path))
    assert v.verdict == HOLDS, v.numbers
    assert v.detail[0]["faster_from"] == 4096  # 2e-4 against 1e-4 x 8^(i/2): faster from the middle KV
    (tmp_path / "grows").mkdir()
    v = linear_decode(frame(decode_world(4.0, 8.0), tmp_path / "grows"))
    assert v.verdict == FAILS and v.detail[0]["flat"] > FLAT_WITHIN, v.numbers
    (tmp_path / "falls").mkdir()  # a step cheaper at the longest KV reads the same state: a first case's warm-up
    v = linear_decode(frame(decode_world(0.5, 8.0), tmp_path / "falls"))  # is named, and does not fail the claim
    assert v.verdict == HOLDS and v.detail[0]["flat_high"] < 1 / FLAT_WITHIN and "warm-up" in v.numbers, v.numbers
    (tmp_path / "flat-dense").mkdir()
    v = linear_decode(frame(decode_world(1.0, 1.1), tmp_path / "flat-dense"))
    assert v.verdict == FAILS and v.detail[0]["dense_growth"] < DENSE_GROWS, v.numbers


def test_a_run_without_linear_cases_measures_neither_claim(tmp_path):
    recs = [record(Case("sdpa-flash", shape("none", 1024), "prefill", "fwd", "cpu"), 1e-3)]
    df = frame(recs, tmp_path)
    assert linear_crossover(df).verdict == NOT_MEASURED and linear_decode(df).verdict == NOT_MEASURED


def test_a_line_at_fixed_tokens_per_batch_is_one_condition(tmp_path):
    recs = []
    for seq, batch, ratio in ((1024, 4, 1.5), (2048, 2, 0.9), (4096, 1, 0.5)):
        t = 1e-3 * (seq / 1024)
        recs += [record(Case("sdpa-flash", shape("none", seq, batch=batch), "prefill", "fwd", "cpu"), t),
                 record(Case("hf-gdn", shape("gdn:64", seq, batch=batch), "prefill", "fwd", "cpu"), ratio * t)]
    v = linear_crossover(frame(recs, tmp_path))
    assert len(v.detail) == 1 and v.detail[0]["lengths"] == [1024, 2048, 4096], v.numbers
    assert v.verdict == HOLDS and v.detail[0]["s_star"] == 2048 and "B 1–4" in v.numbers
    assert v.conditions[0].fields["batch"] == "1–4"


def test_a_decode_line_whose_dense_growth_is_decided_names_its_linear_steps_as_the_pair_to_re_measure(tmp_path):
    from bench.analysis.decided import with_blocks

    v = linear_decode(frame(decode_world(1.0, 8.0), tmp_path))
    [c] = v.conditions
    [(top, bottom)] = c.pairs  # the linear step at the longest KV over the shortest: the condition's ratio
    assert top.startswith("hf-gdn/") and "kv16384" in top and "kv1024-" in bottom
    blocks = [{"ratio": r} for r in (1.5, 1.6, 1.55, 1.45, 1.52, 1.58)]  # interleaved blocks: it grows after all
    assert with_blocks(v, "linear-decode", [{"claim": "linear-decode", "pairs": [[top, bottom]],
                                            "blocks": blocks}]).verdict == FAILS
    (tmp_path / "flat-dense").mkdir()  # dense growth not shown: flatness alone cannot decide it, so no pair
    assert linear_decode(frame(decode_world(1.0, 1.1), tmp_path / "flat-dense")).conditions[0].pairs == ()


def test_a_flat_step_read_at_its_bound_holds_there_and_an_open_one_is_left_to_the_blocks(tmp_path):
    from bench.engine.decide import measurable

    v = linear_decode(frame(decode_world(1.24, 8.0), tmp_path))  # 1.24x against 1.25x, its interval within 5%
    [c] = v.conditions
    assert c.verdict == HOLDS and c.at_bound and c.pairs, v.numbers  # the conditions' common rule, not its own
    (tmp_path / "open").mkdir()
    recs = decode_world(1.35, 8.0)
    for rec in recs:  # the linear steps' own CIs +-8%: the flatness's interval straddles 1.25x, outside the band
        if rec["backend"] == "hf-gdn":
            rec.update(ci_low_s=0.92 * rec["median_s"], ci_high_s=1.08 * rec["median_s"])
    v = linear_decode(frame(recs, tmp_path / "open"))
    [c] = v.conditions
    assert c.verdict == INCONCLUSIVE and c.low < FLAT_WITHIN < c.high and not c.why, v.numbers
    from bench.commands.profile import case_from_id

    assert measurable(c, {cid: case_from_id(cid) for pair in c.pairs for cid in pair})  # the deciding gives it blocks
