"""A small user package with attention kernels of its own, written into a tmp dir for the byo tests: a correct
kernel, one wrong only for GQA, one that writes into its input, one that returns a cached tensor, and a correct but
slower one (for A/B)."""

from __future__ import annotations

import textwrap
from pathlib import Path

KERNELS = textwrap.dedent('''
    """mypkg.attn: attention kernels in attnbench's conventions."""
    import torch

    import bench


    def _mask(sq, skv, causal, window, device):
        if not causal and window is None:
            return None
        i = torch.arange(sq, device=device)[:, None]
        j = torch.arange(skv, device=device)[None, :]
        ok = j <= i + (skv - sq)  # bottom-right aligned
        if window is not None:
            ok &= j > i + (skv - sq) - window
        return ok


    def _attend(q, k, v, causal, window, group_map):
        k, v = k[:, group_map], v[:, group_map]
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        ok = _mask(q.shape[2], k.shape[2], causal, window, q.device)
        if ok is not None:
            scores = scores.masked_fill(~ok, float("-inf"))
        return scores.softmax(-1) @ v


    @bench.backend(name="mine", memory="materialising", devices=("cpu",), dtypes=("fp32", "bf16"))
    def attn(q, k, v, *, causal, window):
        """A textbook kernel: materialises the scores."""
        group = q.shape[1] // k.shape[1]
        return _attend(q, k, v, causal, window, torch.arange(q.shape[1], device=q.device) // group)


    @bench.backend(name="gqa-bug", memory="materialising", devices=("cpu",), dtypes=("fp32",))
    def gqa_bug(q, k, v, *, causal, window):
        """Maps query head i to KV head i % Hkv: right for MHA and MQA, wrong for GQA."""
        return _attend(q, k, v, causal, window, torch.arange(q.shape[1], device=q.device) % k.shape[1])


    @bench.backend(name="scribbler", memory="materialising", devices=("cpu",), dtypes=("fp32",), backward=False)
    def scribbler(q, k, v, *, causal, window):
        """Right output, but scales q in place after using it: every later call sees other inputs."""
        out = attn(q, k, v, causal=causal, window=window)
        q.mul_(1.0001)
        return out


    _CACHE = {}


    @bench.backend(name="cached", memory="tiled", devices=("cpu",), dtypes=("fp32",), backward=False)
    def cached(q, k, v, *, causal, window):
        """Computes once per input, then hands back the same tensor: no work at all after the first call."""
        key = (q.shape, k.shape, causal, window, q.data_ptr(), float(q.view(-1)[0]), float(k.view(-1)[-1]))
        if key not in _CACHE:
            _CACHE[key] = attn(q, k, v, causal=causal, window=window)
        return _CACHE[key]


    def plain(q, k, v, *, causal, window):
        return attn(q, k, v, causal=causal, window=window)


    def slower(q, k, v, *, causal, window):
        """Correct, and about SLOWDOWN times as slow as attn: the same call, then busy-waits for the rest."""
        import time
        t0 = time.perf_counter()
        out = attn(q, k, v, causal=causal, window=window)
        spent = time.perf_counter() - t0
        while time.perf_counter() - t0 < SLOWDOWN * spent:
            pass
        return out


    SLOWDOWN = 2.0  # a test on a shared 2-core machine needs a slowdown far above its noise; x1.3 is caught by hand
    not_callable = 3


    def wrong_signature(q, k, v):
        return q
''')


def write_package(root: Path) -> Path:
    """mypkg/ (mypkg.attn with the kernels above) under `root`; returns root."""
    pkg = root / "mypkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "attn.py").write_text(KERNELS)
    return root
