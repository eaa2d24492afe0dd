"""Sweeps expanded into an ordered list of cases with stable ids; the list sharded and identified.

The axes are the Sweep's (bench.engine.sweep); the profiles are bench.profiles. An axis whose values map one to one
onto a shape field is declared with `shape_field=`, and `cases()` sweeps it with no edit; the axes whose expansion is
special (lengths, decode, heads at fixed d_model) are written out there.
"""

from __future__ import annotations

import hashlib
import itertools

from bench.backends import get_backend
from bench.engine.geometry import Geometry, axis_geometries, model_geometries
from bench.engine.sweep import PASSES, PHASES, Sweep, axis_fields, from_flags, sparsity_labels
from bench.errors import UsageError
from bench.problem.case import Case  # re-exported: the engine and its callers name it here
from bench.problem.columns import shape_from_fields
from bench.problem.shapes import AttentionShape, ServingBatch, case_mask, parse_rows
from bench.problem.sparsity import Sparsity
from bench.profiles import PROFILES, profile  # re-exported: bench.engine.agenda names them here
from bench.traces.schedule import PAGE_SIZE, Knobs

__all__ = ["PASSES", "PHASES", "PROFILES", "Case", "Sweep", "axis_fields", "from_flags", "profile", "sparsity_labels"]


def offered(backend: str, shape: AttentionShape) -> bool:
    """Whether a sweep offers `backend` this shape: every backend a dense one, a sparse one only to the backends whose
    `sparsity` trait lists its kind (so a kernel that declares none is never handed a keep-set)."""
    return get_backend(backend).sparsity_reason(shape.sparsity.kind) is None



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

