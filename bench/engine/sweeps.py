"""Sweeps: named profiles of axes, expanded into an ordered list of cases with stable ids.

An axis is declared once, as a field of Sweep with `axis(...)`: its command-line flag (`bench run --FLAG` and
`pytest --attn-FLAG`), how its text is parsed and checked, and its help. Adding one touches that declaration,
the shape (a field of AttentionShape, which carries it into case ids, records, the loader and the report) and
the backends that support it. An axis whose values map one to one onto a shape field is declared with
`shape_field=`, and `cases()` sweeps it with no edit; the axes whose expansion is special (lengths, decode, heads
at fixed d_model) are written out there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.backends import BACKENDS, backends_for, get_backend
from bench.claims import spec as claim_spec
from bench.engine.geometry import Geometry, axis_geometries, model_geometries
from bench.errors import InputError, UsageError
from bench.kinds.axes import axis, duration, one_int, one_int_or_none, one_of, positive_ints_check, seconds, words
from bench.kinds.serving import page_size_check, page_sizes
from bench.problem.case import Case  # re-exported: the engine and its callers name it here
from bench.problem.columns import shape_from_fields
from bench.problem.scores import parse_score
from bench.problem.shapes import (
    DTYPE_ATTRS,
    LENGTHS,
    SCOPES,
    VARIANTS,
    AttentionShape,
    ServingBatch,
    case_mask,
    parse_mask,
    parse_rows,
)
from bench.problem.sparsity import Sparsity
from bench.traces.buckets import MAX_BUCKETS
from bench.traces.schedule import MAX_BATCH_TOKENS, MAX_SEQS, PAGE_SIZE, STEP_MS, Knobs

PHASES = ("prefill", "decode")
PASSES = ("fwd", "fwd+bwd")


def _workload_check(name: str) -> None:
    from bench.traces.requests import source_path

    source_path(name)


def sparsity_labels(text: str) -> tuple[str, ...]:
    """--sparsity's values, each as its label (block:128:1/4 -> block:128:0.25): what case ids and files hold."""
    return tuple(Sparsity.parse(word).label for word in words(text))


@dataclass(frozen=True)
class Sweep:
    """Axes of a sweep. Every combination is a case; decode has its own query and KV lengths."""

    backends: tuple[str, ...] = axis(tuple(b for b in BACKENDS if not BACKENDS[b].opt_in), "backend",
                                     "comma-separated backends, e.g. naive,sdpa-flash (hf-eager, hf-sdpa and hf-flex "
                                     "run only when named)", words, check=lambda name: get_backend(name))
    heads: tuple[int, ...] = axis((8,), "heads", "query heads, e.g. 8 or 8,16", check=positive_ints_check("n_heads"))
    kv_heads: tuple[int, ...] | None = axis((8, 2, 1), "kv-heads", "KV heads, e.g. 8,2,1 (MHA, GQA, MQA); "
                                            "a profile's None means equal to the query heads",
                                            check=positive_ints_check("n_kv_heads"))
    seqs: tuple[int, ...] = axis((256, 512, 1024, 2048), "seq", "prefill sequence lengths",
                                 check=positive_ints_check("seq_q"))
    batches: tuple[int, ...] = axis((1,), "batch", "batch sizes", check=positive_ints_check("batch"),
                                    clears="tokens_per_batch")
    head_dims: tuple[int, ...] = axis((64,), "head-dim", "head dims", check=positive_ints_check("head_dim"),
                                      clears="d_model")
    dtypes: tuple[str, ...] = axis(("fp32",), "dtype", "fp32,bf16,fp16", words, one_of("dtype", DTYPE_ATTRS))
    masks: tuple[str, ...] = axis(("causal",), "mask", "none,causal,window:256,chunk:64 (chunk: Llama-4's chunked "
                                  "local attention)", words, parse_mask)
    phases: tuple[str, ...] = axis(("prefill",), "phase", "prefill,decode", words, one_of("phase", PHASES))
    passes: tuple[str, ...] = axis(("fwd",), "pass", "fwd,fwd+bwd", words, one_of("pass", PASSES))
    decode_q: tuple[int, ...] = axis((1,), "decode-q", "queries per decode step (1; 4 for speculative decoding)",
                                     check=positive_ints_check("decode_q"))
    decode_kv: tuple[int, ...] = axis((1024, 4096, 16384), "decode-kv", "KV-cache lengths for decode",
                                      check=positive_ints_check("decode_kv"))
    scopes: tuple[str, ...] = axis(("attention",), "scope", "attention,layer: time attention alone, and/or the "
                                   "whole layer (W_Q, W_K, W_V, W_O around it; prefill only)", words,
                                   one_of("scope", SCOPES))
    models: tuple[str, ...] | None = axis(None, "model-config", "config.json paths or preset names: sweep these "
                                          "models' attention shapes (Hq, Hkv, D, mask per layer kind) instead of "
                                          "--heads/--kv-heads/--head-dim/--mask", words)
    lengths: tuple[str, ...] | None = axis(None, "lengths", "serving batches: sequence lengths drawn at a fixed "
                                           "total token count, equal,uniform,zipf (prefill; decode contexts), and "
                                           "mixed (prefill chunks beside decode steps, prefill phase)", words,
                                           one_of("lengths", LENGTHS))
    page_sizes: tuple[int | None, ...] | None = axis(None, "page-size", "serving decode: KV-cache page sizes, e.g. "
                                                     "contiguous,16,128 (contexts drawn uniform unless --lengths)",
                                                     page_sizes, page_size_check)
    scores: tuple[str, ...] = axis(("none",), "score", "score variants: none,softcap:50,alibi,sinks (sink logits "
                                   "seeded; see bench.problem.scores)", words, parse_score, shape_field="score")
    sparsities: tuple[str, ...] = axis(("none",), "sparsity", "sparse attention, each at a fixed budget while the "
                                       "lengths vary: none,block:128:0.25,docs:8,global:64+window:256,topk:256 "
                                       "(topk:K:HxD sets the indexer; see bench.problem.sparsity); a backend is "
                                       "offered the kinds its `sparsity` trait lists", sparsity_labels,
                                       shape_field="sparsity")
    variants: tuple[str, ...] | None = axis(None, "variant", "mha,gqa,mqa,mla: the variants at each --heads Hq "
                                            "(MHA Hkv = Hq, GQA the --kv-heads values that group Hq, MQA 1, MLA a "
                                            "latent cache: prefill expanded, decode absorbed, forward only); "
                                            "default: --kv-heads as given", words, one_of("variant", VARIANTS))
    kv_lora_ranks: tuple[int, ...] = axis((256,), "kv-lora-rank", "MLA latent widths (DeepSeek-V3: 512 at head dim "
                                          "128; halved like the default --head-dim 64)",
                                          check=positive_ints_check("kv_lora_rank"))
    rope_dims: tuple[int, ...] = axis((32,), "rope-dim", "MLA shared rotary key widths, added to --head-dim for "
                                      "Q/K (DeepSeek-V3: 64 at head dim 128)", check=positive_ints_check("rope_dim"))
    workloads: tuple[str, ...] | None = axis(None, "workload", "request traces to replay: azure-conv, azure-code "
                                             "(shipped slices of Azure's LLM inference traces), or files (Azure CSV, "
                                             "CSV/JSONL of prompt_tokens,output_tokens[,arrival_s], flashinfer-trace "
                                             "workload JSONL); each is scheduled into server steps, bucketed, and "
                                             "every bucket timed (see bench.traces)", words, check=_workload_check)
    max_batch_tokens: int = axis(MAX_BATCH_TOKENS, "max-batch-tokens", "--workload: the server's token budget per "
                                 f"step (vLLM's max_num_batched_tokens; default {MAX_BATCH_TOKENS})", one_int)
    max_seqs: int = axis(MAX_SEQS, "max-seqs", f"--workload: sequences per step (vLLM's max_num_seqs; default "
                         f"{MAX_SEQS})", one_int)
    prefill_chunk: int | None = axis(None, "prefill-chunk", "--workload: most prompt tokens of one request per step "
                                     "(vLLM's long_prefill_token_threshold; default none: the step's budget)",
                                     one_int_or_none)
    step_ms: float = axis(STEP_MS, "step-ms", f"--workload: the server's step time, the clock requests arrive on "
                          f"(default {STEP_MS:g})", seconds)
    max_buckets: int = axis(MAX_BUCKETS, "buckets", f"--workload: representative batches per phase (default "
                            f"{MAX_BUCKETS}); more buckets, less bucketing error, more cases", one_int)
    case_budget_s: float = axis(1.0, "budget", "seconds of timing per case before it is marked noisy", seconds)
    time_budget_s: float | None = axis(None, "time-budget", "plan the run to this long, e.g. 10m or none: cases "
                                       "that will not fit are recorded skipped (the small shapes of every family "
                                       "run first)", duration)
    case_timeout_s: float | None = axis(None, "case-timeout", "end a case that runs longer, e.g. 5m or none "
                                        "(default: 10x its predicted time, at least 1 minute)", duration)
    d_model: int | None = None  # when set, head_dim = d_model / n_heads (the heads sweep)
    tokens_per_batch: int | None = None  # when set, batch = tokens / seq (GPU sweeps at fixed tokens)
    # More sweeps of the profile, run after this one (a case already swept is not repeated): e.g. the compact
    # heads sweep the default profile needs for the "heads are a free lunch" claim. Axes set by hand drop them.
    also: tuple[Sweep, ...] = ()

    def __post_init__(self) -> None:
        if self.case_budget_s <= 0:
            raise UsageError(f"--budget {self.case_budget_s:g} must be positive")
        for f in axis_fields():
            check = f.metadata["check"]
            values = getattr(self, f.name)
            if check and isinstance(values, tuple):
                for value in values:
                    try:
                        check(value)
                    except InputError as err:  # name the flag, as a parse error does
                        raise type(err)(f"--{f.metadata['flag']}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        """The plain form a results file's header (`axes`) and a launcher's workers get."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sweep:
        """The sweep of `to_dict`'s form (JSON's lists back to tuples); unknown keys are refused, by name."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(f"a sweep does not have {', '.join(unknown)}")

        def value(name: str, v: Any) -> Any:
            if name == "also":
                return tuple(cls.from_dict(s) for s in v)
            return tuple(v) if isinstance(v, list) else v

        return cls(**{k: value(k, v) for k, v in d.items()})

    def with_axes(self, **axes: object) -> Sweep:
        """This sweep with the given axes replaced (None: keep); an axis set by hand drops what derived it."""
        given = {k: v for k, v in axes.items() if v is not None}
        for f in axis_fields():
            if f.name in given and f.metadata["clears"]:
                given[f.metadata["clears"]] = None
        if any(name not in ("case_budget_s", "time_budget_s", "case_timeout_s") for name in given):
            given["also"] = ()  # the user chose the axes: the profile's extra sweeps no longer apply
        return dataclasses.replace(self, **given)


def offered(backend: str, shape: AttentionShape) -> bool:
    """Whether a sweep offers `backend` this shape: every backend a dense one, a sparse one only to the backends whose
    `sparsity` trait lists its kind (so a kernel that declares none is never handed a keep-set)."""
    return get_backend(backend).sparsity_reason(shape.sparsity.kind) is None


def axis_fields() -> list[dataclasses.Field]:
    """The declared axes, in order: each has a flag, a parser, a check and a help text."""
    return [f for f in dataclasses.fields(Sweep) if "flag" in f.metadata]


def from_flags(flags: dict[str, str], **fixed: Any) -> Sweep:
    """The sweep `bench run` would run with these axis flags (a claim spec's `measure`: the cases that answer it,
    defined once), plus fields set directly (its case budget)."""
    by_flag = {f.metadata["flag"]: f for f in axis_fields()}
    unknown = sorted(set(flags) - set(by_flag))
    if unknown:
        raise ValueError(f"not axis flags: {unknown}")
    return Sweep(**{by_flag[k].name: by_flag[k].metadata["parse"](v) for k, v in flags.items()}, **fixed)


# `nox -s bench` (the default profile) plans its cases to this, so that it ends within 10 minutes on any 2-core
# machine, installs, calibration and the report included; `--time-budget none` runs every case.
# 8 minutes gave 533 s on a loaded 2-core AMD, report included, before the install; 15% of it re-measures the
# claims' open conditions after their least sets (bench.engine.decide)
DEFAULT_TIME_BUDGET_S = 420.0

# The sparse profile's budgets: densities 1/4, 1/8, 1/16 as block masks and as packed documents, and 256 tokens per
# query as a window with global tokens and as top-K; each beside the dense case (none)
SPARSE_BUDGETS = ("none", "block:128:0.25", "block:128:0.125", "block:128:0.0625", "docs:4", "docs:8", "docs:16",
                  "global:64+window:192", "topk:256")

PROFILES: dict[str, dict[str, Sweep]] = {
    "cpu": {
        # CI's regression check
        "quick": Sweep(backends=backends_for("cpu"), seqs=(256, 512), phases=("prefill", "decode"),
                       decode_kv=(2048,), case_budget_s=0.4),
        # every backend x MHA/GQA/MQA x 4 lengths x fp32/bf16 x none/causal, plus decode
        "default": Sweep(seqs=(256, 512, 1024, 2048), dtypes=("fp32", "bf16"), masks=("none", "causal"),
                         phases=("prefill", "decode"), decode_kv=(1024, 4096, 16384), case_budget_s=0.6,
                         time_budget_s=DEFAULT_TIME_BUDGET_S,
                         # a compact heads sweep and the layer around attention, so every claim gets a verdict
                         also=(Sweep(backends=("naive", "sdpa-math", "sdpa-flash"), heads=(2, 4, 8, 16, 32),
                                     kv_heads=None, d_model=512, seqs=(1024,), case_budget_s=0.6),
                               Sweep(backends=("naive", "sdpa-flash"), kv_heads=(8,), seqs=(256, 512, 1024, 2048,
                                                                                             4096),
                                     scopes=("attention", "layer"), case_budget_s=0.6),
                               # the sparse claims: a block-sparse kernel and top-K beside dense, over the lengths
                               from_flags(claim_spec("sparse").measure, case_budget_s=0.4),
                               # MLA's absorbed decode at the main sweep's Hq and contexts (its GQA/MQA twins)
                               Sweep(backends=("naive", "sdpa", "flex"), variants=("mla",), phases=("decode",),
                                     decode_kv=(1024, 4096, 16384), case_budget_s=0.4),
                               # paging: a paged decode at two page sizes beside a contiguous cache, for the kernel
                               # that reads pages in place
                               Sweep(backends=("flex",), heads=(8,), kv_heads=(2,), batches=(4,), phases=("decode",),
                                     decode_kv=(4096,), page_sizes=(None, 16, 128), lengths=("uniform",),
                                     case_budget_s=0.2),
                               # variants: each score variant, and a chunk mask, beside plain causal on the fused
                               # kernel that takes them all
                               Sweep(backends=("flex",), kv_heads=(8,), seqs=(512,),
                                     scores=("none", "softcap:50", "alibi", "sinks"), case_budget_s=0.3),
                               Sweep(backends=("flex",), kv_heads=(8,), seqs=(512,), masks=("chunk:64",),
                                     case_budget_s=0.3),
                               # real traffic: a coarse replay of one Azure trace (4 buckets per phase) on two kernels
                               # with a serving layout (flex would compile per bucket), judged against the main sweep's
                               # grid at its geometry
                               Sweep(backends=("naive", "sdpa-flash"), kv_heads=(2,), seqs=(256,),
                                     decode_kv=(1024,), workloads=("azure-conv",), max_buckets=4, case_budget_s=0.2),
                               # transformers' sdpa path beside the torch kernels it calls, at Llama-3-8B's shapes
                               # (unsupported, named, where transformers is not installed): a square prefill and a
                               # one-query decode, where transformers skips its mask for is_causal ...
                               Sweep(backends=("hf-sdpa", "sdpa", "sdpa-flash"), models=("llama-3-8b",), seqs=(1024,),
                                     dtypes=("fp32",), phases=("prefill", "decode"), decode_kv=(4096,),
                                     case_budget_s=0.3),
                               # ... and a chunked prefill (256 queries against a 1,024-token cache, a decode-phase
                               # case), where it builds one (bench.backends.hf.skips_mask)
                               Sweep(backends=("hf-sdpa", "sdpa", "sdpa-flash"), models=("llama-3-8b",),
                                     dtypes=("fp32",), phases=("decode",), decode_q=(256,), decode_kv=(1024,),
                                     case_budget_s=0.3))),
        "heads": Sweep(backends=("naive", "sdpa-math", "sdpa-flash", "flex"), heads=(1, 2, 4, 8, 16, 32),
                       kv_heads=None, d_model=512, seqs=(1024,)),
        # sparse attention at equal budgets: block masks and packed documents at densities 1/4, 1/8, 1/16, a window
        # with global tokens and top-K at 256 tokens per query, beside dense, over the lengths; then decode steps
        # against long caches (DSA's top-2048 at 4k-64k)
        "sparse": Sweep(backends=("naive", "sdpa-flash", "flex", "topk-gather"), kv_heads=(2,),
                        seqs=(1024, 2048, 4096, 8192), sparsities=SPARSE_BUDGETS, case_budget_s=0.4,
                        also=(Sweep(backends=("naive", "sdpa-flash", "flex", "topk-gather"), kv_heads=(2,),
                                    phases=("decode",), decode_kv=(4096, 16384, 65536),
                                    sparsities=("none", "block:128:0.125", "topk:2048"), case_budget_s=0.4),)),
        # MHA/GQA/MQA, then MLA at the same Hq and contexts (its absorbed decode: one latent of 256 + 32)
        "decode": Sweep(phases=("decode",), decode_q=(1, 4), decode_kv=(1024, 4096, 16384),
                        also=(Sweep(variants=("mla",), phases=("decode",), decode_q=(1, 4),
                                    decode_kv=(1024, 4096, 16384)),)),
        # serving batches: ragged prefill (padded, nested, packed) and mixed batches; paged vs contiguous decode
        "serving": Sweep(backends=backends_for("cpu"), heads=(8,), kv_heads=(8,), seqs=(128,), batches=(8,),
                         masks=("none", "causal"),
                         lengths=("equal", "uniform", "zipf", "mixed"), case_budget_s=0.2,
                         also=(Sweep(backends=backends_for("cpu"), heads=(8,), kv_heads=(2,), batches=(4,),
                                     phases=("decode",), decode_kv=(4096,),
                                     page_sizes=(None, 16, 128), lengths=("uniform",), case_budget_s=0.2),)),
        # real traffic: two Azure traces replayed on a vLLM-like server, every bucket on every serving backend, beside
        # the synthetic grid (one sequence: prefill at 256-2048 tokens, decode against 1k-8k) the claim compares with
        "traces": Sweep(backends=("naive", "sdpa", "sdpa-math", "sdpa-flash", "flex"), heads=(8,), kv_heads=(2,),
                        seqs=(256, 512, 1024, 2048), phases=PHASES, decode_kv=(1024, 2048, 4096, 8192),
                        workloads=("azure-conv", "azure-code"), max_buckets=12, case_budget_s=0.2),
        "full": Sweep(kv_heads=(8, 4, 2, 1), seqs=(256, 512, 1024, 2048, 4096), batches=(1, 4), head_dims=(64, 128),
                      dtypes=("fp32", "bf16"), masks=("none", "causal", "window:256"), phases=PHASES,
                      passes=PASSES, decode_q=(1, 4)),
        # `bench gpu-check --dry-run`: the GPU check's steps at a size the test suite can afford
        "gpu-check": Sweep(backends=("naive", "sdpa"), heads=(2,), kv_heads=(1,), seqs=(64,), phases=PHASES,
                           decode_kv=(128,), case_budget_s=0.05,
                           also=(Sweep(backends=("naive", "topk-gather"), heads=(2,), kv_heads=(1,), seqs=(64,),
                                       sparsities=("topk:8",), case_budget_s=0.05),)),
    },
    "cuda": {
        "quick": Sweep(heads=(16,), kv_heads=(16, 4, 1), seqs=(1024, 4096), head_dims=(128,), dtypes=("bf16",),
                       phases=("prefill", "decode"), decode_kv=(32768,), case_budget_s=0.4),
        # 16k tokens per batch, as the FlashAttention papers measure
        "default": Sweep(heads=(16,), kv_heads=(16, 4, 1), seqs=(1024, 2048, 4096, 8192, 16384),
                         tokens_per_batch=16384, head_dims=(64, 128), dtypes=("bf16",), masks=("none", "causal"),
                         phases=("prefill", "decode"), passes=PASSES, decode_kv=(8192, 32768, 131072),
                         case_budget_s=0.5, time_budget_s=2 * DEFAULT_TIME_BUDGET_S,
                         also=(Sweep(heads=(4, 8, 16, 32), kv_heads=None, d_model=2048, seqs=(4096,),
                                                   tokens_per_batch=16384, dtypes=("bf16",), case_budget_s=0.5),
                                             Sweep(backends=("naive", "sdpa", "sdpa-flash"), heads=(16,),
                                                   kv_heads=(16,), head_dims=(128,), seqs=(1024, 4096, 16384),
                                                   tokens_per_batch=16384, dtypes=("bf16",),
                                                   scopes=("attention", "layer"), case_budget_s=0.5),
                                             # the variant claim: each score variant and a chunk mask beside
                                             # plain causal, for the kernels that run them
                                             Sweep(backends=("naive", "sdpa", "flex", "flash-attn"), heads=(16,),
                                                   kv_heads=(4,), head_dims=(128,), seqs=(4096,),
                                                   tokens_per_batch=16384, dtypes=("bf16",),
                                                   masks=("causal", "chunk:1024"),
                                                   scores=("none", "softcap:50", "alibi", "sinks"), case_budget_s=0.5),
                                             # the MLA claim: DeepSeek-V3's latent (512 + 64) at the decode
                                             # sweep's Hq and contexts, beside its GQA/MQA steps at D 128
                                             Sweep(heads=(16,), variants=("mla",), head_dims=(128,),
                                                   kv_lora_ranks=(512,), rope_dims=(64,), dtypes=("bf16",),
                                                   phases=("decode",), decode_kv=(8192, 32768, 131072),
                                                   case_budget_s=0.5),
                                             # the sparse claims: block-sparse and top-K beside dense
                                             Sweep(backends=("sdpa", "flex", "topk-gather"), heads=(16,),
                                                   kv_heads=(4,), head_dims=(128,), dtypes=("bf16",),
                                                   seqs=(4096, 8192, 16384), tokens_per_batch=16384,
                                                   sparsities=("none", "block:128:0.125", "topk:2048"),
                                                   case_budget_s=0.4),
                                             # the paging claim: paged decode beside a contiguous cache
                                             Sweep(heads=(32,), kv_heads=(8,), batches=(16,), head_dims=(128,),
                                                   dtypes=("bf16",), phases=("decode",), decode_kv=(32768,),
                                                   page_sizes=(None, 16, 256), lengths=("uniform",),
                                                   case_budget_s=0.5),
                                             # real traffic: one Azure trace on the serving kernels, beside the
                                             # main sweep's grid at its geometry
                                             Sweep(backends=("naive", "sdpa-flash", "flash-attn"),
                                                   heads=(16,), kv_heads=(4,), head_dims=(128,), dtypes=("bf16",),
                                                   seqs=(1024,), tokens_per_batch=16384, decode_kv=(8192,),
                                                   workloads=("azure-conv",), max_buckets=6, case_budget_s=0.3),
                                             # transformers' sdpa path beside the torch kernels it calls,
                                             # where it skips its mask (a square prefill, a one-query decode) ...
                                             Sweep(backends=("hf-sdpa", "sdpa", "sdpa-flash", "sdpa-cudnn"),
                                                   models=("llama-3-8b",), dtypes=("bf16",), seqs=(4096,),
                                                   tokens_per_batch=16384, phases=("prefill", "decode"),
                                                   decode_kv=(32768,),
                                                   case_budget_s=0.5),
                                             # ... and where it builds one: a chunked prefill (1,024 queries
                                             # against a 4,096-token cache)
                                             Sweep(backends=("hf-sdpa", "sdpa", "sdpa-flash", "sdpa-cudnn"),
                                                   models=("llama-3-8b",), dtypes=("bf16",), phases=("decode",),
                                                   decode_q=(1024,), decode_kv=(4096,), case_budget_s=0.5))),
        "heads": Sweep(heads=(1, 2, 4, 8, 16, 32), kv_heads=None, d_model=2048, seqs=(4096,), dtypes=("bf16",)),
        "sparse": Sweep(backends=("naive", "sdpa", "flex", "topk-gather"), heads=(16,), kv_heads=(4,),
                        head_dims=(128,), dtypes=("bf16",), seqs=(4096, 8192, 16384, 32768),
                        sparsities=SPARSE_BUDGETS, case_budget_s=0.4,
                        also=(Sweep(backends=("naive", "sdpa", "flex", "topk-gather"), heads=(16,), kv_heads=(4,),
                                    head_dims=(128,), dtypes=("bf16",), phases=("decode",),
                                    decode_kv=(8192, 32768, 131072),
                                    sparsities=("none", "block:128:0.125", "topk:2048"), case_budget_s=0.4),)),
        "decode": Sweep(heads=(32,), kv_heads=(32, 8, 1), head_dims=(128,), dtypes=("bf16",), phases=("decode",),
                        decode_q=(1, 4), decode_kv=(8192, 32768, 131072), batches=(1, 8),
                        also=(Sweep(heads=(32,), variants=("mla",), head_dims=(128,), kv_lora_ranks=(512,),
                                    rope_dims=(64,), dtypes=("bf16",), phases=("decode",), decode_q=(1, 4),
                                    decode_kv=(8192, 32768, 131072), batches=(1, 8)),)),
        # 16 sequences sharing 32k tokens; decode at 8k and 32k average contexts, flash-attn's 256-token pages too
        "serving": Sweep(heads=(32,), kv_heads=(8,), seqs=(2048,), batches=(16,), head_dims=(128,), dtypes=("bf16",),
                         masks=("none", "causal"), lengths=("equal", "uniform", "zipf", "mixed"), case_budget_s=0.4,
                         also=(Sweep(heads=(32,), kv_heads=(8,), batches=(16,), head_dims=(128,), dtypes=("bf16",),
                                     phases=("decode",), decode_kv=(8192, 32768), page_sizes=(None, 16, 128, 256),
                                     lengths=("uniform",), case_budget_s=0.4),)),
        # a Llama-3-8B-shaped attention (32 query heads over 8 KV heads, D 128) serving two Azure traces
        "traces": Sweep(heads=(32,), kv_heads=(8,), head_dims=(128,), dtypes=("bf16",), seqs=(1024, 4096, 16384),
                        phases=PHASES, decode_kv=(4096, 32768), workloads=("azure-conv", "azure-code"),
                        case_budget_s=0.3),
        "full": Sweep(heads=(16, 32), kv_heads=(16, 8, 4, 1), seqs=(1024, 2048, 4096, 8192, 16384),
                      tokens_per_batch=16384, head_dims=(64, 128), dtypes=("bf16", "fp16"),
                      masks=("none", "causal", "window:256"), phases=PHASES, passes=PASSES, decode_q=(1, 4),
                      decode_kv=(8192, 32768, 131072)),
        # `bench gpu-check` (about 5 minutes on an H200): every backend x MHA/GQA/MQA x D 64, 128 at 1k and 4k; the
        # published anchors' shapes (D 128, 8k and 16k, none and causal, fwd and fwd+bwd) for SDPA's kernels;
        # decode against KV 4k-128k at batch 1 and 64; sparse at 16k. FlexAttention (a compile per shape) only in
        # the first and the last part.
        "gpu-check": Sweep(heads=(16,), kv_heads=(16, 4, 1), seqs=(1024, 4096), tokens_per_batch=16384,
                           head_dims=(64, 128), dtypes=("bf16",), case_budget_s=0.3,
                           also=(Sweep(backends=("sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"),
                                       heads=(16,), kv_heads=(16, 4), seqs=(8192, 16384), tokens_per_batch=16384,
                                       head_dims=(128,), dtypes=("bf16",), masks=("none", "causal"), passes=PASSES,
                                       case_budget_s=0.3),
                                 Sweep(backends=tuple(b for b in backends_for("cuda") if b != "flex"), heads=(32,),
                                       kv_heads=(32, 8, 1), head_dims=(128,), dtypes=("bf16",), phases=("decode",),
                                       decode_kv=(4096, 32768, 131072), batches=(1, 64), case_budget_s=0.3),
                                 # sparse: flex's block-sparse kernel and the top-K gather beside dense at 16k
                                 Sweep(backends=("sdpa", "flex", "topk-gather"), heads=(16,), kv_heads=(4,),
                                       seqs=(16384,), head_dims=(128,), dtypes=("bf16",),
                                       sparsities=("none", "block:128:0.125", "topk:2048"), case_budget_s=0.3))),
    },
}


def profile(name: str, device: str) -> Sweep:
    try:
        return PROFILES[device][name]
    except KeyError:
        raise UsageError(f"unknown profile {name!r}; known: {', '.join(PROFILES['cpu'])}") from None


def geometries(sweep: Sweep) -> list[Geometry]:
    """The sweep's head geometries: its heads x KV heads (or variants) x head dims, or each model's attention kinds."""
    return model_geometries(sweep.models) if sweep.models else axis_geometries(sweep)


def cases(sweep: Sweep, device: str) -> list[Case]:
    """Every case of the sweep, ordered so that cases sharing a shape are adjacent (one reference each)."""
    out: list[Case] = []
    axes = [(f.metadata["shape_field"], getattr(sweep, f.name)) for f in axis_fields() if f.metadata["shape_field"]]
    for g in geometries(sweep):
        simple = [(name, (g.score,) if name == "score" and g.score else ("none", g.sparsity)
                   if name == "sparsity" and g.sparsity else values) for name, values in axes]
        for dtype, mask_text, *more in itertools.product(sweep.dtypes, g.masks, *(values for _, values in simple)):
            mask = case_mask(mask_text).kind
            # the axes' values are record columns (their text, as the command line gives them): shape_from_fields
            fixed = dict(n_heads=g.n_heads, n_kv_heads=g.n_kv_heads, head_dim=g.head_dim, dtype=dtype, mask=mask_text,
                         model=g.model, **{name: v for (name, _), v in zip(simple, more, strict=True)})
            if g.is_mla:  # attention alone, forward, no score variant or chunk: bench.problem.shapes says why
                if fixed["score"] == "none" and not case_mask(mask_text).variants:
                    out += _mla_cases(sweep, g, fixed, device)
                continue
            if "prefill" in sweep.phases:
                for seq, scope, lengths in itertools.product(sweep.seqs, sweep.scopes, sweep.lengths or (None,)):
                    if lengths is not None and (scope != "attention" or (lengths == "mixed" and mask == "none")):
                        continue  # a serving batch is attention alone; a mixed batch is causal
                    if fixed["sparsity"] != "none" and (scope != "attention" or lengths is not None
                                                        or _keeps_all(g, fixed, seq)):
                        continue  # a sparse case is one attention call
                    for batch in _batches(sweep, seq):
                        shape = shape_from_fields(dict(batch=batch, seq_q=seq, seq_kv=seq, scope=scope,
                                                       lengths=lengths, **fixed))
                        passes = ("fwd",) if lengths else sweep.passes  # serving is inference: forward only
                        out += [Case(b, shape, "prefill", p, device) for p in passes for b in sweep.backends
                                if offered(b, shape)]
            if "decode" in sweep.phases and mask != "none":  # decoding is causal: 'none' would repeat 'causal'
                for sq, kv, batch, page, lengths in itertools.product(sweep.decode_q, sweep.decode_kv, sweep.batches,
                                                                      *_decode_serving(sweep)):
                    if fixed["sparsity"] != "none" and (page is not None or lengths is not None
                                                        or _keeps_all(g, fixed, kv)):
                        continue
                    shape = shape_from_fields(dict(batch=batch, seq_q=sq, seq_kv=kv, lengths=lengths, page_size=page,
                                                   **fixed))  # attention alone
                    out += [Case(b, shape, "decode", "fwd", device) for b in sweep.backends if offered(b, shape)]
    if "decode" in sweep.phases and "prefill" not in sweep.phases and not out:
        raise UsageError("decode needs a causal or window mask")
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise UsageError("the sweep lists the same case twice; check for repeated axis values")
    seen = set(ids)
    for case in trace_cases(sweep, device):
        if case.id not in seen:  # two workloads may share a bucket's batch: one case serves both
            seen.add(case.id)
            out.append(case)
    for part in sweep.also:
        for case in cases(part, device):
            if case.id not in seen:
                seen.add(case.id)
                out.append(case)
    return out


def parts(sweep: Sweep) -> list[Sweep]:
    """The sweep and every sweep it runs `also`, depth first."""
    return [sweep, *(p for part in sweep.also for p in parts(part))]


def models_of(sweep: Sweep) -> list[str]:
    """Every model config a sweep or one of its parts runs, once each."""
    return list(dict.fromkeys(m for part in parts(sweep) for m in part.models or ()))


def replayed(sweep: Sweep) -> dict[str, Sweep]:
    """Every trace a sweep or one of its parts replays, with the part that replays it (its knobs and buckets: the
    first part naming a trace is the one whose schedule the report weighs)."""
    out: dict[str, Sweep] = {}
    for part in parts(sweep):
        for name in part.workloads or ():
            out.setdefault(name, part)
    return out


def knobs(sweep: Sweep) -> Knobs:
    """The replayed server's knobs (--max-batch-tokens, --max-seqs, --prefill-chunk, --step-ms)."""
    return Knobs(sweep.max_batch_tokens, sweep.max_seqs, sweep.prefill_chunk, sweep.step_ms)


def trace_page_size(sweep: Sweep) -> int | None:
    """The replayed server's KV page size: --page-size's one value, else vLLM's 16 (decode batches only: a prefill
    batch's chunks attend to their own contiguous keys here)."""
    if not sweep.page_sizes:
        return PAGE_SIZE
    if len(sweep.page_sizes) > 1:
        raise UsageError("--workload replays one server: give one --page-size (e.g. 16, or contiguous)")
    return sweep.page_sizes[0]


def trace_cases(sweep: Sweep, device: str) -> list[Case]:
    """--workload: every bucket of every trace (bench.traces) at each head geometry, dtype and causal mask, for every
    backend with a serving layout; forward, plain softmax (a model's score variant is left out: serving batches
    take none). After them, the same for each half of the trace's sampled real steps (bench.traces.sample), written
    out exactly: what the report checks the buckets' estimate against."""
    if not sweep.workloads:
        return []
    from bench.backends.base import RAGGED_LAYOUTS
    from bench.traces.replay import replay

    backends = [b for b in sweep.backends if get_backend(b).layout(RAGGED_LAYOUTS)]
    page = trace_page_size(sweep)
    out: list[Case] = []
    checks: list[Case] = []  # after every bucket, so that the buckets' cases keep their order
    for name in sweep.workloads:
        played = replay(name, knobs(sweep), sweep.max_buckets)
        halves = [(c.prefill and ("prefill", c.prefill), c.decode and ("decode", c.decode)) for c in played.checks]
        for g in geometries(sweep):
            for dtype, mask_text in itertools.product(sweep.dtypes, g.masks):
                mask = case_mask(mask_text)
                if g.is_mla or not mask.causal or mask.variants:
                    continue  # a server decodes causally; MLA and chunk masks take no serving batch
                for batches, phase, lengths in [(out, b.phase, b.lengths) for b in played.buckets] + \
                        [(checks, *half) for pair in halves for half in pair if half]:
                    groups = parse_rows(lengths)
                    serving = ServingBatch(lengths, page if phase == "decode" else None)
                    shape = AttentionShape(sum(n for n, _, _ in groups), max(q for _, q, _ in groups),
                                           max(k for _, _, k in groups), g.n_heads, g.n_kv_heads, g.head_dim, dtype,
                                           mask, model=g.model, serving=serving)
                    batches += [Case(backend, shape, phase, "fwd", device) for backend in backends]
    return out + checks


def _mla_cases(sweep: Sweep, g: Geometry, fixed: dict, device: str) -> list[Case]:
    """An MLA geometry's cases: prefill expanded (each --seq, scope attention, fwd), decode absorbed."""
    out: list[Case] = []
    if "prefill" in sweep.phases and "attention" in sweep.scopes and "fwd" in sweep.passes and not sweep.lengths:
        prefill = fixed | g.mla_fields("expanded")
        for seq in sweep.seqs:
            for batch in _batches(sweep, seq):
                if _keeps_all(g, fixed, seq):
                    continue
                shape = shape_from_fields(dict(batch=batch, seq_q=seq, seq_kv=seq, **prefill))
                out += [Case(b, shape, "prefill", "fwd", device) for b in sweep.backends if offered(b, shape)]
    if "decode" in sweep.phases and fixed["mask"] != "none" and not sweep.page_sizes and not sweep.lengths:
        decode = fixed | g.mla_fields("absorbed")
        for sq, kv, batch in itertools.product(sweep.decode_q, sweep.decode_kv, sweep.batches):
            if _keeps_all(g, fixed, kv):
                continue
            shape = shape_from_fields(dict(batch=batch, seq_q=sq, seq_kv=kv, **decode))
            out += [Case(b, shape, "decode", "fwd", device) for b in sweep.backends if offered(b, shape)]
    return out


def _keeps_all(g: Geometry, fixed: dict, seq_kv: int) -> bool:
    """A model's own top-K at a context of no more than K keys: it keeps every key, so the dense case is its case
    there (a --sparsity given by hand with K > Skv is refused instead: bench.problem.sparsity)."""
    return g.sparsity is not None and fixed["sparsity"] == g.sparsity and Sparsity.parse(g.sparsity).k >= seq_kv


def _decode_serving(sweep: Sweep) -> tuple[tuple[int | None, ...], tuple[str | None, ...]]:
    """Decode's page sizes and context distributions: paged caches get their own contexts per sequence (uniform
    unless --lengths), and so does the contiguous cache they are compared with; mixed is a prefill-phase batch."""
    lengths = tuple(x for x in sweep.lengths or () if x != "mixed")
    if sweep.page_sizes:
        return sweep.page_sizes, lengths or ("uniform",)
    return (None,), lengths or (None,)


def _batches(sweep: Sweep, seq: int) -> tuple[int, ...]:
    if sweep.tokens_per_batch:
        return (max(1, sweep.tokens_per_batch // seq),)
    return sweep.batches


def shard(all_cases: list[Case], text: str) -> list[Case]:
    """'K/N' (1-based): the K-th of N shards balanced by predicted cost. Cases are dealt out dearest first, each
    to the shard where that case's backend costs least so far (ties: the least cost overall, then the lower
    shard; equal costs: the earlier case); each shard keeps the sweep's order. The same case list always gives
    the same shards, so `bench merge` can join them. (A stride over the list put every case of one backend in
    one shard: the backends are the inner loop.)"""
    try:
        k_text, n_text = text.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected K/N with integers, e.g. 2/4") from None
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"--shard {text}: K must be between 1 and N (N >= 1)")
    owner = shard_owners(all_cases, n)
    return [c for c, o in zip(all_cases, owner, strict=True) if o == k - 1]


CASE_SETUP_FLOPS = 1e9  # a case's fixed cost (warm-up, reference, timer), so that small cases weigh something


def predicted_cost(case: Case) -> float:
    """What a case is expected to cost: its FLOPs (the layer's for scope=layer) plus a fixed set-up cost."""
    from bench.counts.metrics import attention_flops, layer_flops

    flops = layer_flops if case.kind == "layer" else attention_flops
    return CASE_SETUP_FLOPS + flops(case.shape, case.pass_)


def shard_owners(all_cases: list[Case], n: int) -> list[int]:
    """The 0-based shard of each case: longest-processing-time first over predicted_cost, within each backend
    (backends differ in speed by more than FLOPs tell, so each is split evenly), ties to the lighter shard."""
    costs = [predicted_cost(c) for c in all_cases]
    load = [0.0] * n
    by_backend: dict[str, list[float]] = {}
    owner = [0] * len(all_cases)
    for i in sorted(range(len(all_cases)), key=lambda i: (-costs[i], i)):
        mine = by_backend.setdefault(all_cases[i].backend, [0.0] * n)
        j = min(range(n), key=lambda j: (mine[j], load[j], j))
        owner[i] = j
        mine[j] += costs[i]
        load[j] += costs[i]
    return owner


def sweep_id(selected: list[Case]) -> str:
    """Identifies the case list, so that --resume refuses a file from another sweep."""
    digest = hashlib.sha256("\n".join(c.id for c in selected).encode()).hexdigest()
    return digest[:16]
