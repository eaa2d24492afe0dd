"""Every backend against the float64 reference, over variants x masks x lengths x head dims x dtypes."""

import itertools

import pytest
import torch

from bench import BACKENDS, Unsupported, attention
from bench.backends.hf import COMPILE_FAILED
from bench.problem.columns import shape_from_fields
from bench.problem.masks import CAUSAL
from bench.problem.shapes import AttentionShape
from bench.reference import check_backend, check_gradients, compare_to_reference, make_inputs, reference_attention

# Backends that must run on any CPU torch build: an Unsupported from them is a failure, not a skip.
CPU_BACKENDS = {"naive", "sdpa", "sdpa-math", "sdpa-flash", "flex", "hf-eager", "hf-sdpa", "hf-flex"}
HEADS = [(8, 8), (8, 2), (8, 1)]  # MHA, GQA, MQA
MASKS = [("none", None), ("causal", None), ("window", 5)]
SEQS = [(7, 7), (129, 129), (7, 129), (1, 129)]  # square, Sq < Skv, decode; odd lengths 1, 7, 129


def cases(head_dims, dtypes, seqs=SEQS):
    for (hq, hkv), (mask, w), (sq, skv), d, dt in itertools.product(HEADS, MASKS, seqs, head_dims, dtypes):
        yield shape_from_fields(dict(batch=2, seq_q=sq, seq_kv=skv, n_heads=hq, n_kv_heads=hkv, head_dim=d, dtype=dt,
                                     mask=mask, window=w))


def label(s: AttentionShape) -> str:
    return f"{s.variant}-{s.mask.label}-q{s.seq_q}kv{s.seq_kv}-d{s.head_dim}-{s.dtype}"


def run_check(backend, shape, device):
    try:
        check = check_backend(backend, shape, device)
    except Unsupported as err:
        if str(err).startswith(COMPILE_FAILED):  # torch's inductor bug on this CPU, named in the results the same way
            pytest.skip(str(err))
        if device == "cpu" and backend in CPU_BACKENDS:
            pytest.fail(f"{backend} must run on CPU: {err}")
        pytest.skip(str(err))
    assert check.ok, f"{backend} {label(shape)}: {check.describe()}"


DENSE = [name for name, b in BACKENDS.items() if b.dense]  # topk-gather runs sparse cases only (test_sparse.py)
FAST = [b for b in DENSE if not BACKENDS[b].compiles]  # flex and hf-flex compile a kernel per shape: below
ALL_CASES = list(cases([32, 64], ["fp32", "bf16"]))


@pytest.mark.skip_off_device  # sdpa-efficient on the CPU: one skip (tests/conftest.py), not one per shape
@pytest.mark.parametrize("shape", ALL_CASES, ids=label)
@pytest.mark.parametrize("backend", FAST)
def test_backend_matches_reference(backend, shape, device):
    run_check(backend, shape, device)


# Flex compiles one kernel per shape (seconds each on CPU): the full mask x variant x length grid in
# fp32 at one head dim, and the other head dim in bf16 on the square and decode lengths.
FLEX_CASES = list(cases([64], ["fp32"])) + list(cases([32], ["bf16"], [(129, 129), (1, 129)]))


@pytest.mark.slow
@pytest.mark.parametrize("shape", FLEX_CASES, ids=label)
def test_flex_matches_reference(shape, device):
    run_check("flex", shape, device)


# transformers' flex path, with the BlockMask transformers builds: GQA at every mask and length, in fp32
HF_FLEX_CASES = [s for s in cases([64], ["fp32"]) if s.n_kv_heads == 2]


@pytest.mark.slow
@pytest.mark.parametrize("shape", HF_FLEX_CASES, ids=label)
def test_hf_flex_matches_reference(shape, device):
    run_check("hf-flex", shape, device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("shape", list(cases([64, 128], ["fp16", "bf16"])), ids=label)
@pytest.mark.parametrize("backend", DENSE)
def test_cuda_half_precision(backend, shape):
    run_check(backend, shape, "cuda")


def test_reference_row_zero_of_causal_is_first_value():
    # Under a square causal mask query 0 sees only key 0, so its output is exactly v[0].
    q, k, v = make_inputs(AttentionShape(1, 5, 5, 2, 2, 4, "fp32", CAUSAL))
    out = reference_attention(q, k, v, causal=True)
    assert torch.allclose(out[:, :, 0], v[:, :, 0].double())


def test_reference_catches_top_left_causal():
    # torch's is_causal is top-left aligned when Sq != Skv: the check must reject it.
    shape = AttentionShape(1, 7, 129, 4, 4, 32, "fp32", CAUSAL)
    q, k, v = make_inputs(shape)
    wrong = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    check = compare_to_reference(wrong, reference_attention(q, k, v, causal=True))
    assert not check.ok and check.max_abs_err > 0.1


def test_reference_catches_wrong_kv_head_mapping():
    shape = AttentionShape(1, 16, 16, 8, 2, 32, "fp32")
    q, k, v = make_inputs(shape)
    tiled = attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), backend="naive")  # i % Hkv, not i // g
    assert not compare_to_reference(tiled, reference_attention(q, k, v)).ok


def test_bf16_tolerance_is_not_vacuous():
    # A bf16 output off by one bf16 step of 0.05 on a single element must fail.
    shape = AttentionShape(1, 16, 16, 2, 2, 32, "bf16")
    q, k, v = make_inputs(shape)
    ref = reference_attention(q, k, v)
    out = ref.to(torch.bfloat16).clone()
    out[0, 0, 0, 0] += 0.1
    assert compare_to_reference(ref.to(torch.bfloat16), ref).ok
    assert not compare_to_reference(out, ref).ok


@pytest.mark.parametrize("backend", ["naive", "sdpa", "sdpa-math", "sdpa-flash"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("shape_args", [(129, 129, 2, "causal", None), (7, 129, 1, "window", 5),
                                        (64, 64, 8, "none", None)])
def test_gradients_match_reference(backend, dtype, shape_args, device):
    sq, skv, hkv, mask, window = shape_args
    shape = shape_from_fields(dict(batch=2, seq_q=sq, seq_kv=skv, n_heads=8, n_kv_heads=hkv, head_dim=64, dtype=dtype,
                                   mask=mask, window=window))
    check = check_gradients(backend, shape, device)
    assert check.ok, check.describe()


class ScaledBackward(torch.autograd.Function):
    """Identity forward, a backward scaled by `factor`: a backend whose gradients are wrong and output right."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor, None


def test_gradient_check_catches_wrong_backward():
    def wrong(q, k, v, *, mask, score):
        return ScaledBackward.apply(BACKENDS["naive"].fn(q, k, v, mask=mask, score=score), 1.05)

    from bench.backends.base import Backend

    BACKENDS["wrong-grad"] = Backend("wrong-grad", wrong, "test only", "tiled", "#000000", "o")
    try:
        shape = AttentionShape(1, 33, 33, 4, 2, 32, "fp32", CAUSAL)
        assert check_backend("wrong-grad", shape).ok  # forward is right...
        assert not check_gradients("wrong-grad", shape).ok  # ...backward is not
    finally:
        del BACKENDS["wrong-grad"]


# ------------------------------------------------------------------------------------------------------ MLA
# Every built-in backend on MLA's two forms (bench.kinds.mla_calls), checked end to end against the float64 expanded
# formula:
# a backend that cannot take D_v != D_qk must say so (torch's reason), never return something else.

def mla_shape(form: str, mask: str, dtype: str) -> AttentionShape:
    sq, skv = (29, 29) if form == "expanded" else (1, 83)
    return shape_from_fields(dict(batch=2, seq_q=sq, seq_kv=skv, n_heads=6, n_kv_heads=6 if form == "expanded" else 1,
                                  head_dim=40, dtype=dtype, mask=mask, window=9 if mask == "window" else None,
                                  v_head_dim=24, kv_lora_rank=48, rope_dim=8, mla_form=form))


MLA_CASES = [mla_shape(f, m, dt) for f in ("expanded", "absorbed") for m in ("none", "causal", "window")
             for dt in ("fp32", "bf16")]
# flex compiles per shape (seconds each on CPU): its masks are checked on MHA/GQA/MQA above, MLA on causal here
# the hf-* backends do not take MLA's D_v != D_qk (they list no "mla" variant)
MLA_PAIRS = [(b, s) for b in DENSE for s in MLA_CASES if (b != "flex" or s.mask.label == "causal")
             and not BACKENDS[b].opt_in]


@pytest.mark.parametrize("backend, shape", MLA_PAIRS,
                         ids=[f"{b}-mla-{s.mla.form}-{s.mask.label}-{s.dtype}" for b, s in MLA_PAIRS])
def test_mla_backend_matches_reference(backend, shape, device):
    from bench.kinds.mla_calls import check_mla

    try:
        check = check_mla(backend, shape, device)
    except Unsupported as err:
        if backend == "sdpa-flash" and device == "cpu":  # torch's CPU flash kernel: one head dim for Q, K and V
            assert "same last dimension" in str(err)
            return
        if str(err).startswith(COMPILE_FAILED):  # torch's inductor bug on this CPU, named in the results the same way
            pytest.skip(str(err))
        if device == "cpu" and backend in CPU_BACKENDS:
            pytest.fail(f"{backend} must run MLA on CPU: {err}")
        assert str(err), "an unsupported MLA call says why"
        pytest.skip(str(err))
    assert check.ok, f"{backend} {shape}: {check.describe()}"


def test_mla_check_catches_a_wrong_absorption_scale():
    """A backend that scales by its own 1/sqrt(rank + rope) without the pre-scaled q (the absorbed form's trap) is
    caught: q_lat is undone to the unscaled absorption and the check fails."""
    from bench.kinds.mla_calls import call_tensors, finish, make_mla_inputs, reference_mla

    shape = mla_shape("absorbed", "causal", "fp32")
    x = make_mla_inputs(shape)
    q, k, v = call_tensors(shape, x)
    unscaled = q / ((shape.qk_dim / shape.head_dim) ** 0.5)
    out = attention(unscaled, k, v, backend="naive", causal=True)
    assert not compare_to_reference(finish(shape, out, x), reference_mla(shape, x)).ok
    assert compare_to_reference(finish(shape, attention(q, k, v, backend="naive", causal=True), x),
                                reference_mla(shape, x)).ok
