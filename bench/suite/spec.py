"""Sweeps: named profiles of axes, expanded into an ordered list of cases with stable ids."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from dataclasses import dataclass, field

from bench.backends import BACKENDS
from bench.shapes import AttentionShape, ShapeError, head_dim_for, parse_mask

PHASES = ("prefill", "decode")
PASSES = ("fwd", "fwd+bwd")


@dataclass(frozen=True)
class Case:
    backend: str
    shape: AttentionShape
    phase: str  # prefill: Sq == Skv; decode: Sq (1, or a few for speculative decoding) against the cache
    pass_: str  # fwd | fwd+bwd
    device: str

    @property
    def id(self) -> str:
        s = self.shape
        return (f"{self.backend}/{s.variant}/b{s.batch}-hq{s.n_heads}-hkv{s.n_kv_heads}-q{s.seq_q}-kv{s.seq_kv}"
                f"-d{s.head_dim}/{s.dtype}/{s.mask_label}/{self.phase}/{self.pass_}/{self.device}")


def case_to_dict(case: Case) -> dict:
    s = case.shape
    return {"backend": case.backend, "phase": case.phase, "pass": case.pass_, "device": case.device,
            "shape": [s.batch, s.seq_q, s.seq_kv, s.n_heads, s.n_kv_heads, s.head_dim, s.dtype, s.mask, s.window]}


def case_from_dict(d: dict) -> Case:
    return Case(d["backend"], AttentionShape(*d["shape"]), d["phase"], d["pass"], d["device"])


@dataclass(frozen=True)
class Sweep:
    """Axes of a sweep. Every combination is a case; decode has its own query and KV lengths."""

    backends: tuple[str, ...] = tuple(BACKENDS)
    heads: tuple[int, ...] = (8,)
    kv_heads: tuple[int, ...] | None = (8, 2, 1)  # None: equal to n_heads (MHA only)
    seqs: tuple[int, ...] = (256, 512, 1024, 2048)
    batches: tuple[int, ...] = (1,)
    head_dims: tuple[int, ...] = (64,)
    d_model: int | None = None  # when set, head_dim = d_model / n_heads (the heads sweep)
    tokens_per_batch: int | None = None  # when set, batch = tokens / seq (GPU sweeps at fixed tokens)
    dtypes: tuple[str, ...] = ("fp32",)
    masks: tuple[str, ...] = ("causal",)
    phases: tuple[str, ...] = ("prefill",)
    passes: tuple[str, ...] = ("fwd",)
    decode_q: tuple[int, ...] = (1,)
    decode_kv: tuple[int, ...] = (1024, 4096, 16384)
    budget_s: float = 1.0  # timing budget per case before it is marked noisy
    notes: str = field(default="", compare=False)

    def with_axes(self, **axes: object) -> Sweep:
        return dataclasses.replace(self, **{k: v for k, v in axes.items() if v is not None})


CPU_BACKENDS = ("naive", "sdpa", "sdpa-math", "sdpa-flash", "flex")

PROFILES: dict[str, dict[str, Sweep]] = {
    "cpu": {
        "quick": Sweep(backends=CPU_BACKENDS, seqs=(256, 512), phases=("prefill", "decode"), decode_kv=(2048,),
                       budget_s=0.4, notes="about 2 minutes on a 2-core machine; CI's regression check"),
        "default": Sweep(seqs=(256, 512, 1024, 2048), dtypes=("fp32", "bf16"), masks=("none", "causal"),
                         phases=("prefill", "decode"), decode_kv=(1024, 4096, 16384), budget_s=0.6,
                         notes="every backend x MHA/GQA/MQA x 4 lengths x fp32/bf16 x none/causal, plus decode"),
        "heads": Sweep(backends=("naive", "sdpa-math", "sdpa-flash", "flex"), heads=(1, 2, 4, 8, 16, 32),
                       kv_heads=None, d_model=512, seqs=(1024,), notes="d_model 512 split into 1..32 heads"),
        "decode": Sweep(phases=("decode",), decode_q=(1, 4), decode_kv=(1024, 4096, 16384),
                        notes="decode and speculative decode (4 queries) against growing KV caches"),
        "full": Sweep(kv_heads=(8, 4, 2, 1), seqs=(256, 512, 1024, 2048, 4096), batches=(1, 4), head_dims=(64, 128),
                      dtypes=("fp32", "bf16"), masks=("none", "causal", "window:256"), phases=PHASES,
                      passes=PASSES, decode_q=(1, 4), notes="every axis; hours on a small CPU"),
    },
    "cuda": {
        "quick": Sweep(backends=tuple(BACKENDS), heads=(16,), kv_heads=(16, 4, 1), seqs=(1024, 4096),
                       head_dims=(128,), dtypes=("bf16",), phases=("prefill", "decode"), decode_kv=(32768,),
                       budget_s=0.4),
        "default": Sweep(backends=tuple(BACKENDS), heads=(16,), kv_heads=(16, 4, 1),
                         seqs=(1024, 2048, 4096, 8192, 16384),
                         tokens_per_batch=16384, head_dims=(64, 128), dtypes=("bf16",), masks=("none", "causal"),
                         phases=("prefill", "decode"), passes=PASSES, decode_kv=(8192, 32768, 131072),
                         budget_s=0.5, notes="16k tokens per batch, as the FlashAttention papers measure"),
        "heads": Sweep(backends=tuple(BACKENDS), heads=(1, 2, 4, 8, 16, 32), kv_heads=None, d_model=2048,
                       seqs=(4096,), dtypes=("bf16",)),
        "decode": Sweep(backends=tuple(BACKENDS), heads=(32,), kv_heads=(32, 8, 1), head_dims=(128,), dtypes=("bf16",),
                        phases=("decode",), decode_q=(1, 4), decode_kv=(8192, 32768, 131072), batches=(1, 8)),
        "full": Sweep(backends=tuple(BACKENDS), heads=(16, 32), kv_heads=(16, 8, 4, 1),
                      seqs=(1024, 2048, 4096, 8192, 16384), tokens_per_batch=16384, head_dims=(64, 128),
                      dtypes=("bf16", "fp16"), masks=("none", "causal", "window:256"), phases=PHASES,
                      passes=PASSES, decode_q=(1, 4), decode_kv=(8192, 32768, 131072)),
    },
}


def profile(name: str, device: str) -> Sweep:
    try:
        return PROFILES[device][name]
    except KeyError:
        raise ShapeError(f"unknown profile {name!r}; known: {', '.join(PROFILES['cpu'])}") from None


def _kv_heads(sweep: Sweep, n_heads: int) -> tuple[int, ...]:
    return (n_heads,) if sweep.kv_heads is None else sweep.kv_heads


def cases(sweep: Sweep, device: str) -> list[Case]:
    """Every case of the sweep, ordered so that cases sharing a shape are adjacent (one reference each)."""
    for name in sweep.backends:
        if name not in BACKENDS:
            raise ShapeError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    out: list[Case] = []
    for n_heads in sweep.heads:
        d_list = (head_dim_for(sweep.d_model, n_heads),) if sweep.d_model else sweep.head_dims
        axes = itertools.product(_kv_heads(sweep, n_heads), d_list, sweep.dtypes, sweep.masks)
        for n_kv, head_dim, dtype, mask_text in axes:
            mask, window = parse_mask(mask_text)
            if "prefill" in sweep.phases:
                for seq in sweep.seqs:
                    for batch in _batches(sweep, seq):
                        shape = AttentionShape(batch, seq, seq, n_heads, n_kv, head_dim, dtype, mask, window)
                        out += [Case(b, shape, "prefill", p, device) for p in sweep.passes for b in sweep.backends]
            if "decode" in sweep.phases and mask != "none":  # decoding is causal: 'none' would repeat 'causal'
                for sq, kv, batch in itertools.product(sweep.decode_q, sweep.decode_kv, sweep.batches):
                    shape = AttentionShape(batch, sq, kv, n_heads, n_kv, head_dim, dtype, mask, window)
                    out += [Case(b, shape, "decode", "fwd", device) for b in sweep.backends]
    if "decode" in sweep.phases and "prefill" not in sweep.phases and not out:
        raise ShapeError("decode needs a causal or window mask")
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise ShapeError("the sweep lists the same case twice; check for repeated axis values")
    return out


def _batches(sweep: Sweep, seq: int) -> tuple[int, ...]:
    if sweep.tokens_per_batch:
        return (max(1, sweep.tokens_per_batch // seq),)
    return sweep.batches


def shard(all_cases: list[Case], spec: str) -> list[Case]:
    """'K/N' (1-based): every N-th case starting at K-1, so shards are balanced across shapes."""
    try:
        k_text, n_text = spec.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise ShapeError(f"--shard {spec!r}: expected K/N with integers, e.g. 2/4") from None
    if n < 1 or not 1 <= k <= n:
        raise ShapeError(f"--shard {spec}: K must be between 1 and N (N >= 1)")
    return all_cases[k - 1::n]


def sweep_id(selected: list[Case]) -> str:
    """Identifies the case list, so that --resume refuses a file from another sweep."""
    digest = hashlib.sha256("\n".join(c.id for c in selected).encode()).hexdigest()
    return digest[:16]
