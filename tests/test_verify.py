"""Speculative decoding's verification: drafts as values (bench.problem.draft), as a kind (bench.kinds.draft), each
backend against the float64 reference walked from the parent list, the refusals, and the verify claim's N*."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from bench.engine.runner import Runner
from bench.engine.sweeps import Case
from bench.kinds import kind_of
from bench.kinds.base import ReferenceCache
from bench.kinds.draft import tree_keep, walked_visibility
from bench.measure.cold import ColdPlan
from bench.problem.columns import shape_fields, shape_from_fields
from bench.problem.draft import PRESETS, Draft, DraftError, draft_words
from bench.problem.masks import CAUSAL
from bench.problem.shapes import AttentionShape, ShapeError
from bench.reference import compare_to_reference, make_inputs, reference_attention
from bench.results.meta import Calibration


def _case(backend: str, draft: str, seq_kv: int = 96, batch: int = 2) -> Case:
    d = Draft.parse(draft)
    shape = AttentionShape(batch, d.n, seq_kv, 4, 2, 16, mask=CAUSAL, draft=d)
    return Case(backend, shape, "decode", "fwd", "cpu")


@pytest.mark.parametrize(("text", "n", "label"), [
    ("chain:5", 5, "chain:5"),
    ("tree:4,2,2,1", 4 + 8 + 16 + 16, "tree:4,2,2,1"),
    ("parents:r.0.0.1.r", 5, "parents:r.0.0.1.r"),
    ("parents:r.0.1", 3, "chain:3"),  # a parent list that is a chain is recorded as one
    *[(name, sum(PRESETS[name][0]), name) for name in PRESETS],
])
def test_drafts_parse_to_their_size_and_label(text: str, n: int, label: str) -> None:
    draft = Draft.parse(text)
    assert (draft.n, draft.label) == (n, label)
    assert Draft.parse(draft.label) == draft  # the label reads back


def test_a_preset_has_its_tokens_per_depth() -> None:
    for name, (per_depth, _) in PRESETS.items():
        depths = Draft.parse(name).depths
        assert tuple(depths.count(d) for d in range(1, len(per_depth) + 1)) == per_depth, name


def test_a_tree_file_reads_as_json_or_plain_indices(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(json.dumps({"parents": [-1, 0, 0, -1, 3]}))
    (tmp_path / "t.txt").write_text("-1 0 0\n-1, 3\n")
    assert Draft.parse(str(tmp_path / "t.json")) == Draft.parse(str(tmp_path / "t.txt")) \
        == Draft.parse("parents:r.0.0.r.3")


@pytest.mark.parametrize(("parents", "said"), [
    ("r.2.1", "form a cycle"),
    ("r.0.5", "out of range"),
    ("r.1", "its own parent"),
    ("r.r.3.1", "comes after it"),
])
def test_an_impossible_tree_names_its_node(parents: str, said: str) -> None:
    with pytest.raises(DraftError, match=said):
        Draft.parse(f"parents:{parents}")


def test_draft_words_keep_a_tree_s_fan_outs_together() -> None:
    assert draft_words("tree:4,2,2,1,chain:8,medusa") == ("tree:4,2,2,1", "chain:8", "medusa")


def test_a_shape_holds_its_draft_as_a_column() -> None:
    shape = _case("naive", "tree:2,2").shape
    fields = shape_fields(shape)
    assert fields["draft"] == "tree:2,2" and shape_from_fields(fields) == shape
    assert shape_fields(AttentionShape(1, 1, 64, 4, 2, 16, mask=CAUSAL))["draft"] == "none"
    with pytest.raises(ShapeError, match="seq_q must be 6"):
        AttentionShape(1, 4, 64, 4, 2, 16, mask=CAUSAL, draft=Draft.parse("tree:2,2"))
    with pytest.raises(ShapeError, match="seq_kv"):  # no cached key left
        AttentionShape(1, 6, 6, 4, 2, 16, mask=CAUSAL, draft=Draft.parse("tree:2,2"))


@pytest.mark.parametrize("draft", ["tree:3,2", "eagle", "medusa", "parents:r.0.r.2.1.0"])
def test_the_kernels_keep_set_and_the_walked_visibility_agree_and_differ_from_causal(draft: str) -> None:
    case = _case("naive", draft, seq_kv=80)
    keep = tree_keep(case.shape, "cpu")
    walked = walked_visibility(case.shape.draft, case.shape.seq_kv)
    assert torch.equal(keep.tokens[0], walked)  # two constructions: the table down the list, the walk up it
    causal = CAUSAL.visible(case.shape.seq_q, case.shape.seq_kv)
    assert not torch.equal(walked, causal) and bool((walked <= causal).all())  # a tree lies inside the causal mask


@pytest.mark.parametrize("backend", ["naive", "sdpa", "sdpa-math", "sdpa-flash"])
@pytest.mark.parametrize("draft", ["chain:6", "tree:2,2", "sglang"])
def test_every_backend_verifies_a_draft_as_the_float64_reference(backend: str, draft: str) -> None:
    case = _case(backend, draft)
    kind = kind_of(case)
    assert kind.name == "draft"
    kind.setup(case)
    check, _ = kind.check(case, None, ReferenceCache())
    assert check.ok, check.describe()


def test_a_kernel_that_ignores_the_tree_fails_the_check() -> None:
    shape = _case("naive", "tree:2,2").shape
    q, k, v = make_inputs(shape, "cpu", seed=0)
    causal_only = reference_attention(q, k, v, mask=CAUSAL)
    ref = reference_attention(q, k, v, allowed=walked_visibility(shape.draft, shape.seq_kv))
    assert not compare_to_reference(causal_only.to(q.dtype), ref).ok


def test_flex_verifies_a_tree_from_its_block_mask_and_times_the_build_apart() -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    runner = Runner(Calibration(gemm_flops_per_s=1e11, copy_bytes_per_s=1e10), case_budget_s=0.05,
                    cold=ColdPlan(multiple=0.5))
    record = runner.run(_case("flex", "tree:2,2", seq_kv=128)).record
    assert record.status == "ok", record.reason
    assert record.block_mask_build_s > 0 and record.total_s == pytest.approx(record.median_s
                                                                             + record.block_mask_build_s)


def test_a_decode_step_s_record_names_its_draft_and_reads_its_cache_cold() -> None:
    runner = Runner(Calibration(gemm_flops_per_s=1e11, copy_bytes_per_s=1e10), case_budget_s=0.05,
                    cold=ColdPlan(multiple=0.5))
    record = runner.run(_case("sdpa", "medusa", seq_kv=128, batch=1)).record
    assert record.status == "ok", record.reason
    assert record.to_dict()["draft"] == "medusa" and record.shape.seq_q == 63 and record.timing_mode == "cold"
    pairs = Draft.parse("medusa").pairs(128 - 63)
    assert record.flops == 2 * 1 * 4 * (16 + 16) * pairs  # the pairs the tree leaves, not the causal ones


def test_a_backend_that_takes_no_tree_is_unsupported_with_its_reason() -> None:
    from bench.backends.base import Unsupported

    case = _case("flash-attn", "tree:2,2")
    with pytest.raises(Unsupported, match="takes no tree"):
        kind_of(case).setup(case)
    kind_of(_case("flash-attn", "chain:4")).setup(_case("flash-attn", "chain:4"))  # a chain is the causal mask


@pytest.mark.parametrize(("args", "said"), [
    (["--draft", "parents:r.2.1"], "form a cycle"),
    (["--draft", "parents:r.0.9"], "out of range"),
    (["--draft", "chain:64", "--decode-kv", "32"], "does not fit a cache of --decode-kv 32"),
    (["--draft", "tree:2,2", "--backend", "flash-attn"], "no backend asked for takes one"),
    (["--draft", "chain:4", "--phase", "prefill"], "add decode to --phase"),
    (["--draft", "nowhere.json"], "unknown draft"),
])
def test_bad_drafts_are_refused_in_one_line(args: list[str], said: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    base = ["run", "--phase", "decode", "--kv-heads", "2", "--dtype", "fp32", "--backend", "naive"]
    assert main([*base, *args, "--plan", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "Traceback" not in err
    assert not (tmp_path / "r.json").exists()  # nothing run


def _steps(ratios: dict[int, float]) -> pd.DataFrame:
    """A frame of one-query steps and chains of the given sizes at their ratio, with tight CIs."""
    rows = []
    for n, ratio in {1: 1.0, **ratios}.items():
        median = 1e-3 * ratio
        rows.append({"case_id": f"c{n}", "backend": "sdpa", "dtype": "fp32", "batch": 1, "n_heads": 8,
                     "n_kv_heads": 2, "head_dim": 64, "seq_kv": 4096, "seq_q": n, "phase": "decode",
                     "mask": "causal", "score": "none", "scope": "attention", "status": "ok",
                     "draft": "none" if n == 1 else f"chain:{n}", "median_s": median, "ci_low_s": median * 0.99,
                     "ci_high_s": median * 1.01, "noisy": False})
    return pd.DataFrame(rows)


def test_the_claim_s_n_star_is_the_largest_size_every_draft_holds_up_to() -> None:
    from bench.claims.verify import verify_cost

    v = verify_cost(_steps({4: 1.05, 16: 1.15, 64: 1.6, 128: 2.5}))
    assert v.verdict == "depends" and v.detail[0]["n_star"] == 16
    assert "N* 16" in v.numbers and "N 64: 1.60×" in v.numbers
    # the report's answer line (Verdict.answer)
    assert v.answer == ("sdpa · fp32 at KV 4,096: drafts up to N* = 16 verify within 1.25× of one step; "
                        "N 64 costs 1.60×.")
    from bench.analysis.claim_rows import claim_rows

    assert {row["n_star"] for row in claim_rows([v])} == {16}  # claims.csv holds N* beside each ratio
    assert verify_cost(_steps({4: 1.05, 16: 1.1})).detail[0]["n_star"] == 16
    none = verify_cost(_steps({4: 1.6}))
    assert none.verdict == "does not hold"
    assert none.answer.endswith("no draft verifies within 1.25× of one step; the smallest, N 4, costs 1.60×.")
