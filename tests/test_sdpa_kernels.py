"""Each forced SDPA backend runs the kernel it names, seen in the profiler's op names."""

import pytest
from torch.profiler import ProfilerActivity, profile

from bench import Unsupported, attention
from bench.problem.columns import shape_from_fields
from bench.reference import make_inputs

KERNEL_OPS = {
    ("cpu", "sdpa-math"): "aten::_scaled_dot_product_attention_math",
    ("cpu", "sdpa-flash"): "aten::_scaled_dot_product_flash_attention_for_cpu",
    ("cuda", "sdpa-math"): "aten::_scaled_dot_product_attention_math",
    ("cuda", "sdpa-flash"): "aten::_scaled_dot_product_flash_attention",
    ("cuda", "sdpa-efficient"): "aten::_scaled_dot_product_efficient_attention",
    ("cuda", "sdpa-cudnn"): "aten::_scaled_dot_product_cudnn_attention",
}
OTHER_KERNELS = set(KERNEL_OPS.values())


def ops_run(backend, shape, device):
    q, k, v = make_inputs(shape, device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        attention(q, k, v, backend=backend, causal=shape.causal, window=shape.mask.window)
    return prof.events()


def ancestors(event):
    while event.cpu_parent is not None:
        event = event.cpu_parent
        yield event.name


@pytest.mark.parametrize("mask, window", [("none", None), ("causal", None), ("window", 8)])
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("backend", ["sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"])
def test_forced_backend_runs_its_kernel(backend, n_kv_heads, mask, window, device):
    if (device, backend) not in KERNEL_OPS:
        with pytest.raises(Unsupported):
            ops_run(backend, shape_from_fields(dict(batch=1, seq_q=32, seq_kv=32, n_heads=4, n_kv_heads=n_kv_heads,
                                                    head_dim=64, dtype="fp32", mask=mask, window=window)), device)
        return
    dtype = "fp16" if device == "cuda" else "fp32"
    shape = shape_from_fields(dict(batch=1, seq_q=32, seq_kv=64, n_heads=4, n_kv_heads=n_kv_heads, head_dim=64,
                                   dtype=dtype, mask=mask, window=window))
    try:
        events = ops_run(backend, shape, device)
    except Unsupported as err:
        pytest.skip(f"unsupported here: {err}")
    expected = KERNEL_OPS[(device, backend)]
    ops = {e.name for e in events}
    assert expected in ops
    assert not (OTHER_KERNELS - {expected}) & ops, "another SDPA kernel ran too"
    # The math kernel expands K/V itself for enable_gqa; anything outside the kernel must not.
    expansions = [e for e in events if e.name in ("aten::repeat_interleave", "aten::expand")]
    assert all(expected in ancestors(e) for e in expansions), "K/V were expanded outside the kernel"
