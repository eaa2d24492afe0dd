"""Every claim a report judges, in one place: its words, its thresholds, the command that measures it, the
planner's question that funds its cases, and the judge that reads them.

One spec per claim (CLAIMS, in report order). Three parts read it and define none of it themselves:
- the planner (bench.engine.questions): a question funds the least set of cases its claims need, with the
  thresholds here (head counts, lengths, spans), and a plan without those cases names `command`;
- the report (bench.report.claims): each judge prints `text`, applies the thresholds here and names `command`;
- `--plan` and the reference (bench/REFERENCE.md) print the texts and commands.
A new claim is one spec here, its judge (a function `(frame, run) -> Verdict`, named "module:function" so that this
module imports no pandas), and, when the run's cases do not answer it already, a question in the planner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# -- thresholds: each defined here once --------------------------------------------------------------------------
HEADS_TOLERANCE = 1.5  # heads are "free" when time across head counts stays within this factor
MIN_HEADS = 4  # head counts that make a sweep: fewer cannot tell a trend from two configurations
QUADRATIC_MIN, LINEAR_MAX = 1.7, 1.3  # fitted memory exponents that count as ~S² and ~S
MEMORY_SPAN = 4  # lengths spanning at least this factor tell S from S²
DECODE_SPEEDUP = (2.0, 4.0)  # "GQA/MQA speed up decoding 2–4×"
MIN_KV_LENGTHS = 3  # a decode speedup short of the claim is only a finding over this many KV lengths
NEAR = 50.0  # % of a ceiling from which a decode step counts as held by that ceiling
ON_CHIP = 100.0  # % of the read-only ceiling above which a KV cache is served from on-chip caches, not memory
KV_WITHIN = 0.02  # a GQA/MQA cache shrinks "by Hq/Hkv" when its MHA twin's bytes over its own are within 2% of Hq/Hkv
# (bytes counted, not timed: the slack is for a few bytes a cache may keep beside K and V, not for noise)
DOMINANT = 0.5  # attention "dominates" the layer when it takes at least this share of the layer's time
MIN_LAYER_LENGTHS, LAYER_SPAN = 3, 4  # "does not hold" needs this many lengths over this span, the share not rising
RISING = 0.2  # attention's time over the rest's, fitted as ∝ S^k: k above this is a share still on its way up
PAGING_WITHIN = 1.3  # a paged decode step within this factor of a contiguous one (vLLM measured 20–26% slower)
VARIANTS_WITHIN = 1.3  # score and mask variants within this factor of plain causal (attention-gym's score_mod
# overheads are of this order)
SPARSE_BEATS, SPARSE_LOSES = 0.95, 1.05  # a sparse method's cost over the best dense kernel's: beats / loses
MIN_SPARSE_LENGTHS, SPARSE_SPAN = 3, 4  # "sparse never wins" is a finding over this many lengths spanning this factor
IDEAL_SHARE = 0.5  # "within 2× of the ideal speedup 1/density"
AUTO_WITHIN = 1.10  # torch's automatic SDPA choice within 10% of the fastest forced kernel
WRAPPER_WITHIN = 1.2  # transformers' paths within this factor of the torch kernels they call
TRACE_CLOSE = 1.05  # two backends within 5% on a trace: it cannot tell them apart
TIED = 1.05  # transformers' default implementation within this factor of the fastest is tied with it (the timings'
# own noise on a shared machine), so the advice keeps the default


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    text: str  # the claim, as the report prints it
    judge: str  # "module:function", a function (frame, run) -> bench.report.verdict.Verdict
    question: str | None  # the planner's question that funds its cases; None: no case of a sweep answers it
    measure: dict[str, str] = field(default_factory=dict)  # `bench run`'s options (flag -> value) that measure it

    @property
    def command(self) -> str:
        """The command that measures it on its own."""
        return self.command_with()

    def command_with(self, **flags: str) -> str:
        """The command with some options changed or added (`seq="4096,8192"` sets --seq)."""
        options = {**self.measure, **{k.replace("_", "-"): v for k, v in flags.items()}}
        return " ".join(["python -m bench run", *(f"--{k} {v}" for k, v in options.items())])


PREFILL = {"dtype": "fp32", "mask": "causal", "phase": "prefill"}
# the least of both sparse claims (`--profile sparse` measures every budget, in about half an hour on 2 cores)
# (the default profile runs exactly these: bench.engine.sweeps builds its sparse part from this spec)
SPARSE = {"backend": "sdpa-flash,flex,topk-gather", "kv-heads": "2", "seq": "512,1024,2048,4096",
          "sparsity": "none,block:128:0.125,topk:256", **PREFILL}
DECODE = {"backend": "naive,sdpa", "kv-heads": "8,2,1", "dtype": "fp32", "mask": "causal", "phase": "decode",
          "decode-kv": "1024,4096,16384"}

CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec("heads", "Heads are a free lunch: at fixed d_model, more heads cost about the same time",
              "bench.report.claims.heads:heads_free_lunch", "heads",
              {"profile": "heads", "backend": "naive,sdpa-flash"}),
    ClaimSpec("memory", "The naive score matrix costs O(S²) memory; flash-style kernels cost O(S)",
              "bench.report.claims.memory:memory_scaling", "scaling",
              {"backend": "naive,sdpa", "kv-heads": "8", "seq": "256,512,1024,2048", **PREFILL}),
    ClaimSpec("kv", "GQA/MQA shrink the KV cache by Hq/Hkv", "bench.report.claims.kv_cache:kv_cache_shrink", "kv",
              {"profile": "quick"}),  # any run with transformers installed: its caches are measured at the start
    ClaimSpec("fused-decode", f"GQA/MQA speed up decoding {DECODE_SPEEDUP[0]:g}–{DECODE_SPEEDUP[1]:g}× (fused kernels)",
              "bench.report.claims.decode:fused_decode_speedup", "decode", DECODE),
    ClaimSpec("expanding-decode",
              f"GQA/MQA speed up decoding {DECODE_SPEEDUP[0]:g}–{DECODE_SPEEDUP[1]:g}× (kernels that expand K/V to Hq "
              "heads)", "bench.report.claims.decode:expanding_decode_speedup", "decode", DECODE),
    ClaimSpec("mla", "MLA decodes at least as fast as GQA/MQA (one latent read for all heads)",
              "bench.report.claims.decode:mla_decode_step", "mla",
              {"backend": "naive,sdpa,flex", "variant": "gqa,mqa,mla", "dtype": "fp32", "mask": "causal",
               "phase": "decode", "decode-kv": "4096,16384"}),
    ClaimSpec("layer", "Attention dominates the layer at long sequence lengths",
              "bench.report.layer_share:attention_dominates", "layer",
              {"backend": "naive,sdpa-flash", "kv-heads": "8", "seq": "256,512,1024,2048,4096",
               "scope": "attention,layer", **PREFILL}),
    ClaimSpec("paging", f"Paging the KV cache costs little: a paged decode step within {PAGING_WITHIN:g}× of a "
              "contiguous one (vLLM: its paged kernel 20–26% slower)", "bench.report.serving:paging_cost", "paging",
              {"profile": "serving", "lengths": "uniform", "phase": "decode", "page-size": "contiguous,16,128"}),
    ClaimSpec("variants", f"Fused kernels that take every variant run score and mask variants within "
              f"{VARIANTS_WITHIN:g}× of their plain causal time", "bench.report.variant_cost:variants_within",
              "variants", {"backend": "naive,sdpa,flex", "kv-heads": "8", "seq": "512", "mask": "causal,chunk:64",
                           "score": "none,softcap:50,alibi,sinks", "dtype": "fp32", "phase": "prefill"}),
    ClaimSpec("sparse", "Sparse attention beats the best dense kernel from some length S* at its budget",
              "bench.report.sparse_cost:sparse_crossover", "sparse", SPARSE),
    ClaimSpec("sparse-ideal", f"A sparse kernel gets within {1 / IDEAL_SHARE:g}× of the ideal speedup 1/density over "
              "its dense run", "bench.report.sparse_cost:sparse_speedup", "sparse-ideal", SPARSE),
    ClaimSpec("trace", "The backend fastest on the synthetic grid serves real traffic (a replayed trace) fastest",
              "bench.report.traces:grid_vs_trace", "trace",
              {"backend": "naive,sdpa-flash", "kv-heads": "2", "workload": "azure-conv", "buckets": "4"}),
    ClaimSpec("auto-choice", f"torch's automatic SDPA choice is within {AUTO_WITHIN - 1:.0%} of the fastest forced "
              "kernel", "bench.report.claims.auto_choice:auto_choice", None,
              {"backend": "sdpa,sdpa-math,sdpa-flash"}),
    ClaimSpec("wrapper", f"transformers' attention paths run within {WRAPPER_WITHIN:g}× of the torch kernels they call "
              "(its sdpa path: torch SDPA's)", "bench.report.claims.wrapper_cost:wrapper_cost", "wrapper",
              # a square prefill and a one-query decode, where transformers' sdpa path skips its mask, and a chunked
              # prefill (256 queries against a 1,024-token cache), where every path builds one
              {"backend": "hf-eager,naive,hf-sdpa,sdpa,hf-flex,flex", "model-config": "llama-3-8b", "dtype": "fp32",
               "seq": "1024", "phase": "prefill,decode", "decode-q": "1,256", "decode-kv": "1024"}),
)
BY_KEY = {spec.key: spec for spec in CLAIMS}


def spec(key: str) -> ClaimSpec:
    """The spec of one claim, by key (a KeyError names the known keys)."""
    try:
        return BY_KEY[key]
    except KeyError:
        raise KeyError(f"no claim {key!r}; the claims are {', '.join(BY_KEY)}") from None


def of_question(question: str) -> tuple[ClaimSpec, ...]:
    """The claims a planner question funds."""
    return tuple(s for s in CLAIMS if s.question == question)
