"""The profiles: the named sweeps `bench run --profile NAME` runs, per device, and the default profile's time
budget. Data that names kinds (their axes and the claims each part serves), kept out of the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.backends import backends_for
from bench.claims import spec as claim_spec
from bench.errors import UsageError
from bench.kinds.dense import PASSES, PHASES
from bench.plan.sweep import Sweep, from_flags

# `bench run --profile`'s help
PROFILE_HELP = ("quick | default | heads | linear | prefix | decode | serving | sparse | traces | spec | full "
                "(default: default; traces with --workload)")

# `nox -s bench` (the default profile) plans its cases to this, so that it ends within 10 minutes on any 2-core
# machine, installs, calibration and the report included; `--time-budget none` runs every case.
# 8 minutes gave 533 s on a loaded 2-core AMD, report included, before the install; a third of it re-measures
# the claims' open conditions after their least sets (bench.engine.decide)
DEFAULT_TIME_BUDGET_S = 420.0

# The sparse profile's budgets: densities 1/4, 1/8, 1/16 as block masks and as packed documents, and 256 tokens per
# query as a window with global tokens and as top-K; each beside the dense case (none)
SPARSE_BUDGETS = ("none", "block:128:0.25", "block:128:0.125", "block:128:0.0625", "docs:4", "docs:8", "docs:16",
                  "global:64+window:192", "topk:256")

# the linear profiles' backends and methods, and the CUDA default's part for the linear claims (fla's kernels beside
# the fused dense ones, at 16 heads of D 128 in bf16)
LINEAR_CPU = ("naive", "sdpa-flash", "hf-gdn", "torch-linear", "hf-mamba2", "hf-kda")
# transformers' KDA prefill steps through each chunk's rows in Python (about 1 GFLOP/s here: 48 s a case at 8,192
# tokens), so the linear profile prefills it at D 64 up to 4,096 tokens only
LINEAR_GPU = ("sdpa-cudnn", "flash-attn", "fla-gdn", "hf-gdn")
LINEAR_METHODS = ("none", "gdn:64", "linear:64", "mamba2:64", "kda:64")  # labels: a Sweep holds parsed values
LINEAR_CUDA_CLAIMS = (
    Sweep(backends=("sdpa-cudnn", "flash-attn", "fla-gdn"), heads=(16,), kv_heads=(16,), head_dims=(128,),
          dtypes=("bf16",), masks=("causal",), seqs=(1024, 4096, 16384), tokens_per_batch=16384,
          phases=("prefill",), linears=("none", "gdn:64"), case_budget_s=0.3),
    Sweep(backends=("sdpa-cudnn", "flash-attn", "fla-gdn"), heads=(16,), kv_heads=(16,), head_dims=(128,),
          dtypes=("bf16",), masks=("causal",), phases=("decode",), decode_q=(1,), decode_kv=(8192, 32768, 131072),
          linears=("none", "gdn:64"), case_budget_s=0.3))

# shared-prefix batches (bench.kinds.prefix): plain attention on the fused and the textbook kernels against cascade.
# CPU: 8 query heads over 2 KV heads at D 64 in fp32 (a 16K prefix at batch 32 is 0.5 GB of plain K/V), decode steps
# over P 512-16K x B 1-32 after a 128-token suffix, then the suffixes' prefill (256 tokens) at fewer points. CUDA:
# LLaMA-2-7B's attention (32 heads, D 128, bf16) at FlashInfer's prefixes and batches (plain may run out of memory
# at B 128 x 32K: 69 GB of copies of one prefix, which is the point of the cascade)
PREFIX_CPU = ("naive", "sdpa-flash", "cascade-naive", "cascade-sdpa")
PREFIX_GPU = ("sdpa", "sdpa-cudnn", "flex", "cascade-flex", "flashinfer-cascade")
PREFIX_CUDA_CLAIM = Sweep(backends=("sdpa", "cascade-flex", "flashinfer-cascade"), heads=(32,), kv_heads=(32,),
                          head_dims=(128,), dtypes=("bf16",), masks=("causal",), phases=("decode",), decode_q=(1,),
                          prefixes=(4096, 32768), suffixes=(128,), batches=(1, 16), case_budget_s=0.3)

# speculative decoding's verification (bench.kinds.draft): chains of 2-128 tokens and the engines' default trees
# (bench.problem.draft.PRESETS), each beside the one-query decode step ("none")
SPEC_DRAFTS = ("none", "chain:2", "chain:4", "chain:8", "chain:16", "chain:32", "chain:64", "chain:128", "sglang",
               "eagle", "eagle2", "medusa")
# the default profile's least of it: two chains around where a CPU's step turns compute-bound, and Medusa's tree (its
# room is what the other claims leave of the budget)
DEFAULT_DRAFTS = ("none", "chain:16", "chain:64", "medusa")
# the CUDA default's: torch's automatic SDPA (a tree as a boolean mask) and flash-attn (chains), at Llama-3-8B's
# attention over a 32K cache; flex's compile per draft size is the spec profile's
SPEC_CUDA = Sweep(backends=("sdpa", "flash-attn"), heads=(32,), kv_heads=(8,), head_dims=(128,),
                  dtypes=("bf16",), masks=("causal",), phases=("decode",), decode_q=(1,), decode_kv=(32768,),
                  drafts=SPEC_DRAFTS, case_budget_s=0.3)

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
                                     case_budget_s=0.3),
                               # the linear claims: gated DeltaNet beside the fused dense kernel, prefill over the
                               # lengths and one decode step over the contexts
                               from_flags(claim_spec("linear").measure, case_budget_s=0.3),
                               from_flags(claim_spec("linear-decode").measure, case_budget_s=0.3),
                               # the cascade claim: torch's fused CPU kernel plain and by cascade, decode steps of a
                               # shared-prefix batch at two prefixes and two batches
                               from_flags(claim_spec("cascade").measure, case_budget_s=0.3),
                               # the verification claim: torch's automatic SDPA verifying chains and the engines'
                               # trees over a 16K cache, beside its one-query step
                               Sweep(backends=("sdpa",), heads=(8,), kv_heads=(2,), dtypes=("fp32",),
                                     masks=("causal",), phases=("decode",), decode_q=(1,), decode_kv=(16384,),
                                     drafts=DEFAULT_DRAFTS, case_budget_s=0.3))),
        "heads": Sweep(backends=("naive", "sdpa-math", "sdpa-flash", "flex"), heads=(1, 2, 4, 8, 16, 32),
                       kv_heads=None, d_model=512, seqs=(1024,)),
        # linear attention: gated DeltaNet, Mamba-2's SSD, KDA (transformers' torch paths) and plain linear attention
        # beside the fused and the textbook dense kernels, MHA and Qwen3-Next's grouping (fewer q/k heads), D 64 and
        # 128, prefill over 512-8192 tokens and one decode step over 1k-32k contexts; naive's four 8,192-token
        # prefills take a third of its time
        "linear": Sweep(backends=LINEAR_CPU[:-1], heads=(8,), kv_heads=(8, 2), head_dims=(64, 128),
                        dtypes=("fp32",), masks=("causal",), seqs=(512, 1024, 2048, 4096, 8192), phases=("prefill",),
                        linears=LINEAR_METHODS[:-1], case_budget_s=0.3,
                        also=(Sweep(backends=("hf-kda",), heads=(8,), kv_heads=(2,), head_dims=(64,), dtypes=("fp32",),
                                    masks=("causal",), seqs=(512, 1024, 2048, 4096), phases=("prefill",),
                                    linears=("kda:64",), case_budget_s=0.3),
                              Sweep(backends=LINEAR_CPU, heads=(8,), kv_heads=(8, 2), head_dims=(64, 128),
                                    dtypes=("fp32",), masks=("causal",), phases=("decode",), decode_q=(1,),
                                    decode_kv=(1024, 4096, 16384, 32768), linears=LINEAR_METHODS,
                                    case_budget_s=0.2),)),
        # shared-prefix batches (145 s on a quiet 2-core AMD EPYC): decode P x B, then the suffixes' prefill
        "prefix": Sweep(backends=PREFIX_CPU, heads=(8,), kv_heads=(2,), head_dims=(64,), dtypes=("fp32",),
                        masks=("causal",), phases=("decode",), decode_q=(1,), prefixes=(512, 2048, 8192, 16384),
                        suffixes=(128,), batches=(1, 4, 16, 32), case_budget_s=0.3,
                        also=(Sweep(backends=PREFIX_CPU, heads=(8,), kv_heads=(2,), head_dims=(64,),
                                    dtypes=("fp32",), masks=("causal",), phases=("prefill",),
                                    prefixes=(512, 2048, 8192), suffixes=(256,), batches=(1, 8), case_budget_s=0.3),)),
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
                        workloads=("azure-conv", "azure-code"), max_buckets=12, case_budget_s=0.2,
                        # a trace that reuses prefixes, replayed with and without a prefix cache of 16,384 blocks, at
                        # a small attention (its 60k-token contexts) and a 512-token step budget so naive fits
                        also=(Sweep(backends=("naive", "sdpa-flash"), heads=(2,), kv_heads=(1,), head_dims=(32,),
                                    seqs=(64,), phases=PHASES, decode_kv=(128,), workloads=("mooncake-conv",),
                                    prefix_cache=16384, max_batch_tokens=512, max_buckets=3, case_budget_s=0.05),)),
        # speculative decoding's verification: chains of 1-128 tokens and the engines' trees over caches of 1K-32K at
        # batch 1-16, on the textbook kernel and each of torch's (SDPA's automatic choice and its forced kernels),
        # then FlexAttention (a compile per shape) at the longest cache
        "spec": Sweep(backends=("naive", "sdpa", "sdpa-math", "sdpa-flash"), heads=(8,), kv_heads=(2,),
                      head_dims=(64,), dtypes=("fp32",), masks=("causal",), phases=("decode",), decode_q=(1,),
                      decode_kv=(1024, 4096, 16384, 32768), batches=(1, 4, 16), drafts=SPEC_DRAFTS,
                      case_budget_s=0.2,
                      also=(Sweep(backends=("flex",), heads=(8,), kv_heads=(2,), head_dims=(64,), dtypes=("fp32",),
                                  masks=("causal",), phases=("decode",), decode_q=(1,), decode_kv=(32768,),
                                  drafts=SPEC_DRAFTS, case_budget_s=0.2),)),
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
                                                   decode_q=(1024,), decode_kv=(4096,), case_budget_s=0.5),
                                             # the linear claims: fla's gated DeltaNet kernels beside the dense
                                             # ones, prefill 1K-16K and one decode step over 8K-128K contexts
                                             *LINEAR_CUDA_CLAIMS,
                                             # the cascade claim: a shared prefix at LLaMA-2-7B's attention
                                             PREFIX_CUDA_CLAIM,
                                             # the verification claim: chains and trees over a 32K cache at
                                             # Llama-3-8B's attention
                                             SPEC_CUDA)),
        "heads": Sweep(heads=(1, 2, 4, 8, 16, 32), kv_heads=None, d_model=2048, seqs=(4096,), dtypes=("bf16",)),
        # linear attention: fla's chunk and recurrent gated DeltaNet kernels beside cuDNN's and FlashAttention-2's
        # attention at D 128, bf16, prefill 1K-32K (flash-linear-attention's published comparison) and decode
        "linear": Sweep(backends=LINEAR_GPU, heads=(16,), kv_heads=(16, 4), head_dims=(128,), dtypes=("bf16",),
                        masks=("causal",), seqs=(1024, 2048, 4096, 8192, 16384, 32768), phases=("prefill",),
                        linears=("none", "gdn:64"), case_budget_s=0.3,
                        also=(Sweep(backends=LINEAR_GPU, heads=(16,), kv_heads=(16, 4), head_dims=(128,),
                                    dtypes=("bf16",), masks=("causal",), phases=("decode",), decode_q=(1,),
                                    decode_kv=(8192, 32768, 131072), linears=("none", "gdn:64"), case_budget_s=0.3),)),
        # shared-prefix batches at LLaMA-2-7B's attention: FlashInfer's prefixes (to 32K) and batches (to 128), decode
        # after suffixes of 128 and 256 (the plain kernels over every request's whole context; cascade-flex)
        "prefix": Sweep(backends=PREFIX_GPU, heads=(32,), kv_heads=(32,), head_dims=(128,), dtypes=("bf16",),
                        masks=("causal",), phases=("decode",), decode_q=(1,), prefixes=(1024, 4096, 16384, 32768),
                        suffixes=(128, 256), batches=(1, 8, 32, 128), case_budget_s=0.3),
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
        # speculative decoding's verification at Llama-3-8B's attention: chains of 1-128 tokens and the engines' trees
        # over caches of 1K-32K at batch 1-16, on every SDPA kernel (which take a tree's mask is the finding), flex
        # and flash-attn (chains only)
        "spec": Sweep(backends=("naive", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "flex",
                                "flash-attn"), heads=(32,), kv_heads=(8,), head_dims=(128,), dtypes=("bf16",),
                      masks=("causal",), phases=("decode",), decode_q=(1,), decode_kv=(1024, 4096, 16384, 32768),
                      batches=(1, 4, 16), drafts=SPEC_DRAFTS, case_budget_s=0.3),
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
                                       sparsities=("none", "block:128:0.125", "topk:2048"), case_budget_s=0.3),
                                 # a chain and Medusa's tree verified on every SDPA kernel (which take a tree's
                                 # mask on CUDA), flex's BlockMask and flash-attn (the chain)
                                 Sweep(backends=("sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn",
                                                 "flex", "flash-attn"), heads=(32,), kv_heads=(8,), head_dims=(128,),
                                       dtypes=("bf16",), masks=("causal",), phases=("decode",), decode_q=(1,),
                                       decode_kv=(32768,), drafts=("none", "chain:8", "medusa"),
                                       case_budget_s=0.3))),
    },
}


def profile(name: str, device: str) -> Sweep:
    try:
        return PROFILES[device][name]
    except KeyError:
        raise UsageError(f"unknown profile {name!r}; known: {', '.join(PROFILES['cpu'])}") from None


def default_profile(axes: Mapping[str, Any]) -> str:
    """The profile a run without --profile sweeps from: traces when it replays a --workload, else default."""
    return "traces" if axes.get("workloads") else "default"
