"""transformers' attention paths as backends (bench.backends.hf): opt-in (never in a profile's default list), each
with the mask transformers builds (a sliding window must reach SDPA as a mask, not as is_causal), refused with the
reason when transformers is missing, and the claim that they cost little over the kernels they call."""

from __future__ import annotations

import json
import sys

import pytest

from bench.analysis.load import read_results
from bench.analysis.verdict import DEPENDS, FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED
from bench.backends import BACKENDS, Unsupported, backends_for
from bench.claims import WRAPPER_WITHIN
from bench.claims.wrapper import wrapper_cost
from bench.engine import sweeps
from bench.problem.columns import shape_from_fields
from bench.problem.masks import CAUSAL
from tests.results_factory import make_record, make_run

HF = ("hf-eager", "hf-sdpa", "hf-flex")


def test_hf_backends_run_only_when_named():
    assert all(BACKENDS[name].opt_in for name in HF)
    assert not set(HF) & set(backends_for("cpu")) and not set(HF) & set(sweeps.Sweep().backends)
    for name in ("quick", "serving"):
        assert not set(HF) & {c.backend for c in sweeps.cases(sweeps.profile(name, "cpu"), "cpu")}, name
    for device in ("cpu", "cuda"):  # the default names transformers' sdpa path for its claim, at a model's shapes
        hf = [c for c in sweeps.cases(sweeps.profile("default", device), device) if c.backend in HF]
        assert hf and {c.backend for c in hf} == {"hf-sdpa"} and all(c.shape.model for c in hf)


def test_the_default_times_transformers_where_it_skips_its_mask_and_where_it_builds_one():
    """A square prefill and a one-query decode alone cannot fail the claim: there transformers makes torch's own
    is_causal call. A chunked prefill (Sq < Skv) is where it hands torch a mask."""
    from bench.backends.hf import BUILDS, SKIPS, mask_kind

    for device in ("cpu", "cuda"):
        hf = [c for c in sweeps.cases(sweeps.profile("default", device), device) if c.backend in HF]
        kinds = {c.id: mask_kind(c.backend, c.shape.seq_q, c.shape.seq_kv, c.shape.mask) for c in hf}
        assert set(kinds.values()) == {SKIPS, BUILDS}, (device, kinds)
        built = [c for c in hf if kinds[c.id] == BUILDS]
        assert all(1 < c.shape.seq_q < c.shape.seq_kv for c in built)


def test_a_sliding_window_reaches_sdpa_as_a_mask(monkeypatch):
    """Without local_size transformers drops a window's mask for is_causal: the window would be lost, silently."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from bench.backends.hf import make
    from bench.backends.naive import naive_attention
    from bench.problem.masks import Mask
    from bench.problem.scores import Score

    q, k, v = (torch.randn(1, h, 37, 16, dtype=torch.float64) for h in (4, 2, 2))
    window = Mask(window=8)
    out = make("hf-sdpa")(q, k, v, mask=window, score=Score())
    assert torch.allclose(out, naive_attention(q, k, v, mask=window, score=Score()), atol=1e-10)


def test_without_transformers_each_call_is_unsupported_naming_the_extra(monkeypatch):
    torch = pytest.importorskip("torch")
    from bench.backends import hf
    from bench.problem.masks import Mask
    from bench.problem.scores import Score

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    monkeypatch.setitem(sys.modules, "transformers.masking_utils", None)
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(Unsupported, match=r"hf-sdpa: transformers is not importable .*attnbench\[hf\]"):
        hf.make("hf-sdpa")(q, q, q, mask=Mask(causal=True), score=Score())


def test_a_flex_kernel_torch_cannot_compile_is_unsupported_naming_torchs_error(monkeypatch):
    """inductor's CPU code generation fails for some shapes on some CPUs (g++: an undeclared kvSplitSize): that is
    torch's bug, reported as unsupported with its error, not as an attnbench error."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from torch._inductor.exc import InductorError

    from bench.backends import hf
    from bench.problem.masks import Mask
    from bench.problem.scores import Score

    def fails(*args, **kwargs):
        raise InductorError(RuntimeError("CppCompileError: 'cur_kvSplitSize2' was not declared"), None)

    monkeypatch.setattr(hf, "_attention_function", lambda name, score: fails)
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(Unsupported) as err:
        hf.make("hf-flex")(q, q, q, mask=Mask(causal=True), score=Score())
    assert str(err.value).startswith(hf.COMPILE_FAILED) and "InductorError" in str(err.value)
    monkeypatch.setattr(hf, "_attention_function", lambda name, score: lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # any other failure stays the error it is
        hf.make("hf-flex")(q, q, q, mask=Mask(causal=True), score=Score())


def frame(records, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(make_run(records)))
    return read_results(path)[0]


def pair(tmp_path, over: float, ci: float = 0.01):
    recs = []
    for seq in (512, 1024):
        for backend, t in (("sdpa", 1e-3), ("sdpa-flash", 0.9e-3), ("hf-sdpa", over * 0.9e-3)):
            recs.append(make_record(backend, n_kv_heads=2, seq=seq, median_s=t, ci_low_s=t * (1 - ci),
                                    ci_high_s=t * (1 + ci)))
    return frame(recs, tmp_path)


def test_the_sdpa_path_is_judged_against_the_fastest_kernel_it_could_have_called(tmp_path):
    holds = wrapper_cost(pair(tmp_path, 1.05))
    assert holds.verdict == HOLDS
    assert "hf-sdpa · where transformers skips the mask 1.05×" in holds.numbers
    assert dict(holds.conditions[0].facts) == {"against": "sdpa-flash", "sizes": "Sq×Skv 512×512, 1,024×1,024"}
    assert "Nothing was timed where transformers builds its mask" in holds.numbers  # half the claim, said so
    fails = wrapper_cost(pair(tmp_path, 2.0))
    assert fails.verdict == FAILS and "takes 2.00× the kernel's time" in fails.why
    straddles = wrapper_cost(pair(tmp_path, WRAPPER_WITHIN, ci=0.05))
    assert straddles.verdict == INCONCLUSIVE and "straddles 1.2×" in straddles.why


def kinds_run(tmp_path, skipped: float, built: float):
    """Llama-3-8B's shapes as the CPU default times them: a square prefill and a one-query decode (transformers'
    sdpa path skips its mask) and a chunked prefill, 256 queries over 1,024 keys (it builds one); hf-sdpa at
    `skipped` / `built` times the fastest kernel."""
    recs = []
    for phase, seq_q, seq_kv in (("prefill", 1024, 1024), ("decode", 1, 4096), ("decode", 256, 1024)):
        over = built if 1 < seq_q < seq_kv else skipped
        for backend, t in (("sdpa", 1e-3), ("sdpa-flash", 1.1e-3), ("hf-sdpa", over * 1e-3)):
            case_id = f"{backend}/gqa/b1-hq32-hkv8-q{seq_q}-kv{seq_kv}-d128/fp32/causal/{phase}/fwd/cpu"
            recs.append(make_record(backend, n_heads=32, n_kv_heads=8, head_dim=128, seq=seq_kv, phase=phase,
                                    seq_q=seq_q, case_id=case_id, median_s=t, ci_low_s=0.99 * t,
                                    ci_high_s=1.01 * t))
    return frame(recs, tmp_path)


def test_the_claim_depends_where_transformers_builds_its_mask_naming_which(tmp_path):
    v = wrapper_cost(kinds_run(tmp_path, skipped=1.02, built=2.4))
    assert v.verdict == DEPENDS, (v.numbers, v.why)
    words = {(c.fields["backend"], c.fields["where"]): c.verdict for c in v.conditions}
    assert words == {("hf-sdpa", "transformers skips the mask"): HOLDS,
                     ("hf-sdpa", "transformers builds the mask"): FAILS}
    built = next(c for c in v.conditions if "builds" in c.name)
    assert built.ratio == pytest.approx(2.4) and "256×1,024" in dict(built.facts)["sizes"]
    assert built.pairs == (("hf-sdpa/gqa/b1-hq32-hkv8-q256-kv1024-d128/fp32/causal/decode/fwd/cpu",
                            "sdpa/gqa/b1-hq32-hkv8-q256-kv1024-d128/fp32/causal/decode/fwd/cpu"),)  # to re-measure
    assert "Holds for hf-sdpa where transformers skips the mask" in v.why
    assert "does not for hf-sdpa where transformers builds the mask" in v.why


def test_a_slow_path_everywhere_does_not_hold_and_a_fast_one_holds(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert wrapper_cost(kinds_run(tmp_path / "a", skipped=2.0, built=2.4)).verdict == FAILS
    holds = wrapper_cost(kinds_run(tmp_path / "b", skipped=1.0, built=1.1))
    assert holds.verdict == HOLDS and len(holds.conditions) == 2


def test_transformers_skips_its_mask_only_for_its_sdpa_path_at_one_query_or_a_square_call():
    from bench.backends.hf import skips_mask
    from bench.problem.masks import Mask

    causal, window = Mask(causal=True), Mask(window=4096)
    assert skips_mask("hf-sdpa", 1024, 1024, causal) and skips_mask("hf-sdpa", 1, 4096, causal)
    assert not skips_mask("hf-sdpa", 256, 1024, causal)  # a chunked prefill: offset queries need a mask
    assert skips_mask("hf-sdpa", 1024, 1024, window)  # the window spans every key
    assert not skips_mask("hf-sdpa", 1, 8192, window) and not skips_mask("hf-sdpa", 4096, 4096, window)
    assert not skips_mask("hf-eager", 1024, 1024, causal) and not skips_mask("hf-flex", 1, 4096, causal)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_each_mask_is_the_one_transformers_builds_for_a_model_with_that_cache(impl):
    """The backend's mask for (Sq, Skv) is what transformers' create_causal_mask (Llama) and
    create_sliding_window_causal_mask (Mistral) return for a forward of Sq tokens over a cache of Skv - Sq: None
    exactly where skips_mask says, else the same tensor (bottom-right causal for a chunked prefill)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers import masking_utils

    from bench.backends import hf
    from bench.problem.masks import Mask

    name = {"sdpa": "hf-sdpa", "eager": "hf-eager"}[impl]
    sizes = {"hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1}
    for window in (None, 8, 16):
        config = (transformers.MistralConfig(sliding_window=window, **sizes) if window
                  else transformers.LlamaConfig(**sizes))
        config._attn_implementation = impl
        build = (masking_utils.create_sliding_window_causal_mask if window else masking_utils.create_causal_mask)
        for seq_q, seq_kv in ((1, 1), (1, 12), (12, 12), (4, 12), (5, 5)):
            cache = transformers.DynamicCache()
            if seq_kv > seq_q:
                past = torch.zeros(1, 1, seq_kv - seq_q, 8)
                cache.update(past, past, layer_idx=0)
            theirs = build(config=config, inputs_embeds=torch.zeros(1, seq_q, 16), attention_mask=None, cache=cache)
            mask = Mask(causal=True, window=window)
            ours = hf._mask_build(name, 1, seq_q, seq_kv, mask, torch.float32, "cpu")()
            where = (window, seq_q, seq_kv)
            assert (theirs is None) == (ours is None) == hf.skips_mask(name, seq_q, seq_kv, mask), where
            assert theirs is None or torch.equal(theirs, ours), where


def test_hf_sdpa_attends_bottom_right_over_a_chunked_prefill():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from bench.backends.hf import make
    from bench.backends.naive import naive_attention
    from bench.problem.masks import Mask
    from bench.problem.scores import Score

    q = torch.randn(1, 4, 5, 16, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 19, 16, dtype=torch.float64) for _ in range(2))
    for mask in (Mask(causal=True), Mask(window=8)):
        out = make("hf-sdpa")(q, k, v, mask=mask, score=Score())
        assert torch.allclose(out, naive_attention(q, k, v, mask=mask, score=Score()), atol=1e-10)


def test_without_a_transformers_path_the_claim_names_the_command(tmp_path):
    v = wrapper_cost(frame([make_record("sdpa", seq=512)], tmp_path))
    assert v.verdict == NOT_MEASURED and "--backend hf-eager,naive,hf-sdpa,sdpa,hf-flex,flex" in v.numbers


def test_sdpa_takes_a_window_over_every_key_as_causal_and_builds_a_window_mask_once_per_shape():
    """As a model does: a mask covering every key is no mask beyond causal, and a real one is built once per
    forward, not in every layer's timed call (transformers' sdpa path does both)."""
    torch = pytest.importorskip("torch")
    from bench.backends.sdpa import _mask_args
    from bench.problem.masks import Mask
    from bench.problem.scores import Score

    q = k = torch.randn(1, 2, 64, 8)
    assert _mask_args(q, k, Mask(window=64), Score()) == {"is_causal": True}
    first, again = (_mask_args(q, k, Mask(window=16), Score())["attn_mask"] for _ in range(2))
    assert first is again and torch.equal(first, Mask(window=16).visible(64, 64))


def time_row(backend, phase, seq, per_layer_s, mask_s=None, layers=32):
    tokens = 1 if phase == "decode" else seq
    return {"backend": backend, "dtype": "fp32", "phase": phase, "batch": 1, "seq_q": tokens, "seq_kv": seq,
            "pass": "fwd", "full_layer_s_per_token": per_layer_s / tokens,
            "all_layers_s_per_token": layers * per_layer_s / tokens, "mask_s_per_forward": mask_s}


def test_each_implementation_costs_its_layers_plus_one_mask_a_forward_and_the_default_loss_is_named():
    from bench.report.hf_choice import advice, implementation_rows

    times = [time_row("hf-sdpa", "prefill", 1024, 2e-3, 1e-4), time_row("hf-eager", "prefill", 1024, 6e-3, 5e-3),
             time_row("sdpa", "prefill", 1024, 1e-3),  # a torch kernel: not an attn_implementation
             time_row("hf-sdpa", "decode", 8192, 2e-4), time_row("hf-flex", "decode", 8192, 1e-4, 1e-3)]
    rows = implementation_rows(times, {"full": 32})
    assert [(r["phase"], r["fastest"]) for r in rows] == [("prefill", "hf-sdpa"), ("decode", "hf-flex")]
    prefill, decode = rows
    assert set(prefill["forward_s"]) == {"hf-sdpa", "hf-eager"}
    assert prefill["forward_s"]["hf-eager"] == pytest.approx(32 * 6e-3 + 5e-3)
    assert prefill["per_layer_s"]["hf-sdpa"] == {"full": pytest.approx(2e-3)}
    assert prefill["default_loss"] == pytest.approx(1.0)
    assert decode["default_loss"] == pytest.approx(32 * 2e-4 / (32 * 1e-4 + 1e-3))  # the mask counted once
    said = advice("m", rows)
    assert "prefill: keep the default 'sdpa' (the fastest at the one length measured)" in said
    assert "decode: 'flex_attention' (fastest at 1 of 1 lengths; the default 'sdpa' loses up to 1.52×, at KV 8,192)" \
        in said


def test_a_default_within_five_percent_is_kept_and_a_model_the_default_cannot_run_is_told_so():
    from bench.report.hf_choice import advice, implementation_rows

    tied = implementation_rows([time_row("hf-sdpa", "prefill", 512, 1.03e-3), time_row("hf-flex", "prefill", 512,
                                                                                       1e-3)], {"full": 32})
    assert "keep the default 'sdpa' (within 5% of the fastest at the one length measured; at worst 1.03× " \
           "'flex_attention')" in advice("m", tied)
    alone = implementation_rows([time_row("hf-eager", "prefill", 512, 1e-3)], {"full": 32})  # softcap: no sdpa
    assert [r["fastest"] for r in alone] == ["hf-eager"] and alone[0]["default_loss"] is None
    assert "prefill: 'eager' (fastest at 1 of 1 lengths; the default 'sdpa' did not run here" in advice("m", alone)


def test_transformers_mask_build_is_timed_apart_from_the_kernel():
    pytest.importorskip("transformers")
    from bench.backends.hf import time_mask_build
    from bench.problem.shapes import AttentionShape

    eager = time_mask_build("hf-eager", AttentionShape(1, 64, 64, 4, 2, 16, "fp32", CAUSAL), "cpu", 0.05)
    assert eager > 0  # an additive float mask, built by transformers' masking_utils


def test_an_hf_case_records_its_mask_build_beside_the_kernel_and_a_torch_case_does_not():
    pytest.importorskip("transformers")
    from bench.engine.runner import Runner
    from bench.engine.sweeps import Case
    from bench.results.meta import Calibration

    runner = Runner(calibration=Calibration(1e11, 1e10), case_budget_s=0.05)
    shape = shape_from_fields(dict(batch=1, seq_q=32, seq_kv=32, n_heads=4, n_kv_heads=2, head_dim=16, dtype="fp32",
                                   mask="window", window=8))
    hf = runner.run(Case("hf-eager", shape, "prefill", "fwd", "cpu")).record
    torch_own = runner.run(Case("naive", shape, "prefill", "fwd", "cpu")).record
    assert hf.status == "ok", hf.reason
    assert hf.mask_build_s > 0 and torch_own.mask_build_s is None


@pytest.mark.slow
def test_hf_flex_caps_logits_as_gemma2_does_and_names_why_sinks_need_cuda():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import bench
    from bench.problem.scores import sink_logits
    from bench.reference import compare_to_reference, reference_attention

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 64, 16, generator=g)
    k, v = (torch.randn(1, 2, 64, 16, generator=g) for _ in range(2))
    try:
        out = bench.attention(q, k, v, backend="hf-flex", causal=True, softcap=1.5)
    except Unsupported as err:
        from bench.backends.hf import COMPILE_FAILED

        assert str(err).startswith(COMPILE_FAILED)  # torch's inductor on this CPU, named as such
    else:
        check = compare_to_reference(out, reference_attention(q, k, v, causal=True, softcap=1.5))
        assert check.ok, check.describe()
    with pytest.raises(Unsupported, match="sinks through flex on CUDA only"):
        bench.attention(q, k, v, backend="hf-flex", causal=True, sinks=sink_logits(4))


def test_the_tied_threshold_is_the_one_in_bench_claims(monkeypatch):
    """TIED lives in bench.claims with the other thresholds: moving it there moves the advice."""
    import importlib

    from bench.report import hf_choice

    rows = [time_row("hf-sdpa", "prefill", 512, 1.03e-3), time_row("hf-flex", "prefill", 512, 1e-3)]
    assert "keep the default" in hf_choice.advice("m", hf_choice.implementation_rows(rows, {"full": 32}))
    monkeypatch.setattr("bench.claims.TIED", 1.01)  # 3% slower is no longer a tie
    try:
        module = importlib.reload(hf_choice)
        assert "keep the default" not in module.advice("m", module.implementation_rows(rows, {"full": 32}))
    finally:
        monkeypatch.undo()
        importlib.reload(hf_choice)
