"""The Sweep: a run's axes, every one declared once with `axis(...)` (bench.kinds.axes): its command-line flag
(`bench run --FLAG` and `pytest --attn-FLAG`), how its text is parsed and checked, and its help. bench.engine.sweeps
expands a sweep into cases; bench.profiles names the sweeps a profile runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.backends import BACKENDS, get_backend
from bench.errors import InputError, UsageError
from bench.kinds.axes import axis, duration, one_int, one_int_or_none, one_of, positive_ints_check, seconds, words
from bench.kinds.serving import page_size_check, page_sizes
from bench.problem.scores import parse_score
from bench.problem.shapes import DTYPE_ATTRS, LENGTHS, SCOPES, VARIANTS, parse_mask
from bench.problem.sparsity import Sparsity
from bench.traces.buckets import MAX_BUCKETS
from bench.traces.schedule import MAX_BATCH_TOKENS, MAX_SEQS, STEP_MS

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
