import pytest

from bench.errors import UsageError
from bench.models.presets import PRESETS, preset
from bench.problem.columns import shape_from_fields
from bench.problem.shapes import ShapeError, head_dim_for, parse_mask


def shape(**kw):
    base = dict(batch=1, seq_q=16, seq_kv=16, n_heads=8, n_kv_heads=8, head_dim=64)
    return shape_from_fields(dict(**base | kw))


@pytest.mark.parametrize("n_kv_heads, variant", [(8, "mha"), (4, "gqa"), (2, "gqa"), (1, "mqa")])
def test_variant_is_derived(n_kv_heads, variant):
    assert shape(n_kv_heads=n_kv_heads).variant == variant


@pytest.mark.parametrize("kw, message", [
    (dict(n_heads=14, n_kv_heads=3), "n_heads=14 is not divisible by n_kv_heads=3"),
    (dict(n_heads=2, n_kv_heads=4), "n_kv_heads=4 exceeds n_heads=2"),
    (dict(batch=0), "batch=0 must be a positive integer"),
    (dict(seq_q=-3), "seq_q=-3 must be a positive integer"),
    (dict(head_dim=64.0), "head_dim=64.0 must be a positive integer"),
    (dict(dtype="fp64"), "dtype='fp64' is unknown"),
    (dict(mask="diagonal"), "unknown mask 'diagonal'"),
    (dict(mask="window"), "mask='window' needs a positive window size"),
    (dict(mask="window", window=0), "window=0 must be a positive integer"),
    (dict(mask="causal", window=4), "window=4 given with mask='causal'; use mask='window:4'"),
    (dict(mask="causal", score="softcap:30+sinks"), "one variant per case"),
    (dict(v_head_dim=32), "v_head_dim describe MLA; set mla_form"),
    (dict(mla_form="absorbed", v_head_dim=32), "an MLA shape needs kv_lora_rank, rope_dim"),
    (dict(lengths="poisson"), "lengths='poisson' is unknown"),
    (dict(sizes=3), "unknown shape field(s) sizes"),
    (dict(mask="causal", seq_q=32, seq_kv=16), "seq_q=32 > seq_kv=16"),
])
def test_impossible_shapes_name_field_and_rule(kw, message):
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        shape(**kw)


def test_unmasked_shape_may_have_more_queries_than_keys():
    assert shape(seq_q=32, seq_kv=16).seq_q == 32


def test_d_model_must_split_over_heads():
    assert head_dim_for(896, 14) == 64
    with pytest.raises(ShapeError, match="d_model=896 is not divisible by n_heads=13"):
        head_dim_for(896, 13)


@pytest.mark.parametrize("text, parsed", [("none", ("none", None)), ("causal", ("causal", None)),
                                          ("window:256", ("window", 256))])
def test_parse_mask(text, parsed):
    assert parse_mask(text) == parsed


@pytest.mark.parametrize("text", ["window", "window:0", "window:x", "causal:3", "sliding"])
def test_parse_mask_rejects(text):
    with pytest.raises(ShapeError):
        parse_mask(text)


def test_presets_match_their_published_configs():
    assert len(PRESETS) == 13
    assert preset("gemma-2-9b").softcap == 50.0 and preset("gemma-2-9b").window == 4096
    ds = preset("deepseek-v3")  # MLA: one latent of 512 + 64 per token, K/V heads of 192 / 128 when decompressed
    assert (ds.variant, ds.n_heads, ds.kv_lora_rank, ds.qk_rope_head_dim, ds.head_dim, ds.v_head_dim) == (
        "mla", 128, 512, 64, 192, 128)
    dsa = preset("deepseek-v3.2")  # V3's MLA, and DSA: a top-2048 indexer of 64 heads x 128 (its config.json)
    assert (dsa.kv_latent_dim, dsa.index_topk, dsa.index_n_heads, dsa.index_head_dim, dsa.sparsity) == (
        576, 2048, 64, 128, "topk:2048:64x128") and ds.sparsity is None
    q = preset("qwen2.5-0.5b")
    assert (q.layers, q.hidden_size, q.n_heads, q.n_kv_heads, q.head_dim, q.variant) == (24, 896, 14, 2, 64, "gqa")
    assert preset("llama-2-70b").variant == "gqa" and preset("gpt-3-175b").variant == "mha"
    nxt = preset("qwen3-next-80b-a3b")  # a hybrid: 12 full-attention layers of 48, the other 36 gated DeltaNet
    assert (nxt.layers, nxt.n_heads, nxt.n_kv_heads, nxt.head_dim) == (48, 16, 2, 256)
    assert preset("mistral-7b-v0.1").window == 4096
    assert preset("bert-base").encoder_only
    assert all(p.source for p in PRESETS.values())
    with pytest.raises(UsageError, match="unknown model preset 'llama-9'; known: transformer-base"):
        preset("llama-9")


# ------------------------------------------------------------------------------------------------------ MLA

def mla(**kw):
    base = dict(batch=1, seq_q=16, seq_kv=16, n_heads=8, n_kv_heads=8, head_dim=96, v_head_dim=64, kv_lora_rank=256,
                rope_dim=32, mla_form="expanded", mask="causal")
    return shape_from_fields(dict(**base | kw))


def test_mla_forms_give_the_call_dims():
    expanded = mla()
    assert (expanded.variant, expanded.qk_dim, expanded.value_dim) == ("mla", 96, 64)
    assert expanded.q_shape == (1, 8, 16, 96) and expanded.kv_shape == (1, 8, 16, 96)
    assert expanded.out_shape == (1, 8, 16, 64)
    absorbed = mla(seq_q=1, seq_kv=100, n_kv_heads=1, mla_form="absorbed")
    assert (absorbed.variant, absorbed.qk_dim, absorbed.value_dim) == ("mla", 256 + 32, 256)
    assert absorbed.kv_shape == (1, 1, 100, 288) and absorbed.out_shape == (1, 8, 1, 256)
    assert shape().out_shape == shape().q_shape  # the other variants: V as wide as K


@pytest.mark.parametrize("kw, message", [
    (dict(mla_form=None), "v_head_dim, kv_lora_rank, rope_dim describe MLA; set mla_form"),
    (dict(mla_form="folded"), "mla_form='folded' is unknown; expected one of expanded, absorbed"),
    (dict(kv_lora_rank=None), "an MLA shape needs kv_lora_rank"),
    (dict(v_head_dim=None, rope_dim=None), "an MLA shape needs v_head_dim, rope_dim"),
    (dict(kv_lora_rank=0), "kv_lora_rank=0 must be a positive integer"),
    (dict(rope_dim=96), "rope_dim=96 must be below head_dim=96"),
    (dict(n_kv_heads=1), "an MLA expanded shape has n_kv_heads=8 (K/V decompressed per query head), not 1"),
    (dict(mla_form="absorbed"), "an MLA absorbed shape has n_kv_heads=1 (one latent shared by all heads), not 8"),
    (dict(score="softcap:30"), "MLA takes no score variant or chunk mask"),
    (dict(mask="chunk", chunk=8), "MLA takes no score variant or chunk mask"),
    (dict(scope="layer"), "MLA shapes time one dense attention call"),
    (dict(lengths="uniform"), "MLA shapes time one dense attention call"),
])
def test_impossible_mla_shapes_name_field_and_rule(kw, message):
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mla(**kw)


def test_v_head_dim_alone_is_refused():
    with pytest.raises(ShapeError, match="v_head_dim describe MLA"):
        shape(v_head_dim=32)


def test_a_shape_takes_values_and_names_the_text_it_was_given():
    from bench.problem.shapes import AttentionShape

    with pytest.raises(ShapeError, match="mask='causal': expected a Mask"):
        AttentionShape(1, 8, 8, 2, 2, 4, "fp32", "causal")
    with pytest.raises(ShapeError, match="serving=.*expected a ServingBatch"):
        AttentionShape(1, 8, 8, 2, 2, 4, serving={"lengths": "zipf"})


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_planned_shape_reads_back_from_its_columns(device):
    from bench.analysis.load import INT_COLUMNS
    from bench.engine.sweeps import cases, profile
    from bench.problem.columns import COLUMNS, shape_fields
    from bench.profiles import PROFILES

    shapes = {c.shape for name in PROFILES[device] for c in cases(profile(name, device), device)}
    kinds = {(s.mla is not None, s.serving is not None, s.sparsity.sparse, s.score.label != "none") for s in shapes}
    assert len(kinds) >= 4  # MLA, serving, sparse and score variants are all among them
    for s in shapes:
        cols = shape_fields(s)
        assert list(cols) == [c.name for c in COLUMNS] + ["variant"]
        assert shape_from_fields(cols) == s
    assert {c.name for c in COLUMNS if c.integer} <= set(INT_COLUMNS)  # the report types every size column
