"""`bench run --model-config`: a model's attention shapes as cases, its facts in the run, its report section."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.engine import sweeps
from bench.models.config import model_facts
from bench.models.config_json import load_config
from bench.report.model_section import fit_rows, kv_bytes, time_rows

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "configs"


def test_a_hybrid_model_sweeps_one_shape_per_attention_kind():
    sweep = sweeps.Sweep(backends=("naive",), models=(str(FIXTURES / "gemma-2-9b.json"),), seqs=(512,),
                       phases=("prefill", "decode"), decode_kv=(8192,), dtypes=("bf16",))
    cases = sweeps.cases(sweep, "cpu")
    ids = [c.id for c in cases]
    # full layers: causal; sliding layers: the 4096 window; Hq 16, Hkv 8, D 256 from the config, not --heads; and
    # Gemma-2's attn_logit_softcapping 50 on every layer (the attention the model runs)
    assert ids == ["naive/gqa/b1-hq16-hkv8-q512-kv512-d256-model=gemma-2-9b-score=softcap:50/bf16/causal/prefill/"
                   "fwd/cpu",
                   "naive/gqa/b1-hq16-hkv8-q1-kv8192-d256-model=gemma-2-9b-score=softcap:50/bf16/causal/decode/fwd/cpu",
                   "naive/gqa/b1-hq16-hkv8-q512-kv512-d256-model=gemma-2-9b-score=softcap:50/bf16/window:4096/prefill/"
                   "fwd/cpu",
                   "naive/gqa/b1-hq16-hkv8-q1-kv8192-d256-model=gemma-2-9b-score=softcap:50/bf16/window:4096/decode/"
                   "fwd/cpu"]


def test_presets_and_head_dim_from_the_config():
    cases = sweeps.cases(sweeps.Sweep(backends=("sdpa",), models=("llama-3-8b", str(FIXTURES / "qwen3-4b.json")),
                                  seqs=(256,)), "cpu")
    shapes = {(c.shape.model, c.shape.n_heads, c.shape.n_kv_heads, c.shape.head_dim) for c in cases}
    assert shapes == {("llama-3-8b", 32, 8, 128), ("qwen3-4b", 32, 8, 128)}  # Qwen3: head_dim 128, not 2560/32


def test_an_unreadable_config_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"num_attention_heads": 8, "hidden_size": 512}')
    assert main(["run", "--model-config", str(bad), "--list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num_hidden_layers" in err


def _frame(rows: list[dict]) -> pd.DataFrame:
    base = {"status": "ok", "scope": "attention", "dtype": "bf16", "phase": "prefill", "batch": 1, "pass": "fwd",
            "n_heads": 16, "n_kv_heads": 8, "head_dim": 256, "model": "gemma-2-9b"}
    return pd.DataFrame([base | r for r in rows])


def test_time_per_token_of_all_layers_adds_each_kind_times_its_layers():
    facts = model_facts(load_config(FIXTURES / "gemma-2-9b.json"), ("bf16",))
    df = _frame([{"backend": "sdpa", "mask": "causal", "seq_q": 1024, "seq_kv": 1024, "median_s": 2e-3},
                 {"backend": "sdpa", "mask": "window:4096", "seq_q": 1024, "seq_kv": 1024, "median_s": 1e-3}])
    (row,) = time_rows("gemma-2-9b", facts, df)
    assert row["full_layer_s_per_token"] == pytest.approx(2e-3 / 1024)
    assert row["all_layers_s_per_token"] == pytest.approx(21 * 2e-3 / 1024 + 21 * 1e-3 / 1024)


def test_fits_count_the_kv_cache_and_the_backends_attention_peak():
    facts = model_facts(load_config(FIXTURES / "gemma-2-9b.json"), ("bf16",))
    # 21 full layers x 8192 B/token grow with the context; 21 sliding ones stop at the 4096 window
    assert kv_bytes(facts, "bf16", 32768, 1) == 21 * 8192 * 32768 + 21 * 8192 * 4096
    df = _frame([{"backend": b, "mask": "causal", "seq_q": 1024, "seq_kv": 1024, "median_s": 1e-3}
                 for b in ("naive", "sdpa-flash")])
    fits = {f["backend"]: f for f in fit_rows("gemma-2-9b", facts, df, 24 * 2**30)}
    # the score matrix (16 heads x S x S, twice) limits naive far below a tiled kernel
    assert fits["naive"]["max_context"] < fits["sdpa-flash"]["max_context"]
    assert fits["sdpa-flash"]["max_context"] < 24 * 2**30 // (21 * 8192)  # the KV cache alone bounds it
    assert fits["naive"]["max_batch"] >= 1


def test_a_sliding_window_models_fit_counts_its_window_mask():
    # Mistral slides on every layer; sdpa builds an explicit S x S mask for a window, which the memory model
    # counts: the longest context that fits is bounded by it, not by the (window-capped) KV cache alone.
    from bench.models.presets import preset

    facts = model_facts(preset("mistral-7b-v0.1"), ("bf16",))
    df = _frame([{"backend": "sdpa-flash", "mask": "window:4096", "seq_q": 1024, "seq_kv": 1024, "median_s": 1e-3,
                  "n_heads": 32, "n_kv_heads": 8, "head_dim": 128, "model": "mistral-7b-v0.1"}])
    (fit,) = fit_rows("mistral-7b-v0.1", facts, df, 80 * 2**30)
    assert 100_000 < fit["max_context"] < 400_000  # ~sqrt(80 GiB): the S x S bool mask, not 10M tokens


def test_config_files_that_are_not_text_or_name_oddly_are_handled(tmp_path, capsys):
    binary = tmp_path / "bin.json"
    binary.write_bytes(bytes(range(256)))
    assert main(["kv", "--config", str(binary)]) == 2
    assert "not a UTF-8 text file" in capsys.readouterr().err
    folder = tmp_path / "my model"
    folder.mkdir()
    (folder / "config.json").write_text((FIXTURES / "llama-3-8b.json").read_text().replace('"_name_or_path"', '"_x"'))
    assert load_config(folder).name in ("my-model", "llama-3-8b")  # a case-id-safe name either way


def test_use_sliding_window_false_means_no_sliding_layer_in_any_family():
    from bench.models.config_json import parse_config

    cfg = parse_config({"model_type": "qwen2_5_vl", "num_hidden_layers": 4, "hidden_size": 512,
                        "num_attention_heads": 8, "num_key_value_heads": 2, "sliding_window": 32768,
                        "use_sliding_window": False})
    assert cfg.layer_kinds == ("full",) * 4


def test_list_ignores_the_results_file(tmp_path, capsys):
    existing = tmp_path / "r.json"
    existing.write_text("{}")
    assert main(["run", "--profile", "quick", "--backend", "naive", "--list", "--out", str(existing)]) == 0
    assert capsys.readouterr().out.split()[0].startswith("naive/")
