"""Serving batches (bench.serving): lengths, counts, layouts, the per-sequence check and the runner's records."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from bench.backends import BACKENDS, Backend
from bench.backends.naive import naive_attention
from bench.counts.metrics import attention_flops
from bench.engine import sweeps
from bench.engine.runner import Runner
from bench.engine.sweeps import Case, Sweep
from bench.errors import UsageError
from bench.kinds import EXACT_CHECK_ELEMENTS
from bench.kinds.serving import page_sizes, serving_check_shape
from bench.problem.columns import shape_fields, shape_from_fields
from bench.problem.masks import CAUSAL
from bench.problem.shapes import AttentionShape, ServingBatch, ShapeError
from bench.results.meta import Calibration
from bench.results.record import new_record
from bench.serving import ragged as ragged_module
from bench.serving.batch import check_sequences, make_sequences, references
from bench.serving.paged import PagedCache, block_table, gathered, paged_mask
from bench.serving.ragged import document_mask, padding_mask, query_block, ragged
from bench.serving.workload import (
    draw_lengths,
    padding_waste,
    real_pairs,
    serving_flops,
    serving_kv_bytes,
    workload_of,
)

CALIBRATION = Calibration.from_dict({"gemm_flops_per_s": 1e11, "copy_bytes_per_s": 1e10})
CPU_LAYOUTS = ["naive", "sdpa-math", "sdpa-flash"]


def serving(lengths="zipf", batch=4, seq_q=24, seq_kv=24, mask="causal", window=None, page_size=None, n_heads=4,
            n_kv_heads=2, dtype="fp32") -> AttentionShape:
    return shape_from_fields(dict(batch=batch, seq_q=seq_q, seq_kv=seq_kv, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                  head_dim=16, dtype=dtype, mask=mask, window=window, lengths=lengths,
                                  page_size=page_size))


def run(backend: str, shape: AttentionShape) -> dict:
    phase = "prefill" if shape.seq_q == shape.seq_kv else "decode"
    return Runner(CALIBRATION, case_budget_s=0.02).run(Case(backend, shape, phase, "fwd", "cpu")).record


# --- lengths and counts (no torch work) -------------------------------------------------------------------------


@pytest.mark.parametrize("distribution", ["equal", "uniform", "zipf"])
@pytest.mark.parametrize("count, total, minimum", [(8, 2048, 1), (5, 17, 1), (4, 4000, 3), (16, 16, 1)])
def test_lengths_sum_to_the_total_and_respect_the_minimum(distribution, count, total, minimum):
    lengths = draw_lengths(distribution, count, total, minimum)
    assert len(lengths) == count and sum(lengths) == total and min(lengths) >= minimum
    assert draw_lengths(distribution, count, total, minimum) == lengths  # seeded


def test_distributions_differ_in_spread():
    equal, uniform, zipf = (draw_lengths(d, 8, 8 * 256) for d in ("equal", "uniform", "zipf"))
    assert set(equal) == {256}
    assert len(set(uniform)) > 1
    assert max(zipf) > 2 * 256 and min(zipf) < 256 / 2  # one long sequence and a tail of short ones


def test_workloads_of_each_kind():
    prefill = workload_of(serving("uniform", batch=4, seq_q=32, seq_kv=32))
    assert prefill.q_lens == prefill.kv_lens and sum(prefill.q_lens) == 4 * 32
    decode = workload_of(serving("zipf", batch=4, seq_q=2, seq_kv=100))
    assert decode.q_lens == (2,) * 4 and sum(decode.kv_lens) == 400 and min(decode.kv_lens) >= 2
    mixed = workload_of(serving("mixed", batch=5, seq_q=32, seq_kv=32))
    assert mixed.q_lens == (32, 32, 32, 1, 1) and mixed.kv_lens[:3] == (64,) * 3 and sum(mixed.kv_lens[3:]) == 128


def test_equal_lengths_count_what_the_dense_batch_counts():
    dense = AttentionShape(4, 24, 24, 4, 2, 16, "fp32", CAUSAL)
    equal = dataclasses.replace(dense, serving=ServingBatch("equal"))
    assert serving_flops(equal) == attention_flops(dense)
    for backend in ("naive", "sdpa-math", "flex"):
        assert padding_waste(equal, BACKENDS[backend]) == 1.0


def test_flops_count_real_pairs_only_and_padding_waste_the_rest():
    s = serving("zipf", batch=4, seq_q=24, seq_kv=24, mask="causal")
    w = workload_of(s)
    assert serving_flops(s) == 4 * 4 * 16 * sum(n * (n + 1) // 2 for n in w.q_lens)
    longest = max(w.q_lens)
    waste = {name: padding_waste(s, b) for name, b in BACKENDS.items()}
    assert waste["sdpa-math"] == pytest.approx(4 * longest * (longest + 1) / 2 / real_pairs(w, True, None))
    assert waste["naive"] == waste["flex"] == waste["sdpa"] == waste["flash-attn"] == 1.0


def test_kv_bytes_of_a_ragged_decode_step_sum_the_contexts():
    s = serving("uniform", batch=4, seq_q=1, seq_kv=100, page_size=16)
    assert serving_kv_bytes(s) == 2 * 2 * 16 * 400 * 4


@pytest.mark.parametrize("kw, message", [
    (dict(lengths="gamma"), "lengths='gamma' is unknown"),
    (dict(page_size=16), "page_size=16 pages a decode step"),
    (dict(lengths="uniform", seq_q=1, seq_kv=64, page_size=0), "page_size=0 must be a positive integer"),
    (dict(lengths="mixed", batch=1), "batch >= 2"),
    (dict(lengths="mixed", mask="none"), "needs a causal mask"),
    (dict(seq_q=32, seq_kv=16, mask="none"), "seq_q <= seq_kv"),
])
def test_impossible_serving_shapes_name_the_rule(kw, message):
    with pytest.raises(ShapeError, match=message.replace("(", r"\(")):
        serving(**kw)


def test_serving_layer_scope_is_refused():
    with pytest.raises(ShapeError, match="serving batch of attention calls"):
        shape_from_fields(dict(batch=2, seq_q=8, seq_kv=8, n_heads=2, n_kv_heads=2, head_dim=8, mask="causal",
                               scope="layer", lengths="zipf"))


def test_serving_fields_appear_in_ids_only_when_set():
    dense = shape_from_fields(dict(batch=2, seq_q=8, seq_kv=8, n_heads=2, n_kv_heads=2, head_dim=8, mask="causal"))
    assert "lengths" not in Case("naive", dense, "prefill", "fwd", "cpu").id
    paged = shape_from_fields(dict(batch=2, seq_q=1, seq_kv=64, n_heads=2, n_kv_heads=2, head_dim=8, mask="causal",
                                   lengths="uniform", page_size=16))
    assert Case("naive", paged, "decode", "fwd", "cpu").id == \
        "naive/mha/b2-hq2-hkv2-q1-kv64-d8-lengths=uniform-page_size=16/fp32/causal/decode/fwd/cpu"


# --- the sweep ----------------------------------------------------------------------------------------------------


def test_sweep_expands_lengths_and_page_sizes():
    sweep = Sweep(backends=("naive",), kv_heads=(8,), seqs=(64,), batches=(4,), masks=("none", "causal"),
                  phases=("prefill", "decode"), passes=("fwd", "fwd+bwd"), decode_kv=(256,),
                  lengths=("zipf", "mixed"), page_sizes=(None, 16))
    shapes = [(shape_fields(c.shape)["lengths"], shape_fields(c.shape)["page_size"], c.shape.mask.label, c.phase,
               c.pass_) for c in sweeps.cases(sweep, "cpu")]
    assert ("mixed", None, "none", "prefill", "fwd") not in shapes  # a mixed batch is causal
    assert all(p == "fwd" for *_, p in shapes)  # serving is inference
    decode = {(lengths, page) for lengths, page, _, phase, _ in shapes if phase == "decode"}
    assert decode == {("zipf", None), ("zipf", 16)}  # mixed is a prefill batch


def test_page_size_axis_parses_contiguous_and_paged_decode_defaults_to_uniform_contexts():
    assert page_sizes("contiguous,16,128") == (None, 16, 128)
    with pytest.raises(UsageError):
        page_sizes("16,big")
    sweep = Sweep(backends=("naive",), phases=("decode",), decode_kv=(256,), page_sizes=(None, 32))
    assert {(c.shape.serving.lengths, c.shape.serving.page_size) for c in sweeps.cases(sweep, "cpu")} == {
        ("uniform", None), ("uniform", 32)}


def test_serving_profile_has_both_devices():
    for device in ("cpu", "cuda"):
        cases = sweeps.cases(sweeps.profile("serving", device), device)
        assert {shape_fields(c.shape)["lengths"] for c in cases} == {"equal", "uniform", "zipf", "mixed"}
        assert {shape_fields(c.shape)["page_size"] for c in cases} >= {None, 16, 128}


# --- layouts and the per-sequence check -------------------------------------------------------------------------


def test_padding_mask_keeps_each_sequence_to_itself_and_no_row_empty():
    s = serving("uniform", batch=3, seq_q=8, seq_kv=8, mask="causal")
    w = workload_of(s)
    mask = padding_mask(s, w, torch.device("cpu"))[:, 0]  # (B, longest, longest)
    assert bool(mask.any(-1).all())
    for i, n in enumerate(w.q_lens):
        assert torch.equal(mask[i, :n, :n], torch.ones(n, n, dtype=torch.bool).tril())
        assert not bool(mask[i, :n, n:].any())


def test_paged_cache_is_shuffled_and_gathers_back_every_sequence():
    s = serving("zipf", batch=4, seq_q=1, seq_kv=50, page_size=8)
    w = workload_of(s)
    table = block_table(w)
    used = torch.cat([table[i, :-(-n // 8)] for i, n in enumerate(w.kv_lens)])
    assert sorted(used.tolist()) == list(range(len(used))) and used.tolist() != sorted(used.tolist())
    seqs = make_sequences(s, w, "cpu", seed=0)
    k, v = gathered(*PagedCache(w, seqs).cold)
    assert torch.equal(k, torch.cat([t[0].transpose(0, 1) for t in seqs.k]))
    assert torch.equal(v, torch.cat([t[0].transpose(0, 1) for t in seqs.v]))


def test_check_catches_sequences_swapped():
    s = serving("uniform", batch=3, seq_q=1, seq_kv=40)
    w = workload_of(s)
    seqs = make_sequences(s, w, "cpu", seed=0)
    refs = references(s, seqs)
    call, split = ragged(BACKENDS["naive"], s, w, seqs)
    outs = split(call())
    assert check_sequences(outs, refs).ok
    assert not check_sequences(outs[1:] + outs[:1], refs).ok


@pytest.mark.parametrize("backend", CPU_LAYOUTS)
@pytest.mark.parametrize("shape", [
    serving("zipf"), serving("uniform", mask="none"), serving("zipf", mask="window", window=5),
    serving("uniform", seq_q=1, seq_kv=60), serving("zipf", seq_q=2, seq_kv=60, page_size=8),
    serving("uniform", seq_q=1, seq_kv=60, mask="window", window=9, page_size=16),
], ids=lambda s: f"{s.serving.lengths}-{s.mask.label}-q{s.seq_q}-page{s.serving.page_size}")
def test_every_cpu_layout_matches_float64_per_sequence(backend, shape):
    record = run(backend, shape)
    assert record.status == "ok", record.reason
    assert record.max_abs_err < 1e-5
    assert record.real_tokens == sum(workload_of(shape).q_lens)
    assert record.tokens_per_s == pytest.approx(record.real_tokens / record.median_s)


def test_nested_jagged_sdpa_runs_where_torch_supports_it_and_says_why_not_elsewhere():
    ok = run("sdpa", serving("uniform", mask="none", n_kv_heads=4))
    assert ok.status == "ok" and ok.padding_waste == 1.0
    refused = run("sdpa", serving("zipf", mask="window", window=4))
    assert refused.status == "unsupported" and "nested jagged tensors" in refused.reason


@pytest.mark.parametrize("backend", ["naive", "sdpa-math", "sdpa-flash"])
def test_mixed_batches_run_in_every_layout_with_per_sequence_lengths(backend):
    record = run(backend, serving("mixed"))
    assert record.status == "ok", record.reason
    assert record.max_abs_err < 1e-5


def test_mixed_batches_are_unsupported_in_nested_tensors_and_the_reason_names_who_takes_them():
    record = run("sdpa", serving("mixed"))
    assert record.status == "unsupported"
    assert all(name in record.reason for name in ("naive", "sdpa-math", "flex", "flash-attn"))


def test_flash_attn_on_cpu_is_unsupported_naming_cuda():
    record = run("flash-attn", serving("zipf", dtype="bf16"))
    assert record.status == "unsupported" and "CUDA" in record.reason


def test_a_backend_that_drops_the_padding_mask_is_incorrect(monkeypatch):
    monkeypatch.setattr("bench.serving.ragged.padding_mask", lambda shape, w, device, kv_width=None: None)
    record = run("sdpa-math", serving("zipf", mask="none"))
    assert record.status == "incorrect" and record.median_s is None


def test_records_of_serving_cases_carry_their_fields():
    s = serving("zipf", seq_q=1, seq_kv=60, page_size=8)
    record = new_record(Case("sdpa-math", s, "decode", "fwd", "cpu"), BACKENDS["sdpa-math"].memory)
    assert (record.shape.serving.lengths, record.shape.serving.page_size) == ("zipf", 8)
    assert record.flops == serving_flops(s) and record.padding_waste > 1.0
    assert record.kv_cache_bytes == serving_kv_bytes(s) and record.model_mem_bytes is None


def test_large_batches_are_checked_on_shorter_ones_of_the_same_kind():
    big = serving("zipf", batch=8, seq_q=4096, seq_kv=4096, n_heads=32, n_kv_heads=8)
    small = serving_check_shape(big)
    assert (small.batch, small.serving.lengths, small.n_heads) == (8, "zipf", 32) and small.seq_q == small.seq_kv < 4096
    w = workload_of(small)
    assert small.n_heads * max(q * k for q, k in zip(w.q_lens, w.kv_lens, strict=True)) * 8 <= EXACT_CHECK_ELEMENTS
    paged = serving("uniform", batch=64, seq_q=1, seq_kv=131072, n_heads=32, page_size=16)
    assert serving_check_shape(paged).serving.page_size == 16


@pytest.mark.slow
@pytest.mark.parametrize("shape", [serving("zipf", mask="window", window=6), serving("mixed"),
                                   serving("uniform", seq_q=1, seq_kv=60, page_size=16)],
                         ids=["ragged", "mixed", "paged"])
def test_flex_document_and_paged_masks_match_float64(shape):
    record = run("flex", shape)
    assert record.status == "ok", record.reason


@pytest.mark.slow
@pytest.mark.parametrize("seq_q", [1, 4], ids=["decode", "speculative"])
def test_flex_packed_decode_steps_match_float64(seq_q):
    record = run("flex", serving("uniform", seq_q=seq_q, seq_kv=300))
    assert record.status == "ok", record.reason


@pytest.mark.parametrize("page_size", [None, 16], ids=["packed", "paged"])
@pytest.mark.parametrize("seq_q", [1, 4], ids=["decode", "speculative"])
def test_a_decode_steps_flex_mask_visits_only_each_sequences_own_key_blocks(seq_q, page_size):
    shape = serving("uniform", batch=4, seq_q=seq_q, seq_kv=1000, page_size=page_size)
    w = workload_of(shape)
    if page_size is None:
        block_mask, kv_block = document_mask(w, shape.mask, "cpu"), 128
        ends = [sum(w.kv_lens[:i + 1]) for i in range(w.batch)]
        own = [(end - 1) // kv_block - (end - n) // kv_block + 1 for end, n in zip(ends, w.kv_lens, strict=True)]
    else:
        block_mask = paged_mask(w, shape.mask, "cpu")
        own = [math.ceil(n / page_size) for n in w.kv_lens]
    assert block_mask.BLOCK_SIZE[0] == seq_q  # one sequence's queries per query block
    visited = block_mask.kv_num_blocks.flatten() + block_mask.full_kv_num_blocks.flatten()
    assert visited.tolist() == own


def test_prefill_and_mixed_batches_keep_flexs_query_blocks():
    assert query_block(workload_of(serving("zipf", seq_q=300, seq_kv=300))) == 128
    assert query_block(workload_of(serving("mixed"))) == 128


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash-attn's varlen and paged kernels need CUDA")
@pytest.mark.parametrize("shape", [serving("zipf", dtype="bf16"), serving("mixed", dtype="bf16"),
                                   serving("uniform", seq_q=1, seq_kv=600, page_size=256, dtype="bf16")])
def test_flash_attn_varlen_and_paged_on_cuda(shape):
    phase = "prefill" if shape.seq_q == shape.seq_kv else "decode"
    record = Runner(CALIBRATION, case_budget_s=0.02).run(Case("flash-attn", shape, phase, "fwd", "cuda")).record
    assert record.status in ("ok", "unsupported"), record.reason
    if record.status == "unsupported":
        assert "not importable" in record.reason


# --- report ---------------------------------------------------------------------------------------------------


def _serving_frame(tmp_path, decode_times: dict[tuple[str, int | None], float]):
    import json

    from bench.analysis.load import read_results
    from tests.results_factory import make_record, make_run

    recs = []
    for (backend, page), t in decode_times.items():
        rec = make_record(backend, 8, 2, 4096, phase="decode", median_s=t, batch=4, lengths="uniform",
                          page_size=page, real_tokens=4)
        rec["case_id"] += f"-page{page}"
        recs.append(rec)
    for backend, lengths, t, waste in [("naive", "equal", 1e-3, 1.0), ("naive", "zipf", 2e-3, 1.0),
                                       ("sdpa-math", "equal", 1e-3, 1.0), ("sdpa-math", "zipf", 5e-3, 5.2)]:
        rec = make_record(backend, 8, 8, 128, median_s=t, batch=8, lengths=lengths, real_tokens=1024,
                          padding_waste=waste)
        rec["case_id"] += f"-{lengths}"
        recs.append(rec)
    (tmp_path / "s.json").write_text(json.dumps(make_run(recs)))
    return read_results(tmp_path / "s.json")[0]


def test_paging_claim_compares_each_paged_step_with_its_contiguous_twin(tmp_path):
    from bench.analysis.verdict import FAILS, HOLDS, NOT_MEASURED
    from bench.claims.paging import paging_cost

    cheap = _serving_frame(tmp_path, {("flex", None): 1e-3, ("flex", 16): 1.2e-3, ("naive", None): 1e-3,
                                      ("naive", 16): 3e-3})
    claim = paging_cost(cheap)
    assert claim.verdict == HOLDS
    assert {(d["backend"], d["page_size"]): d["ratio"] for d in claim.detail} == \
        {("flex", 16): pytest.approx(1.2), ("naive", 16): pytest.approx(3.0)}
    assert paging_cost(_serving_frame(tmp_path, {("flex", None): 1e-3, ("flex", 16): 2e-3})).verdict == FAILS
    gather_only = paging_cost(_serving_frame(tmp_path, {("naive", None): 1e-3, ("naive", 16): 2e-3}))
    assert gather_only.verdict == NOT_MEASURED and "gathering" in gather_only.numbers


def test_small_pages_that_fail_where_larger_ones_hold_are_blamed_on_their_many_blocks(tmp_path):
    from bench.analysis.verdict import DEPENDS, FAILS
    from bench.claims.paging import paging_cost

    both = paging_cost(_serving_frame(tmp_path, {("flex", None): 1e-3, ("flex", 16): 2e-3, ("flex", 128): 1.05e-3}))
    assert both.verdict == DEPENDS
    assert "flex with pages of 128 is within it (1.05×)" in both.why and "8× as many key blocks" in both.why
    alone = paging_cost(_serving_frame(tmp_path, {("flex", None): 1e-3, ("flex", 16): 2e-3}))
    assert alone.verdict == FAILS and "scattered reads" in alone.why  # nothing to set it against


def test_pair_keys_hold_every_shape_field_but_the_page_size(tmp_path):
    """Paged and contiguous steps pair on every shape field but the page size: two models never mix."""
    import json

    from bench.analysis.load import read_results
    from bench.analysis.serving import PAIR_KEYS, VARIED, paged_vs_contiguous
    from bench.results.record import SHAPE_KEYS
    from tests.results_factory import make_record, make_run

    assert set(PAIR_KEYS) | set(VARIED) == {"backend", *SHAPE_KEYS} and not set(PAIR_KEYS) & set(VARIED)
    recs = []
    for model, (contiguous, paged) in (("llama-3-8b", (1e-3, 1.2e-3)), ("qwen2.5-0.5b", (2e-3, 5e-3))):
        for page, t in ((None, contiguous), (16, paged)):
            rec = make_record("flex", 8, 2, 4096, phase="decode", median_s=t, batch=4, lengths="uniform",
                              page_size=page, real_tokens=4, model=model)
            rec["case_id"] += f"-{model}-page{page}"
            recs.append(rec)
    (tmp_path / "m.json").write_text(json.dumps(make_run(recs)))
    pairs = paged_vs_contiguous(read_results(tmp_path / "m.json")[0])
    assert sorted(zip(pairs["model"], pairs["ratio"], strict=True)) == [("llama-3-8b", pytest.approx(1.2)),
                                                                         ("qwen2.5-0.5b", pytest.approx(2.5))]


def test_serving_figures_draw_and_dense_figures_leave_serving_rows_out(tmp_path):
    from bench.analysis.serving import per_token
    from bench.report.figures import make_figures

    df = _serving_frame(tmp_path, {("flex", None): 1e-3, ("flex", 128): 0.9e-3})
    rows = per_token(df).set_index(["backend", "lengths"])["s_per_token"]
    assert rows[("sdpa-math", "zipf")] == pytest.approx(5e-3 / 1024)
    figures = make_figures(df)
    assert {"serving_lengths", "serving_paged"} <= set(figures)
    assert "decode" not in figures  # every decode row here is a serving batch


def test_dense_analyses_leave_serving_rows_out(tmp_path):
    """A ragged or paged batch is not a shape of a dense family: the best-backend table, the headline speedups
    and the tutorials' claims see only dense rows, so a serving-only run has no dense family at all."""
    from bench.analysis.frames import dense_rows
    from bench.claims import evaluate_claims
    from bench.report.tables import best_backends, headline_speedups

    df = _serving_frame(tmp_path, {("flex", None): 1e-3, ("naive", None): 2e-3})
    assert len(df) == 6 and dense_rows(df).empty
    assert best_backends(df) == [] and headline_speedups(df) == []
    verdicts = {c["claim"]: c["verdict"] for c in evaluate_claims(df)}
    assert len(verdicts) >= 5 and sum("paging" in claim.lower() for claim in verdicts) == 1


# --- layouts are traits of a backend's registry line ------------------------------------------------------------


def fake_backend(monkeypatch, name: str, layouts: tuple) -> list[tuple]:
    """A backend from outside the registry's own modules: naive's function under another name, with `layouts`."""
    calls = []

    def fn(q, k, v, *, mask, score):
        calls.append(tuple(q.shape))
        return naive_attention(q, k, v, mask=mask, score=score)

    monkeypatch.setitem(BACKENDS, name, Backend(name, fn, "test backend", "tiled", "#000000", "o", layouts=layouts))
    return calls


def test_a_backend_declaring_the_padded_layout_gets_the_padded_batch(monkeypatch):
    fake_backend(monkeypatch, "outside-padded", ("padded", "paged-gather"))
    masks = []
    real_mask = ragged_module.padding_mask
    monkeypatch.setattr(ragged_module, "padding_mask", lambda *a, **kw: masks.append(1) or real_mask(*a, **kw))
    shape = serving("zipf", mask="causal")
    record = run("outside-padded", shape)
    assert record.status == "ok", record.reason
    assert masks  # the padded builder ran: a padding mask was built
    assert record.padding_waste == padding_waste(shape, BACKENDS["sdpa-math"]) > 1.0  # counted from the trait
    paged = run("outside-padded", serving("zipf", seq_q=1, seq_kv=60, page_size=8))
    assert paged.status == "ok" and paged.padding_waste > 1.0  # gathered into its padded layout


def test_a_backend_declaring_per_sequence_runs_its_own_function_once_per_sequence(monkeypatch):
    calls = fake_backend(monkeypatch, "outside-each", ("per-sequence",))
    shape = serving("uniform", batch=3)
    record = run("outside-each", shape)
    assert record.status == "ok" and record.padding_waste == 1.0
    assert calls[:3] == [(1, 4, n, 16) for n in workload_of(shape).q_lens]  # the check's calls, one per sequence
    paged = run("outside-each", serving("uniform", seq_q=1, seq_kv=60, page_size=16))
    assert paged.status == "unsupported" and "no paged-cache layout" in paged.reason


def test_a_backend_with_no_serving_layout_is_unsupported_saying_so(monkeypatch):
    calls = fake_backend(monkeypatch, "outside-dense", ())
    record = run("outside-dense", serving("zipf"))
    assert record.status == "unsupported" and "no serving layout" in record.reason and not calls
    assert record.padding_waste == 1.0


def test_a_paged_trace_step_is_checked_on_rows_that_stay_paged():
    """A replayed decode step with a 2-key row beside a long one halves its keys for the float64 check; the short
    row keeps two keys (one query over one key would be no paged decode row) and the check shape is still valid."""
    groups = ((8, 1, 2), (1, 1, 524288))
    big = AttentionShape(batch=9, n_heads=32, n_kv_heads=8, seq_q=1, seq_kv=524288, head_dim=64, mask=CAUSAL,
                         serving=ServingBatch(lengths="rows:8x1:2+1x1:524288", page_size=16))
    assert big.serving.rows == groups
    small = serving_check_shape(big)
    assert small.seq_kv < big.seq_kv and all(q < k for _, q, k in small.serving.rows)
