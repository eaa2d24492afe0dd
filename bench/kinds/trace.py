"""Real traffic as a sweep (--workload): each request trace replayed (bench.traces) on a server with the knobs of its
axes, its steps bucketed, and every bucket timed as a serving batch (bench.kinds.serving) after the grid's cases,
at each head geometry, dtype and causal mask; then the trace's sampled real steps, written out, that the report
checks the buckets' estimate against. A run records each trace's schedule and weighted buckets (`workloads`), so
the report needs no trace file, and `bench run --plan` says each schedule first. With --prefix-cache BLOCKS, a trace
with block hashes is scheduled with the cache and without it (bench.traces.replay); the two schedules share one set
of buckets, timed once, which the report weighs by each schedule's steps to price the trace's attention both ways.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from bench.backends import get_backend
from bench.errors import UsageError
from bench.kinds.axes import axis, one_int, one_int_or_none, seconds, words
from bench.kinds.expansion import Geometry, Kind
from bench.problem.case import Case
from bench.problem.shapes import AttentionShape, ServingBatch, case_mask, parse_rows
from bench.traces.buckets import MAX_BUCKETS
from bench.traces.schedule import MAX_BATCH_TOKENS, MAX_SEQS, PAGE_SIZE, STEP_MS, Knobs


def cache_blocks(text: str) -> int | None:
    """--prefix-cache: a capacity in blocks (>= 1), or 'none'/'off' for no cache; 0 is refused (a cache of nothing is
    not a way to say none)."""
    if text.strip().lower() in ("none", "off"):
        return None
    n = one_int(text)
    if n < 1:
        raise UsageError(f"{n} blocks cannot hold a prefix; give a capacity of at least 1 block, or none for no cache")
    return n


def _workload_check(name: str) -> None:
    from bench.traces.requests import source_path

    source_path(name)


@dataclass(frozen=True)
class TraceAxes:
    workloads: tuple[str, ...] | None = axis(None, "workload", "request traces to replay: azure-conv, azure-code "
                                             "(shipped slices of Azure's LLM inference traces), mooncake-conv, "
                                             "mooncake-synthetic (Mooncake's, with prefix block hashes), or files "
                                             "(Azure CSV, CSV/JSONL of prompt_tokens,output_tokens[,arrival_s], "
                                             "Mooncake or Qwen-Bailian JSONL, BurstGPT CSV, flashinfer-trace "
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
    prefix_cache: int | None = axis(None, "prefix-cache", "--workload: the server's prefix cache, in blocks of the "
                                    "trace's hashes (Mooncake 512 tokens, Bailian 16), least recently used evicted; "
                                    "a trace with block hashes is then replayed with and without it (default none: "
                                    "no cache; 0 is refused)", cache_blocks)
    max_buckets: int = axis(MAX_BUCKETS, "buckets", f"--workload: representative batches per phase (default "
                            f"{MAX_BUCKETS}); more buckets, less bucketing error, more cases", one_int)


def replayed(parts: list[Any]) -> dict[str, Any]:
    """Every trace a sweep's parts replay, with the part that replays it (its knobs and buckets: the first part
    naming a trace is the one whose schedule the report weighs)."""
    out: dict[str, Any] = {}
    for part in parts:
        for name in part.workloads or ():
            out.setdefault(name, part)
    return out


def knobs(sweep: Any) -> Knobs:
    """The replayed server's knobs (--max-batch-tokens, --max-seqs, --prefill-chunk, --step-ms, --prefix-cache)."""
    return Knobs(sweep.max_batch_tokens, sweep.max_seqs, sweep.prefill_chunk, sweep.step_ms, sweep.prefix_cache)


def trace_page_size(sweep: Any) -> int | None:
    """The replayed server's KV page size: --page-size's one value, else vLLM's 16 (decode batches only: a prefill
    batch's chunks attend to their own contiguous keys here)."""
    if not sweep.page_sizes:
        return PAGE_SIZE
    if len(sweep.page_sizes) > 1:
        raise UsageError("--workload replays one server: give one --page-size (e.g. 16, or contiguous)")
    return sweep.page_sizes[0]


def trace_cases(sweep: Any, device: str, geometries: list[Geometry]) -> list[Case]:
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
        for g in geometries:
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


def workload_facts(parts: list[Any]) -> dict[str, Any] | None:
    """Each replayed trace's requests, schedule and weighted buckets, so the report weighs the buckets' times
    without the trace file."""
    traces = replayed(parts)
    if not traces:
        return None
    from bench.traces.replay import replay

    return {name: replay(name, knobs(part), part.max_buckets).to_dict() | {"page_size": trace_page_size(part)}
            for name, part in traces.items()}


class TraceKind(Kind):
    """Not a kind of case (its cases are serving batches): its axes, its cases after the grid, its facts."""

    name = "trace"
    axes = TraceAxes

    def more_cases(self, sweep: Any, device: str, geometries: list[Geometry]) -> list[Case]:
        return trace_cases(sweep, device, geometries)

    def facts(self, parts: list[Any]) -> dict[str, Any]:
        workloads = workload_facts(parts)
        return {"workloads": workloads} if workloads else {}

    def plan_lines(self, parts: list[Any]) -> list[str]:
        """Each trace's schedule: requests, steps, distinct step shapes, tokens, buckets."""
        from bench.traces.replay import replay

        return [replay(name, knobs(part), part.max_buckets).summary() for name, part in replayed(parts).items()]
