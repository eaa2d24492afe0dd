"""bench.linear: every linear-attention implementation against the float64 recurrence (prefill, prefill continued
from a state, decode from the state the reference reaches after a prefix), the shape's refusals, the FLOP formulas
against FlopCounterMode, the state's bytes, and nothing heavy imported at import."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.backends.base import Unsupported
from bench.linear import backends, counts
from bench.linear.inputs import make_inputs, torch_dtype
from bench.linear.reference import TOLERANCES, error, reference_decode, reference_prefill, within
from bench.linear.shape import LinearShape
from bench.problem.shapes import ShapeError

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
HAS_FLA = importlib.util.find_spec("fla") is not None

# small enough for a loaded 2-core machine: the float64 reference runs every token in Python
SIZES = {
    "mha-c16": dict(batch=1, k_heads=2, v_heads=2, d_k=16, d_v=16, seq=32, chunk=16),
    "gqa-c32": dict(batch=2, k_heads=2, v_heads=4, d_k=32, d_v=16, seq=64, chunk=32),  # v heads > k heads, d_k != d_v
    "gqa-c64": dict(batch=1, k_heads=1, v_heads=2, d_k=32, d_v=32, seq=128, chunk=64),  # the default chunk, 2 chunks
}
CASES = [(size, "fp32") for size in SIZES] + [("gqa-c32", "bf16")]
RUNNABLE = [impl for impl in backends.IMPLEMENTATIONS if "cpu" in impl.devices]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These tests check values, not speed: on one thread, torch's small ops do not spin waiting for a second one on
    a loaded machine (the file took 23 s on 2 busy cores with two threads, most of it spinning)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _shape(size: str, method: str, dtype: str = "fp32", phase: str = "prefill") -> LinearShape:
    return LinearShape(**SIZES[size], method=method, dtype=dtype, phase=phase)


def _needs(impl: backends.LinearImpl) -> None:
    if impl.name.startswith("hf-") and not HAS_TRANSFORMERS:
        pytest.skip("transformers is not installed (the hf extra): its gated DeltaNet paths cannot run")


@functools.cache
def _reference(shape: LinearShape, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = make_inputs(shape, seed=seed)
    return reference_prefill(shape.method, *x.tensors, **x.params)


def _assert_close(name: str, out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.shape == ref.shape, f"{name}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert within(out, ref, dtype), f"{name}: error {error(out, ref):.2e} > {TOLERANCES[dtype]:.0e}"


@pytest.mark.parametrize("size,dtype", CASES)
@pytest.mark.parametrize("impl", RUNNABLE, ids=lambda impl: impl.name)
def test_prefill_matches_the_recurrence(impl: backends.LinearImpl, size: str, dtype: str) -> None:
    """A chunked implementation over the whole prefill, and a recurrent one token by token over it."""
    _needs(impl)
    shape = _shape(size, impl.method, dtype)
    x = make_inputs(shape, seed=1)
    o, state = impl.fn(*x.tensors, chunk=shape.chunk, **x.params)
    ref_o, ref_state = _reference(shape, 1)
    assert o.dtype == torch_dtype(dtype) and state.dtype == torch.float32
    _assert_close(f"{impl.name} o", o, ref_o, torch_dtype(dtype))
    _assert_close(f"{impl.name} state", state, ref_state, torch_dtype(dtype))


@pytest.mark.parametrize("impl", [i for i in RUNNABLE if i.phase == "prefill"], ids=lambda impl: impl.name)
def test_prefill_continues_from_a_state(impl: backends.LinearImpl) -> None:
    """The second half of a sequence from the state the reference reached after the first: the initial state
    enters every chunk's inter-chunk term."""
    _needs(impl)
    shape = _shape("gqa-c32", impl.method)
    _, prefix_state = _reference(shape, 2)
    x = make_inputs(shape, seed=3, state=prefix_state)
    o, state = impl.fn(*x.tensors, state=x.state, chunk=shape.chunk, **x.params)
    ref_o, ref_state = reference_prefill(shape.method, *x.tensors, state=prefix_state, **x.params)
    _assert_close(f"{impl.name} o", o, ref_o, torch.float32)
    _assert_close(f"{impl.name} state", state, ref_state, torch.float32)


@pytest.mark.parametrize("size,dtype", CASES)
@pytest.mark.parametrize("impl", [i for i in RUNNABLE if i.phase == "decode"], ids=lambda impl: impl.name)
def test_decode_step_from_the_reference_state(impl: backends.LinearImpl, size: str, dtype: str) -> None:
    """One token after a context of `seq` tokens, from the state the reference reached over that context."""
    _needs(impl)
    _, context_state = _reference(_shape(size, impl.method, dtype), 4)
    shape = _shape(size, impl.method, dtype, phase="decode")
    x = make_inputs(shape, seed=5, state=context_state)
    assert x.q.shape[1] == 1 and x.state.dtype == torch.float32
    o, state = impl.fn(*x.tensors, state=x.state, **x.params)
    ref_o, ref_state = reference_decode(shape.method, *x.tensors, state=context_state, **x.params)
    _assert_close(f"{impl.name} o", o, ref_o, torch_dtype(dtype))
    _assert_close(f"{impl.name} state", state, ref_state, torch_dtype(dtype))


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed (the hf extra)")
def test_the_check_has_teeth() -> None:
    """A wrong head grouping or a wrong gate misses the fp32 bound by orders of magnitude."""
    shape = _shape("gqa-c32", "gdn")
    x = make_inputs(shape, seed=1)
    ref_o, _ = _reference(shape, 1)
    flipped = x.k.flip(2)  # value head h reading the other key head
    o, _ = backends.hf_gdn_chunk(x.q.flip(2), flipped, x.v, x.g, x.beta, chunk=shape.chunk)
    assert error(o, ref_o) > 100 * TOLERANCES[torch.float32]
    o, _ = backends.hf_gdn_chunk(x.q, x.k, x.v, torch.zeros_like(x.g), x.beta, chunk=shape.chunk)  # no decay
    assert error(o, ref_o) > 100 * TOLERANCES[torch.float32]


def test_transformers_missing_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers.models.qwen3_next.modeling_qwen3_next", None)
    x = make_inputs(_shape("mha-c16", "gdn"))
    for fn in (backends.hf_gdn_chunk, backends.hf_gdn_recurrent):
        with pytest.raises(Unsupported, match="transformers") as err:
            fn(*x.tensors, chunk=16)
        assert "\n" not in str(err.value)


@pytest.mark.skipif(HAS_FLA and torch.cuda.is_available(), reason="fla and a GPU are here: test_fla_on_gpu runs it")
def test_fla_is_unsupported_here() -> None:
    x = make_inputs(_shape("mha-c16", "gdn"))
    for fn in (backends.fla_gdn_chunk, backends.fla_gdn_recurrent):
        with pytest.raises(Unsupported, match="fla") as err:
            fn(*x.tensors, chunk=64)
        assert "\n" not in str(err.value)


@pytest.mark.skipif(not (HAS_FLA and torch.cuda.is_available()), reason="needs flash-linear-attention and a GPU")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_fla_on_gpu(dtype: str) -> None:
    size = dict(SIZES["gqa-c64"], chunk=64)
    for phase, fn in (("prefill", backends.fla_gdn_chunk), ("decode", backends.fla_gdn_recurrent)):
        context = LinearShape(**size, method="gdn", dtype=dtype)
        _, context_state = _reference(context, 6)
        shape = LinearShape(**size, method="gdn", dtype=dtype, phase=phase)
        x = make_inputs(shape, device="cuda", seed=7, state=context_state)
        try:
            o, state = fn(*x.tensors, state=x.state, chunk=64)
        except Unsupported as err:
            pytest.skip(str(err))
        ref_o, ref_state = reference_prefill("gdn", *x.tensors, state=context_state)
        _assert_close(f"fla {phase} o", o, ref_o, torch_dtype(dtype))
        _assert_close(f"fla {phase} state", state, ref_state, torch_dtype(dtype))


@pytest.mark.parametrize("change,words", [
    (dict(seq=100), "chunk=64 does not divide seq=100: a chunk size that does not divide the prefill length"),
    (dict(seq=64, chunk=48), "chunk=48 does not divide seq=64"),
    (dict(d_k=0), "d_k=0 must be a positive integer"),
    (dict(batch=-1), "batch=-1 must be a positive integer"),
    (dict(chunk=0), "chunk=0 must be a positive integer"),
    (dict(v_heads=24, k_heads=16), "v_heads=24 is not a multiple of k_heads=16"),
    (dict(method="rwkv"), "method='rwkv' is unknown"),
    (dict(phase="verify"), "phase='verify' is unknown"),
    (dict(dtype="fp8"), "dtype='fp8' is unknown"),
    (dict(seq=True), "seq=True must be a positive integer"),
])
def test_bad_shapes_are_refused(change: dict, words: str) -> None:
    fields = dict(batch=1, k_heads=16, v_heads=32, d_k=128, d_v=128, seq=128) | change
    with pytest.raises(ShapeError) as err:
        LinearShape(**fields)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_shape_terms() -> None:
    qwen = LinearShape(batch=1, k_heads=16, v_heads=32, d_k=128, d_v=128, seq=4096, dtype="bf16")
    assert (qwen.group, qwen.tokens, qwen.chunk, qwen.method) == (2, 4096, 64, "gdn")
    assert qwen.state_shape == (1, 32, 128, 128)
    decode = LinearShape(batch=1, k_heads=16, v_heads=32, d_k=128, d_v=128, seq=1000, phase="decode")
    assert decode.tokens == 1  # a decode context need not be whole chunks


@pytest.mark.parametrize("method", ["gdn", "linear"])
def test_flop_formulas_match_flop_counter(method: str) -> None:
    """The matmul FLOPs FlopCounterMode counts on the torch implementations, equal to the formulas; gdn's
    triangular solves and all elementwise work are outside both."""
    if method == "gdn" and not HAS_TRANSFORMERS:
        pytest.skip("transformers is not installed (the hf extra): its chunked gated DeltaNet is what is counted")
    for size in ("gqa-c32", "gqa-c64"):
        shape = _shape(size, method)
        x = make_inputs(shape)
        chunked = backends.hf_gdn_chunk if method == "gdn" else backends.torch_linear_chunk
        with FlopCounterMode(display=False) as chunk_mode:
            chunked(*x.tensors, chunk=shape.chunk)
        assert chunk_mode.get_total_flops() == counts.chunk_flops(shape)
        # the recurrence: counted on the float64 reference (its products are matmuls), and on the torch step
        with FlopCounterMode(display=False) as ref_mode:
            reference_prefill(method, *x.tensors)
        assert ref_mode.get_total_flops() == counts.recurrent_flops(shape)
        step = _shape(size, method, phase="decode")
        y = make_inputs(step)
        recurrent = backends.hf_gdn_recurrent if method == "gdn" else backends.torch_linear_recurrent
        with FlopCounterMode(display=False) as step_mode:
            recurrent(*y.tensors, state=y.state)
        # transformers writes the recurrence as elementwise multiplies and sums: FlopCounterMode sees none of it
        assert step_mode.get_total_flops() == (0 if method == "gdn" else counts.recurrent_flops(step))
    shape = _shape("gqa-c64", method)
    solves = 2 * 64 * 2 * 63 * (32 + 32)  # B T Hv (C - 1) (d_k + d_v)
    assert counts.chunk_solve_flops(shape) == (solves if method == "gdn" else 0)
    with pytest.raises(ValueError, match="not chunked"):
        counts.chunk_flops(_shape("gqa-c64", method, phase="decode"))


def test_state_bytes_of_a_qwen3_next_layer() -> None:
    """Qwen3-Next's linear layer: 32 value heads of 128 x 128 float32 plus a width-4 convolution over 2 x 16 x 128 +
    32 x 128 = 8192 channels in bf16."""
    shape = LinearShape(batch=1, k_heads=16, v_heads=32, d_k=128, d_v=128, seq=4096, dtype="bf16", phase="decode")
    assert counts.recurrent_state_bytes(shape) == 32 * 128 * 128 * 4 == 2_097_152
    assert counts.conv_channels(shape) == 8192
    assert counts.state_bytes(shape, conv_kernel=4) == 2_097_152 + 3 * 8192 * 2
    assert counts.state_bytes(shape, conv_kernel=1) == 2_097_152  # a width-1 convolution keeps no past input
    token = 2 * (2 * 16 * 128 + 2 * 32 * 128 + 32) + 4 * 32
    assert counts.decode_bytes(shape) == 2 * 2_097_152 + token
    assert counts.recurrent_flops(shape) == 6 * 32 * 128 * 128
    with pytest.raises(ValueError, match="conv_kernel=0"):
        counts.state_bytes(shape, conv_kernel=0)


def test_import_pulls_in_neither_torch_nor_transformers() -> None:
    code = ("import sys, bench.linear.backends, bench.linear.counts, bench.linear.inputs, bench.linear.shape; "
            "print(sorted(m for m in ('torch', 'transformers', 'fla') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
