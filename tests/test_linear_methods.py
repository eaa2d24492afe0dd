"""Mamba-2's SSD and Kimi Delta Attention as linear methods (mamba2, kda): transformers' torch paths against their own
float64 recurrences, checks with teeth, FLOP counts against FlopCounterMode, bytes, the --linear values and the
backends that run them, and a check through the linear kind (a decode step that updates its state in place)."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.backends import get_backend
from bench.backends.linear import LINEAR_IMPLEMENTATIONS
from bench.kinds.base import ReferenceCache
from bench.kinds.linear import LinearKind, linear_shape
from bench.linear import counts, hf_ssm
from bench.linear.inputs import make_inputs
from bench.linear.reference import TOLERANCES, error, reference_prefill
from bench.linear.shape import LinearShape
from bench.problem.case import Case
from bench.problem.columns import shape_from_fields
from bench.problem.linear import Linear

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed (the hf extra): its torch paths are what run")

FP32 = TOLERANCES[torch.float32]
METHODS = {"mamba2": (hf_ssm.hf_mamba2_chunk, hf_ssm.hf_mamba2_recurrent),
           "kda": (hf_ssm.hf_kda_chunk, hf_ssm.hf_kda_recurrent)}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _shape(method: str, phase: str = "prefill", **more) -> LinearShape:
    # value heads over fewer key heads (Mamba-2's groups), d_k != d_v (d_state != d_head), two chunks
    fields = dict(batch=2, k_heads=2, v_heads=4, d_k=32, d_v=16, seq=64, chunk=32, method=method, phase=phase) | more
    return LinearShape(**fields)


def test_the_values_and_backends_are_registered_as_gdn_is():
    assert Linear.parse("mamba2").label == "mamba2:64" and Linear.parse("kda:32").label == "kda:32"
    assert get_backend("hf-mamba2").linear == ("mamba2",) and get_backend("hf-kda").linear == ("kda",)
    assert LINEAR_IMPLEMENTATIONS["hf-mamba2"] == ("hf-mamba2-chunk", "hf-mamba2-recurrent")
    assert not get_backend("hf-kda").dense and not get_backend("hf-mamba2").backward


@pytest.mark.parametrize("method", METHODS)
def test_the_chunk_form_and_the_recurrence_meet_the_reference(method):
    chunked, recurrent = METHODS[method]
    shape = _shape(method)
    x = make_inputs(shape, seed=1)
    ref_o, ref_state = reference_prefill(method, *x.tensors, **x.params)
    for fn in (chunked, recurrent):
        o, state = fn(*x.tensors, state=None if fn is chunked else torch.zeros(shape.state_shape),
                      chunk=shape.chunk, **x.params)
        assert error(o, ref_o) <= FP32 and error(state, ref_state) <= FP32, fn.__name__
    # from a state (the second half of a sequence), and in bf16
    y = make_inputs(shape, seed=2, state=ref_state)
    start = y.state.clone()
    o, state = chunked(*y.tensors, state=y.state, chunk=shape.chunk, **y.params)
    ref2_o, ref2_state = reference_prefill(method, *y.tensors, state=start, **y.params)
    assert error(o, ref2_o) <= FP32 and error(state, ref2_state) <= FP32
    b = make_inputs(dataclasses.replace(shape, dtype="bf16"), seed=3)
    o, _ = chunked(*b.tensors, chunk=shape.chunk, **b.params)
    assert o.dtype == torch.bfloat16 and error(o, reference_prefill(method, *b.tensors, **b.params)[0]) <= \
        TOLERANCES[torch.bfloat16]


def test_the_checks_have_teeth():
    """A per-head decay in place of kda's per-channel one, and mamba2's A or D read from another head, miss the
    fp32 bound by orders of magnitude."""
    shape = _shape("kda")
    x = make_inputs(shape, seed=1)
    ref_o, _ = reference_prefill("kda", *x.tensors)
    one_decay = x.g.mean(-1, keepdim=True).expand_as(x.g)
    o, _ = hf_ssm.hf_kda_chunk(x.q, x.k, x.v, one_decay, x.beta, chunk=shape.chunk)
    assert error(o, ref_o) > 100 * FP32
    shape = _shape("mamba2")
    x = make_inputs(shape, seed=1)
    ref_o, _ = reference_prefill("mamba2", *x.tensors, **x.params)
    for wrong in ({"A": x.params["A"].flip(0), "D": x.params["D"]}, {"A": x.params["A"], "D": x.params["D"].flip(0)}):
        o, _ = hf_ssm.hf_mamba2_chunk(*x.tensors, chunk=shape.chunk, **wrong)
        assert error(o, ref_o) > 100 * FP32


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("chunk", [16, 32])
def test_flop_formulas_match_flop_counter(method, chunk):
    """The chunked algorithm's matmuls (mamba2's inter-chunk einsum, quadratic in the chunks, included) and the
    recurrence's, counted on transformers' code and on the float64 reference; their steps' elementwise work unseen."""
    chunked, recurrent = METHODS[method]
    shape = _shape(method, chunk=chunk)
    x = make_inputs(shape)
    with FlopCounterMode(display=False) as mode:
        chunked(*x.tensors, chunk=chunk, **x.params)
    assert mode.get_total_flops() == counts.chunk_flops(shape)
    with FlopCounterMode(display=False) as mode:
        reference_prefill(method, *x.tensors, **x.params)
    assert mode.get_total_flops() == counts.recurrent_flops(shape)
    step = _shape(method, "decode")
    y = make_inputs(step)
    with FlopCounterMode(display=False) as mode:
        recurrent(*y.tensors, state=y.state, **y.params)
    # kda's step is elementwise multiplies and sums; mamba2's reads S^T C with a bmm and writes dt B x^T elementwise
    assert mode.get_total_flops() == (0 if method == "kda" else counts.recurrent_flops(step) // 2)
    n = 64 // chunk
    assert counts.chunk_solve_flops(shape) == (2 * 64 * 4 * (4 * chunk * 32 + (chunk - 1) * (2 * chunk - 1) // 3)
                                               if method == "kda" else 0)
    if method == "mamba2":
        assert counts.chunk_flops(shape) == 2 * (64 * 4 * (2 * chunk * 48 + 4 * 32 * 16) + 4 * 2 * (n + 1) ** 2 * 512)


def test_bytes_count_each_methods_inputs():
    mamba2, kda = _shape("mamba2", "decode"), _shape("kda", "decode", dtype="bf16")
    # x, B, C, y in fp32 plus dt (float32) per value head
    assert counts.token_bytes(mamba2) == 4 * (2 * 2 * 32 + 2 * 4 * 16) + 4 * 4
    # q, k, v, o, beta in bf16 plus g per value head and key channel (float32)
    assert counts.token_bytes(kda) == 2 * (2 * 2 * 32 + 2 * 4 * 16 + 4) + 4 * 4 * 32
    assert counts.decode_bytes(kda) == 2 * 2 * 4 * 32 * 16 * 4 + 2 * counts.token_bytes(kda)


@pytest.mark.parametrize("method", METHODS)
def test_the_linear_kind_checks_a_decode_step_from_its_own_start(method):
    """hf-mamba2's step updates the state it is given in place: the kind's check hands it a copy, so the reference
    starts where the step started."""
    shape = shape_from_fields(dict(batch=1, seq_q=1, seq_kv=512, n_heads=4, n_kv_heads=2, head_dim=16, dtype="fp32",
                                   mask="causal", linear=f"{method}:64"))
    assert linear_shape(shape).method == method
    case = Case(f"hf-{method}", shape, "decode", "fwd", "cpu")
    check, _ = LinearKind().check(case, None, ReferenceCache())
    assert check.ok and check.max_abs_err <= FP32
