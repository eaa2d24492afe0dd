"""KV cache: the real caches a decoder allocates, measured to check the formula of bench.models.kvsize (its size
by formula, what fits in a memory budget: torch-free, and re-exported here).

The model is a bench.models.ModelConfig (a config.json, a preset, or a geometry given by hand); config_json's
docstring states the rules of reading one. `KVCache` is the gpt-fast-style cache a decoder really allocates;
`measure_kv_cache_bytes` allocates one per layer (a rolling window-sized one for a sliding layer, a
`LatentKVCache` under MLA, a `LinearStateCache` for a hybrid's linear layer) and reads back what the allocator handed
out, so the formula is checked, not restated.
These caches are sized from n_kv_heads, so they cannot judge the claim that GQA/MQA shrink the cache:
`measured_presets` measures transformers' own caches for it (bench.models.hf_cache).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from bench.measure.memory import profiled
from bench.models.config import ModelConfig

# The formula and the size parsing live in kvsize (no torch, for `bench kv`); kept importable from here.
from bench.models.kvsize import (  # noqa: F401
    KVEstimate,
    SizeError,
    check_dtype,
    estimate,
    format_bytes,
    max_batch,
    max_context,
    parse_count,
    parse_memory,
)
from bench.models.linear import STATE_DTYPE, LinearState
from bench.problem.shapes import DTYPES

# fp8 halves bf16's cache; e4m3 is the format KV-cache quantisation uses (vLLM, TensorRT-LLM).
KV_DTYPES: dict[str, torch.dtype] = {**DTYPES, "fp8": torch.float8_e4m3fn}

MeasureMethod = Literal["allocator", "requested", "storage", "profiler"]


# ------------------------------------------------------------------------------------------ the real cache

class KVCache(nn.Module):
    """gpt-fast's cache: K and V preallocated at (batch, Hkv, max_tokens, D); `update` writes by index.

    With `rolling` (a sliding window) position p lands in slot p % max_tokens, so a window-sized buffer
    serves any context: the ring holds exactly the last `max_tokens` keys.
    """

    def __init__(self, batch: int, n_kv_heads: int, max_tokens: int, head_dim: int,
                 dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cpu", rolling: bool = False,
                 v_head_dim: int | None = None, index_dim: int | None = None):
        super().__init__()
        shape = (batch, n_kv_heads, max_tokens, head_dim)  # (B, Hkv, T, D)
        v_shape = shape[:3] + (head_dim if v_head_dim is None else v_head_dim,)  # a decompressed MLA model's V: 128
        self.max_tokens, self.rolling = max_tokens, rolling
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(v_shape, dtype=dtype, device=device), persistent=False)
        if index_dim:  # a top-K indexer's key per token (DSA), beside K and V
            self.register_buffer("index_cache", torch.zeros((batch, max_tokens, index_dim), dtype=dtype,
                                                            device=device), persistent=False)

    def update(self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, Hkv, S, D) at positions pos (S,); return the whole (B, Hkv, T, D) caches."""
        if self.rolling and pos.numel() > self.max_tokens:  # only the last window survives; avoid duplicate slots
            pos, k, v = pos[-self.max_tokens:], k[:, :, -self.max_tokens:], v[:, :, -self.max_tokens:]
        slots = pos % self.max_tokens if self.rolling else pos
        self.k_cache[:, :, slots] = k  # (B, Hkv, S, D) into (B, Hkv, T, D); index_put_ also takes fp8 on CPU
        self.v_cache[:, :, slots] = v
        return self.k_cache, self.v_cache


class LatentKVCache(nn.Module):
    """MLA's cache (DeepSeek-V2/V3): one (batch, max_tokens, kv_lora_rank + qk_rope_head_dim) latent per layer,
    shared by all heads; `update` writes by index like KVCache."""

    def __init__(self, batch: int, max_tokens: int, latent_dim: int, dtype: torch.dtype = torch.bfloat16,
                 device: str | torch.device = "cpu", rolling: bool = False, index_dim: int | None = None):
        super().__init__()
        self.max_tokens, self.rolling = max_tokens, rolling
        self.register_buffer("latent_cache", torch.zeros((batch, max_tokens, latent_dim), dtype=dtype, device=device),
                             persistent=False)
        if index_dim:  # DSA: the indexer's key per token, beside the latent
            self.register_buffer("index_cache", torch.zeros((batch, max_tokens, index_dim), dtype=dtype,
                                                            device=device), persistent=False)

    def update(self, pos: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        """Write latent (B, S, latent_dim) at positions pos (S,); return the whole (B, T, latent_dim) cache."""
        if self.rolling and pos.numel() > self.max_tokens:
            pos, latent = pos[-self.max_tokens:], latent[:, -self.max_tokens:]
        self.latent_cache[:, pos % self.max_tokens if self.rolling else pos] = latent
        return self.latent_cache


class LinearStateCache(nn.Module):
    """What a hybrid's linear layer keeps per sequence instead of K and V: its recurrent state (batch, *state_shape)
    in fp32 and its short convolution's last kernel - 1 inputs (batch, channels, kernel - 1) in the model's dtype
    (bench.models.linear); the same size at any context."""

    def __init__(self, batch: int, state: LinearState, conv_dtype: torch.dtype = torch.bfloat16,
                 device: str | torch.device = "cpu"):
        super().__init__()
        self.register_buffer("recurrent_state", torch.zeros((batch, *state.state_shape), dtype=KV_DTYPES[STATE_DTYPE],
                                                            device=device), persistent=False)
        self.register_buffer("conv_state", torch.zeros((batch, state.conv_channels, state.conv_tokens),
                                                       dtype=conv_dtype, device=device), persistent=False)


LayerCache = KVCache | LatentKVCache | LinearStateCache


def allocate_kv_cache(model: ModelConfig, context: int, batch: int = 1, dtype: str | None = None,
                      device: str | torch.device = "cpu") -> list[LayerCache]:
    """One cache per layer, in layer order: a full layer holds the context, a sliding layer a rolling buffer of
    min(context, window) tokens; MLA layers hold a LatentKVCache; a hybrid's linear layers a LinearStateCache (its
    convolution state in the model's dtype, not `dtype`, which is the KV cache's); none for encoder-only models."""
    context, batch = parse_count(context, "context"), parse_count(batch, "batch")
    if model.encoder_only:
        return []
    torch_dtype = KV_DTYPES[check_dtype(dtype or model.dtype)]
    caches: list[LayerCache] = []
    for kind in model.layer_kinds:
        if model.linear is not None and kind == model.linear.kind:
            caches.append(LinearStateCache(batch, model.linear, KV_DTYPES[model.dtype], device))
            continue
        cap = model.cap(kind)  # a sliding layer's window, a chunked layer's chunk: a rolling buffer that long
        sliding = cap is not None
        tokens = min(context, cap) if sliding else context  # type: ignore[type-var]
        if model.is_mla:
            caches.append(LatentKVCache(batch, tokens, model.kv_latent_dim, torch_dtype, device,  # type: ignore[arg-type]
                                        rolling=sliding, index_dim=model.index_head_dim))
        else:
            caches.append(KVCache(batch, model.n_kv_heads, tokens, model.head_dim, torch_dtype, device,
                                  rolling=sliding, v_head_dim=model.v_head_dim, index_dim=model.index_head_dim))
    return caches


def storage_bytes(caches: list[LayerCache]) -> int:
    """Bytes of the distinct storages the caches hold (a view sharing a storage counts once)."""
    storages = {}
    for cache in caches:
        for buf in cache.buffers():
            storage = buf.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def measure_kv_cache_bytes(model: ModelConfig, context: int, batch: int = 1, dtype: str | None = None,
                           device: str | torch.device = "cpu", method: MeasureMethod | None = None) -> int:
    """Bytes really allocated for a per-layer cache, a hybrid's linear states included (the caches are freed again
    before returning).

    allocator (CUDA, the default there): the torch.cuda.memory_allocated delta. The caching allocator rounds
      each block up to 512 bytes, and a block over 1 MiB may keep up to 1 MiB of unsplit slack, so this equals
      the formula for 512-byte-multiple buffers under 1 MiB and is otherwise at most that slack above it.
    requested (CUDA): the delta of memory_stats' requested_bytes, what the tensors asked for before rounding.
    storage (the CPU default): the sum of the distinct storages the caches hold, as torch allocated them.
    profiler (CPU): net bytes of the allocation events torch.profiler records while the caches are built.
    """
    dev = torch.device(device)
    method = method or ("allocator" if dev.type == "cuda" else "storage")
    if method in ("allocator", "requested"):
        if dev.type != "cuda":
            raise ValueError(f"method={method!r} reads the CUDA caching allocator; use storage or profiler on CPU")
        return _cuda_delta(model, context, batch, dtype, dev, method)
    if method == "storage":
        return storage_bytes(allocate_kv_cache(model, context, batch, dtype, dev))
    if method == "profiler":
        if dev.type != "cpu":
            raise ValueError("method='profiler' reads CPU memory events; use allocator or requested on CUDA")
        with profiled(memory=True) as prof:
            caches = allocate_kv_cache(model, context, batch, dtype, dev)  # kept alive: frees would net out
        measured = sum(event.self_cpu_memory_usage for event in prof.function_events)
        del caches
        return measured
    raise ValueError(f"unknown method {method!r}; expected allocator, requested, storage or profiler")


def _cuda_delta(model: ModelConfig, context: int, batch: int, dtype: str | None, dev: torch.device, method: str) -> int:
    def read() -> int:
        if method == "allocator":
            return torch.cuda.memory_allocated(dev)
        return torch.cuda.memory_stats(dev).get("requested_bytes.all.current", 0)

    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()  # fresh segments: a cached oversized block would otherwise inflate the delta
    before = read()
    caches = allocate_kv_cache(model, context, batch, dtype, dev)
    torch.cuda.synchronize(dev)
    measured = read() - before
    del caches
    return measured


def measured_presets(device: str = "cpu") -> list[dict]:
    """Every preset with a KV cache, as MHA, its own grouping and MQA (an MLA preset: as MLA, and decompressed as
    MHA and MQA at its Hq), each measured as transformers keeps it (bench.models.hf_cache: a one-layer twin run one
    forward step, the bytes per token its cache holds), for the claim that GQA/MQA shrink the cache by Hq/Hkv: our
    code names the heads, transformers' decides what it keeps. Empty without transformers: nothing measured, and no
    formula result in its place. Done once per run, at its start, in about a second past transformers' import (in
    the tests, once per test run: bench.measure.calibrate.reused)."""
    from bench.measure.calibrate import reused
    from bench.models import hf_cache

    if not hf_cache.available():
        return []
    return reused(f"kv-transformers {device}", lambda: _measured_presets(device))


def measured_twins(cfg: ModelConfig, device: str = "cpu", measured: dict[str, tuple[int, str]] | None = None) \
        -> list[dict]:
    """One preset's twins (MHA, its own GQA, MQA; an MLA preset: MLA, and its MHA and MQA decompressed), each as
    transformers caches it: bytes_per_token of one layer, with the heads its config asked for. `measured` keeps
    what was measured by twin, so presets of one geometry are measured once."""
    from bench.models import hf_cache

    measured = {} if measured is None else measured
    twins = [("mla", cfg), ("mha", cfg.decompressed("mha")), ("mqa", cfg.decompressed("mqa"))] if cfg.is_mla \
        else [(variant, cfg.as_variant(variant)) for variant in cfg.variants()]
    out = []
    for variant, m in twins:
        key = repr(hf_cache.twin_config(m))
        if key not in measured:
            measured[key] = hf_cache.cache_bytes_per_token(m, device)
        nbytes, model_class = measured[key]
        out.append({"model": cfg.name, "variant": variant, "n_heads": m.n_heads,
                    "n_kv_heads": None if m.is_mla else m.n_kv_heads, "head_dim": m.head_dim,
                    "kv_latent_dim": m.kv_latent_dim, "index_head_dim": m.index_head_dim,
                    "tokens": hf_cache.TOKENS, "dtype": "bf16", "source": "transformers", "method": model_class,
                    "bytes_per_token": nbytes})
    return out


def _measured_presets(device: str) -> list[dict]:
    from bench.models.presets import PRESETS

    measured: dict[str, tuple[int, str]] = {}  # a twin measured once (DeepSeek-V3.2's MHA/MQA twins are V3's)
    return [row for cfg in PRESETS.values() if not cfg.encoder_only for row in measured_twins(cfg, device, measured)]
