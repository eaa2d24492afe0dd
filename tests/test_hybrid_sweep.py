"""A hybrid's linear layers swept as linear cases beside its attention layers (bench.kinds.model), and the report's
per-token decode cost of the whole stack by layer kind (bench.report.sections.models.stack_rows)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.engine import sweeps
from bench.kinds.linear import ModelLinearGeometry
from bench.kinds.model import ModelKind, linear_sweep, model_geometries
from bench.models.config import model_facts
from bench.models.config_json import load_config
from bench.report.sections.models import stack_blocks, stack_rows

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "configs"
QWEN = "qwen3-next-80b-a3b"


def test_qwen3_next_sweeps_its_deltanet_layers_as_gdn_at_its_own_heads():
    (attention, linear) = model_geometries((QWEN,))
    assert (attention.n_heads, attention.n_kv_heads, attention.head_dim, attention.masks) == (16, 2, 256, ("causal",))
    # 32 value heads over 16 key heads, d_k = d_v = 128 (the linear kind's mapping: value heads = n_heads)
    assert isinstance(linear, ModelLinearGeometry)
    assert (linear.n_heads, linear.n_kv_heads, linear.head_dim, linear.linear, linear.model) == \
        (32, 16, 128, "gdn:64", QWEN)


def test_the_linear_cases_come_in_each_phase_at_lengths_the_chunk_divides():
    sweep = sweeps.Sweep(backends=("sdpa", "hf-gdn"), models=(QWEN,), seqs=(96, 128), phases=("prefill", "decode"),
                         decode_kv=(256,), dtypes=("fp32",))
    ids = [c.id for c in sweeps.cases(sweep, "cpu")]
    linear = [i for i in ids if "linear=" in i]
    # 96 is no multiple of the chunk 64: the attention layers run it, the linear layers do not
    assert linear == ["hf-gdn/gqa/b1-hq32-hkv16-q128-kv128-d128-model=qwen3-next-80b-a3b-linear=gdn:64/fp32/causal/"
                      "prefill/fwd/cpu",
                      "hf-gdn/gqa/b1-hq32-hkv16-q1-kv256-d128-model=qwen3-next-80b-a3b-linear=gdn:64/fp32/causal/"
                      "decode/fwd/cpu"]
    assert sum("sdpa/" in i for i in ids) == 3 and all(i.startswith("hf-gdn") for i in linear)


def test_a_models_attention_geometry_takes_no_linear_value_and_a_dense_model_gains_no_case():
    sweep = sweeps.Sweep(backends=("sdpa", "hf-gdn"), models=("llama-3-8b",), seqs=(128,), linears=("none", "gdn:64"))
    ids = [c.id for c in sweeps.cases(sweep, "cpu")]
    assert ids == ["sdpa/gqa/b1-hq32-hkv8-q128-kv128-d128-model=llama-3-8b/fp32/causal/prefill/fwd/cpu"]


def test_the_run_records_and_the_plan_says_how_the_linear_layers_are_swept():
    facts = ModelKind().facts([sweeps.Sweep(models=(QWEN, "llama-3-8b"))])["models"]
    assert facts[QWEN]["layers"] == {"full": 12, "sliding": 0, "deltanet": 36}
    assert facts[QWEN]["linear_sweep"] == {"kind": "deltanet", "layers": 36, "method": "gdn:64", "n_heads": 32,
                                           "n_kv_heads": 16, "head_dim": 128, "note": ""}
    assert "linear_sweep" not in facts["llama-3-8b"]
    (line,) = ModelKind().plan_lines([sweeps.Sweep(models=(QWEN,))])
    assert "36 deltanet layers swept as gdn:64 at 32 value heads over 16 key heads, head dim 128" in line


@pytest.mark.parametrize(("config", "expected"), [
    ("jamba.json", {"kind": "mamba", "method": None}),
    ("bamba.json", {"kind": "mamba2"}),
    ("kimi-linear.json", {"kind": "kda"}),
])
def test_other_hybrids_are_swept_by_their_method_or_say_why_not(config, expected):
    sweep = linear_sweep(load_config(FIXTURES / config))
    assert sweep is not None and sweep["kind"] == expected["kind"]
    if "method" in sweep:
        assert sweep["method"].split(":")[0] == {"kda": "kda", "mamba2": "mamba2"}[sweep["kind"]]
        if sweep["kind"] == "mamba2":  # d_k = d_state, d_v = d_head: one line says which is swept
            assert sweep["note"] == "" or "swept at head_dim = d_k" in sweep["note"]
    else:
        assert "not swept" in sweep["note"]


def _frame(rows: list[dict]) -> pd.DataFrame:
    base = {"status": "ok", "scope": "attention", "dtype": "bf16", "phase": "decode", "batch": 2, "seq_q": 1,
            "seq_kv": 4096, "model": QWEN, "linear": "none", "mask": "causal"}
    return pd.DataFrame([base | r for r in rows])


def test_the_stack_cost_is_each_kinds_layers_times_its_best_step():
    facts = model_facts(load_config(QWEN), ("bf16",)) | ModelKind().facts([sweeps.Sweep(models=(QWEN,))])[
        "models"][QWEN]
    df = _frame([{"backend": "sdpa", "median_s": 4e-4}, {"backend": "naive", "median_s": 8e-4},
                 {"backend": "hf-gdn", "linear": "gdn:64", "median_s": 2e-4},
                 {"backend": "hf-gdn", "linear": "gdn:64", "median_s": 1e-4, "status": "error"}])
    (row,) = stack_rows(facts, df)
    full, delta = row["kinds"]["full"], row["kinds"]["deltanet"]
    # per token: the step over B = 2 sequences; the best backend per kind, an errored case never counted
    assert (full["backend"], full["step_s"], full["cost_s"]) == ("sdpa", 2e-4, 12 * 2e-4)
    assert (delta["backend"], delta["step_s"], delta["cost_s"]) == ("hf-gdn", 1e-4, pytest.approx(36 * 1e-4))
    assert row["total_s"] == pytest.approx(60e-4)
    assert full["share"] == pytest.approx(0.4) and delta["share"] == pytest.approx(0.6)
    # without a linear case the total is left out rather than understated
    (partial,) = stack_rows(facts, df[df["linear"] == "none"])
    assert partial["total_s"] is None and "deltanet" not in partial["kinds"]


def test_the_stack_table_renders_one_row_per_decode_point_with_each_kinds_share():
    facts = ModelKind().facts([sweeps.Sweep(models=(QWEN,))])["models"][QWEN]
    df = _frame([{"backend": "sdpa", "median_s": 4e-4}, {"backend": "hf-gdn", "linear": "gdn:64", "median_s": 2e-4}])
    para, table = stack_blocks(facts, df)
    assert "gdn:64 at 32 value heads over 16 key heads, head dim 128" in para.text
    assert table.headers == ["dtype", "shape", "full layers", "deltanet layers", "stack, per token"]
    (row,) = table.rows
    assert row[2] == "12 × 200 µs (sdpa) = 2.4 ms, 40%" and row[3] == "36 × 100 µs (hf-gdn) = 3.6 ms, 60%"
    assert stack_blocks(model_facts(load_config("llama-3-8b"), ("bf16",)), df) == []  # no hybrid, no table
