"""The questions a run answers, and the least set of its cases that answers each.

A question funds the claims whose spec (bench.claims) names it, and the figures it lists; their thresholds are
the specs' (MIN_HEADS, MIN_KV_LENGTHS, DOMINANT, ...), never defined here. Each says which of the plan's cases
speak to it (`picks`) and which of those are the least that answers it (`least`):
- heads:   >= MIN_HEADS head counts at one d_model, for the textbook backend and one fused kernel;
- scaling: the throughput and latency figures and the memory claim: >= MIN_LENGTHS lengths spanning >= LENGTH_SPAN x,
           causal MHA, for the textbook backend and the fused kernel of each dtype;
- decode:  the decode figure and both decode claims: >= MIN_KV_LENGTHS KV lengths for each of MHA, GQA and MQA, for
           one expanding and one fused kernel;
- mla:     MLA's absorbed decode beside GQA/MQA steps of the same Hq and context at MLA's value head dim;
- layer:   both scopes at every length up to the first one where the cost model says attention passes DOMINANT of
           the layer on this machine (at least MIN_LAYER_LENGTHS lengths);
- kv:      the KV-cache claim, from caches allocated at the run's start (no case needed);
- paging:  serving decode steps, paged at each page size and contiguous, over the same drawn contexts;
- variants: each score and chunk variant beside its plain causal twin (same backend and shape);
- sparse:  each sparse kernel's cases at one budget over >= MIN_SPARSE_LENGTHS lengths spanning >= SPARSE_SPAN x, with
           the dense cases of the same shapes (its own and the fused kernels');
- sparse-ideal: each sparse kernel at the longest length of one budget beside its dense run (a kernel that runs only
           sparse attention: beside the fused kernels').
A plan without a question's cases names its claim's command (the spec's). The time budget's planner
(bench.engine.budget) funds every question's least first, then the rest of what the questions pick (depth), then
everything else (breadth). A dtype the CPU emulates (calibration's `emulated`) is measured at one representative
shape per question: its other cases would spend the budget on missing hardware.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.backends import BACKENDS, get_backend
from bench.claims import (
    DOMINANT,
    MIN_HEADS,
    MIN_KV_LENGTHS,
    MIN_LAYER_LENGTHS,
    MIN_SPARSE_LENGTHS,
    SPARSE_SPAN,
    ClaimSpec,
    of_question,
)
from bench.counts.metrics import projection_flops
from bench.engine.sweeps import Case
from bench.problem.shapes import DENSE
from bench.results.meta import Calibration

# the throughput and latency figures draw a scaling line over this many lengths spanning this factor (the memory
# claim, which the same cases answer, needs MEMORY_SPAN <= LENGTH_SPAN)
MIN_LENGTHS, LENGTH_SPAN = 4, 8


@dataclass(frozen=True)
class Context:
    """What choosing a question's cases may read: the device, each case's predicted seconds, the dtypes this CPU
    emulates, and the run's calibration (for the layer's crossing length)."""

    device: str
    predicted: dict[str, float]
    emulated: tuple[str, ...] = ()
    calibration: Calibration = field(default_factory=Calibration)

    def cost(self, cases: list[Case]) -> float:
        return sum(self.predicted.get(c.id, 0.0) for c in cases)


@dataclass(frozen=True)
class Question:
    key: str  # the claims it funds are those whose spec (bench.claims) names this question
    picks: Callable[[Case], bool]  # the plan's cases that speak to it
    least: Callable[[list[Case], Context], list[Case]]  # the least of those that answers it
    figures: str = ""  # the report's figures it answers too

    @property
    def claims(self) -> tuple[ClaimSpec, ...]:
        return of_question(self.key)

    @property
    def asks(self) -> str:
        """The claims and figures it answers, as the report names them."""
        return "; ".join([*(c.text for c in self.claims), *([self.figures] if self.figures else [])])

    @property
    def elsewhere(self) -> dict[str, str]:
        """`bench run`'s options (flag -> text) that measure it, for a plan that has none of its cases: its first
        claim's."""
        return dict(self.claims[0].measure) if self.claims else {}

    @property
    def command(self) -> str:
        return self.claims[0].command if self.claims else ""


def _plain(c: Case) -> bool:
    """A dense attention call: no serving batch, no model, no score variant, no sparsity."""
    s = c.shape
    return s.serving is None and not s.score.variants and s.model is None and not s.sparsity.sparse


def _runs_here(c: Case, ctx: Context) -> bool:
    return get_backend(c.backend).unsupported_reason(ctx.device, c.shape.dtype) is None


def textbook(names: set[str]) -> str | None:
    """The registry's first materialising backend among `names` (naive)."""
    return next((n for n, b in BACKENDS.items() if n in names and b.memory == "materialising"), None)


def fused(cases: list[Case], ctx: Context) -> str | None:
    """The fused (tiled) kernel to fund: the one whose cases here cost least, one that compiles only when no other
    runs; ties go to registry order."""
    by_backend: dict[str, float] = defaultdict(float)
    for c in cases:
        b = BACKENDS.get(c.backend)
        if b is not None and b.memory == "tiled" and _runs_here(c, ctx):
            by_backend[c.backend] += ctx.predicted.get(c.id, 0.0)
    if not by_backend:
        return None
    order = list(BACKENDS)
    return min(by_backend, key=lambda n: (BACKENDS[n].compiles, by_backend[n], order.index(n)))


def _pair(cases: list[Case], ctx: Context, size: Callable[[Case], int]) -> tuple[str, ...]:
    """The textbook backend and the fused kernel among these cases (whichever exist), of the backends that cover
    every size of the group (a backend with one length of a scaling line does not draw the line)."""
    sizes: dict[str, set[int]] = defaultdict(set)
    for c in cases:
        if _runs_here(c, ctx):
            sizes[c.backend].add(size(c))
    everything = set().union(*sizes.values()) if sizes else set()
    complete = [c for c in cases if sizes.get(c.backend) == everything]
    names = {c.backend for c in complete}
    return tuple(n for n in (textbook(names), fused(complete, ctx)) if n)


def _main_dtype(cases: list[Case], ctx: Context) -> list[str]:
    """The dtypes measured in depth: those this machine runs natively, else (all emulated) the first."""
    dtypes = list(dict.fromkeys(c.shape.dtype for c in cases))
    native = [d for d in dtypes if d not in ctx.emulated]
    return native or dtypes[:1]


def representatives(cases: list[Case], ctx: Context) -> list[Case]:
    """Of an emulated dtype, one shape per backend: the cheapest, enough to show what the missing hardware costs."""
    out: dict[tuple[str, str], Case] = {}
    for c in sorted(cases, key=lambda c: ctx.predicted.get(c.id, 0.0)):
        if c.shape.dtype in ctx.emulated:
            out.setdefault((c.backend, c.shape.dtype), c)
    return list(out.values())


def _with_emulated(chosen: list[Case], pool: list[Case], ctx: Context) -> list[Case]:
    """The chosen cases plus, per emulated dtype in the pool, one representative case of each chosen backend."""
    backends = {c.backend for c in chosen}
    emulated = [c for c in pool if c.shape.dtype in ctx.emulated and c.backend in backends]
    return chosen + representatives(emulated, ctx)


# -- heads ----------------------------------------------------------------------------------------------------------
def _heads_picks(c: Case) -> bool:
    s = c.shape
    return (_plain(c) and c.phase == "prefill" and c.pass_ == "fwd" and s.scope == "attention"
            and s.n_kv_heads == s.n_heads)


def _heads_least(cases: list[Case], ctx: Context) -> list[Case]:
    """One d_model's head counts (>= MIN_HEADS of them) at one length, for the textbook and the fused backend."""
    groups: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        s = c.shape
        groups[(s.n_heads * s.head_dim, s.seq_q, s.batch, s.dtype, s.mask.label)].append(c)
    sweeps = {k: g for k, g in groups.items() if len({c.shape.n_heads for c in g}) >= MIN_HEADS}
    if not sweeps:
        return []
    dtypes = _main_dtype([c for g in sweeps.values() for c in g], ctx)
    native = {k: g for k, g in sweeps.items() if k[3] in dtypes} or sweeps
    key = min(native, key=lambda k: ctx.cost(native[k]))  # the cheapest sweep that answers
    pair = _pair(native[key], ctx, lambda c: c.shape.n_heads)
    return [c for c in native[key] if c.backend in pair]


# -- scaling --------------------------------------------------------------------------------------------------------
def _scaling_picks(c: Case) -> bool:
    s = c.shape
    return (_plain(c) and c.phase == "prefill" and c.pass_ == "fwd" and s.scope == "attention"
            and s.n_kv_heads == s.n_heads)


def _lines(cases: list[Case]) -> dict[tuple, list[Case]]:
    """Cases of one geometry (dtype, Hq, D, mask) over lengths: one line where each length has one batch (a GPU
    sweep at fixed tokens per batch shrinks B as S grows), else one line per batch."""
    groups: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        s = c.shape
        groups[(s.dtype, s.n_heads, s.head_dim, s.mask.label)].append(c)
    lines: dict[tuple, list[Case]] = {}
    for key, group in groups.items():
        batches: dict[int, set[int]] = defaultdict(set)
        for c in group:
            batches[c.shape.seq_q].add(c.shape.batch)
        if all(len(b) == 1 for b in batches.values()):
            lines[(*key, None)] = group
        else:
            for c in group:
                lines.setdefault((*key, c.shape.batch), []).append(c)
    return lines


def _scaling_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Per geometry that spans >= MIN_LENGTHS lengths over >= LENGTH_SPAN x: the textbook and the fused backend at
    every length, causal where the plan has it; one such geometry per native dtype, representatives of the rest."""
    lines = _lines(cases)

    def shortest_span(group: list[Case]) -> list[Case]:
        """The group's cases at its shortest lengths that still make >= MIN_LENGTHS over >= LENGTH_SPAN x."""
        seqs = sorted({c.shape.seq_q for c in group})
        for n in range(MIN_LENGTHS, len(seqs) + 1):
            if seqs[n - 1] >= LENGTH_SPAN * seqs[0]:
                return [c for c in group if c.shape.seq_q <= seqs[n - 1]]
        return []

    lines = {k: cut for k, g in lines.items() if (cut := shortest_span(g))}
    chosen: list[Case] = []
    for dtype in _main_dtype([c for g in lines.values() for c in g], ctx):
        mine = {k: g for k, g in lines.items() if k[0] == dtype}
        if not mine:
            continue
        # causal first (what decoders run, and what the decode and layer questions use), then the cheapest
        key = min(mine, key=lambda k: (k[3] != "causal", ctx.cost(mine[k])))
        pair = _pair(mine[key], ctx, lambda c: c.shape.seq_q)
        chosen += [c for c in mine[key] if c.backend in pair]
    return _with_emulated(chosen, cases, ctx)


# -- decode ---------------------------------------------------------------------------------------------------------
def _decode_picks(c: Case) -> bool:
    return _plain(c) and c.phase == "decode" and c.shape.mla is None


def _decode_least(cases: list[Case], ctx: Context) -> list[Case]:
    """For one geometry (Hq, D, batch, queries per step) of each native dtype: MHA, GQA and MQA each at
    >= MIN_KV_LENGTHS KV lengths, for the textbook and the fused backend."""
    groups: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        s = c.shape
        groups[(s.dtype, s.batch, s.n_heads, s.head_dim, s.seq_q, s.mask.label)].append(c)

    def answers(group: list[Case]) -> bool:
        by_variant: dict[str, set[int]] = defaultdict(set)
        for c in group:
            by_variant[c.shape.variant].add(c.shape.seq_kv)
        return "mha" in by_variant and len(by_variant) >= 2 and all(
            len(kv) >= MIN_KV_LENGTHS for kv in by_variant.values())

    good = {k: g for k, g in groups.items() if answers(g)}
    chosen: list[Case] = []
    # every native dtype: the claims are judged per kernel x dtype x group size, and a condition only some runs reach
    # (as depth, when time allows) would make the verdict differ from run to run
    for dtype in _main_dtype([c for g in good.values() for c in g], ctx):
        mine = {k: g for k, g in good.items() if k[0] == dtype}
        if not mine:
            continue
        key = min(mine, key=lambda k: (k[4], ctx.cost(mine[k])))  # one query per step first
        pair = _pair(mine[key], ctx, lambda c: c.shape.seq_kv * 1000 + c.shape.n_kv_heads)
        chosen += [c for c in mine[key] if c.backend in pair]
    return _with_emulated(chosen, cases, ctx)


# -- MLA ------------------------------------------------------------------------------------------------------------
def _mla_picks(c: Case) -> bool:
    """MLA's absorbed decode steps and the GQA/MQA steps they are judged against."""
    return _plain(c) and c.phase == "decode" and (c.shape.absorbed or c.shape.variant in ("gqa", "mqa"))


def _mla_least(cases: list[Case], ctx: Context) -> list[Case]:
    """For one MLA geometry of a native dtype, its steps at every context for the textbook and the fused backend,
    and the GQA/MQA steps of the same backends, Hq, batch and context at head dim = MLA's value head dim."""
    mla = [c for c in cases if c.shape.absorbed]
    dtypes = _main_dtype(mla, ctx)
    mla = [c for c in mla if c.shape.dtype in dtypes[:1]]
    if not mla:
        return []
    pair = _pair(mla, ctx, lambda c: c.shape.seq_kv)
    mla = [c for c in mla if c.backend in pair]
    keys = {(c.backend, c.shape.dtype, c.shape.batch, c.shape.n_heads, c.shape.seq_q, c.shape.seq_kv,
             c.shape.mla.v_head_dim) for c in mla}
    twins = [c for c in cases if c.shape.mla is None and (c.backend, c.shape.dtype, c.shape.batch,
                                                               c.shape.n_heads, c.shape.seq_q, c.shape.seq_kv,
                                                               c.shape.head_dim) in keys]
    return mla + twins if twins else []


# -- layer ----------------------------------------------------------------------------------------------------------
def _layer_picks(c: Case) -> bool:
    return _plain(c) and c.phase == "prefill" and c.shape.scope in ("attention", "layer")


def predicted_share(case: Case, ctx: Context) -> float:
    """The cost model's share of attention in the layer at this case's shape: attention's predicted call over it
    plus the projections' FLOPs at the GEMM ceiling (they are GEMMs)."""
    from bench.engine.cost import call_s
    from bench.results.record import new_record

    b = get_backend(case.backend)
    alone = Case(case.backend, dataclasses.replace(case.shape, scope="attention"), case.phase, case.pass_, case.device)
    attention = call_s(new_record(alone, b.memory, threads=0), ctx.calibration, b.memory)
    gemm = ctx.calibration.gemm(case.shape.dtype)
    projections = projection_flops(case.shape, case.pass_) / (gemm or 1e10)
    return attention / (attention + projections)


def crossing_length(cases: list[Case], backend: str, ctx: Context) -> int | None:
    """The shortest length of these cases at which the cost model puts `backend`'s attention at half the layer or
    more, on this machine's ceilings; None when it never does within them."""
    for c in sorted((c for c in cases if c.backend == backend), key=lambda c: c.shape.seq_q):
        if predicted_share(c, ctx) >= DOMINANT:
            return c.shape.seq_q
    return None


def _layer_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Both scopes of one geometry, for the textbook and the fused backend, at every length up to where the fused
    kernel's attention is predicted to pass half the layer (at least MIN_LAYER_LENGTHS lengths)."""
    layered = {(c.backend, c.shape.dtype, c.shape.n_heads, c.shape.n_kv_heads, c.shape.head_dim, c.shape.batch,
                c.shape.mask.label) for c in cases if c.shape.scope == "layer"}
    twins = [c for c in cases if (c.backend, c.shape.dtype, c.shape.n_heads, c.shape.n_kv_heads, c.shape.head_dim,
                                  c.shape.batch, c.shape.mask.label) in layered]
    dtypes = _main_dtype(twins, ctx)
    twins = [c for c in twins if c.shape.dtype == dtypes[0]] if dtypes else []
    if not twins:
        return []
    pair = _pair(twins, ctx, lambda c: c.shape.seq_q * 2 + (c.shape.scope == "layer"))
    twins = [c for c in twins if c.backend in pair]
    seqs = sorted({c.shape.seq_q for c in twins if c.shape.scope == "layer"})
    judge = pair[-1]  # the fused kernel: attention reaches half the layer latest with it
    cross = crossing_length([c for c in twins if c.shape.scope == "layer"], judge, ctx)
    # every length up to the predicted crossing and the next one (to see it pass), at least MIN_LAYER_LENGTHS
    upto = len(seqs) if cross is None else seqs.index(cross) + 2
    keep = seqs[:max(upto, MIN_LAYER_LENGTHS)]
    return [c for c in twins if c.shape.seq_q in keep]


def _none(cases: list[Case], ctx: Context) -> list[Case]:
    return []


def _all(cases: list[Case], ctx: Context) -> list[Case]:
    return cases


def _paging_picks(c: Case) -> bool:
    """Serving decode: the paged caches and the contiguous cache they are compared with (same drawn contexts)."""
    return c.phase == "decode" and c.shape.serving is not None and c.shape.serving.lengths is not None \
        and c.shape.serving.rows is None


def _variants_picks(c: Case) -> bool:
    """A score variant or a chunk mask, and the plain causal prefill they are compared with."""
    s = c.shape
    return (s.serving is None and c.phase == "prefill" and s.scope == "attention"
            and s.model is None and not s.sparsity.sparse
            and (bool(s.score.variants) or s.mask.chunk is not None or s.mask.label == "causal"))


def _plain_key(c: Case) -> tuple:
    s = c.shape
    return (c.backend, c.pass_, s.dtype, s.batch, s.n_heads, s.n_kv_heads, s.head_dim, s.seq_q, s.seq_kv)


def _variants_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Every variant case, each beside its plain causal twin (same backend and shape, no variant): a variant
    without its twin cannot be judged, so it is left out."""
    varied = [c for c in cases if c.shape.score.variants or c.shape.mask.chunk is not None]
    plain = {_plain_key(c): c for c in cases if not c.shape.score.variants and c.shape.mask.label == "causal"}
    judged = [c for c in varied if _plain_key(c) in plain]
    return judged + list({id(t): t for t in (plain[_plain_key(c)] for c in judged)}.values())


# -- transformers' paths, replayed traffic ------------------------------------------------------------------------

def _rivals(name: str) -> tuple[str, ...]:
    """The torch kernels a wrapping backend (transformers' paths) calls: the one it wraps and those that one picks
    among; () for a backend that wraps none."""
    wraps = get_backend(name).wraps
    return (wraps, *get_backend(wraps).chooses) if wraps else ()


def _wrapper_picks(c: Case) -> bool:
    """A model's attention through a wrapping backend, or through a torch kernel some wrapper calls."""
    return c.shape.model is not None and c.phase in ("prefill", "decode") and (
        bool(_rivals(c.backend)) or any(c.backend in _rivals(n) for n in BACKENDS))


def _wrapper_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Each wrapper's case beside the kernels it calls at the same shape and phase (a wrapper without them cannot
    be judged, so it is left out)."""
    def key(c: Case) -> tuple:
        return (c.shape, c.phase, c.pass_)

    out: dict[str, Case] = {}
    for c in cases:
        twins = [t for t in cases if t.backend in _rivals(c.backend) and key(t) == key(c) and _runs_here(t, ctx)]
        if twins and _runs_here(c, ctx):
            out.update({x.id: x for x in (c, *twins)})
    return list(out.values())


def _is_trace(c: Case) -> bool:
    return c.shape.serving is not None and c.shape.serving.rows is not None


def _trace_picks(c: Case) -> bool:
    """A replayed trace's bucket, or a plain causal forward case of the synthetic grid it is compared with."""
    return _is_trace(c) or (_plain(c) and c.pass_ == "fwd" and c.shape.mask.label == "causal"
                            and c.shape.scope == "attention" and c.shape.mla is None)


def _trace_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Every bucket of the traces, with the grid's cases of the same backends and head geometry (the grid's winner
    is judged against the trace's)."""
    trace = [c for c in cases if _is_trace(c)]

    def geometry(c: Case) -> tuple:
        return (c.shape.n_heads, c.shape.n_kv_heads, c.shape.head_dim, c.shape.dtype)

    geometries, backends = {geometry(c) for c in trace}, {c.backend for c in trace}
    grid = [c for c in cases if not _is_trace(c) and geometry(c) in geometries and c.backend in backends]
    return trace + grid if trace and grid else []


# -- sparse ---------------------------------------------------------------------------------------------------------


def _sparse_picks(c: Case) -> bool:
    """Sparse cases, and the dense attention calls they are compared with."""
    s = c.shape
    return s.scope == "attention" and s.serving is None and not s.score.variants and c.pass_ == "fwd"


def _sparse_kernel(backend: str) -> bool:
    """A kernel that executes a keep-set sparsely (its blocks, its gathered keys), not as a boolean mask."""
    return get_backend(backend).executes in ("blocks", "selected")


def _line_key(c: Case) -> tuple:
    """What one method's line over the lengths shares: every shape field but the lengths and the batch, and the
    phase (_sparse_lines splits a line by batch where a length has several)."""
    s = c.shape
    return (c.backend, c.phase, c.pass_, s.seq_q if c.phase == "decode" else None,
            *(getattr(s, f.name) for f in dataclasses.fields(s) if f.name not in ("seq_q", "seq_kv", "batch")))


def _twins(c: Case, dense: dict[tuple, list[Case]]) -> list[Case]:
    """The dense cases of c's shape: its own backend's (its speedup's twin) and every fused kernel's that does not
    compile (the best dense kernel is among them)."""
    key = (dataclasses.replace(c.shape, sparsity=DENSE), c.phase, c.pass_)
    return [d for d in dense.get(key, []) if d.backend == c.backend
            or (BACKENDS.get(d.backend) is not None and BACKENDS[d.backend].memory == "tiled"
                and not BACKENDS[d.backend].compiles)]


def _sparse_lines(cases: list[Case], ctx: Context) -> tuple[list[list[Case]], dict[tuple, list[Case]]]:
    """The sparse kernels' lines (one method over the lengths, shortest first) and the dense cases by shape."""
    dense: dict[tuple, list[Case]] = defaultdict(list)
    lines: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        if not _runs_here(c, ctx):
            continue
        if not c.shape.sparsity.sparse:
            dense[(c.shape, c.phase, c.pass_)].append(c)
        elif _sparse_kernel(c.backend):
            lines[_line_key(c)].append(c)
    split = []
    for line in lines.values():
        batches: dict[int, set[int]] = defaultdict(set)
        for c in line:
            batches[c.shape.seq_kv].add(c.shape.batch)
        if all(len(b) == 1 for b in batches.values()):  # one batch per length (fixed tokens per batch): one line
            split.append(line)
        else:
            split += [[c for c in line if c.shape.batch == b] for b in sorted({c.shape.batch for c in line})]
    return [sorted(line, key=lambda c: c.shape.seq_kv) for line in split], dense


def _with_twins(line: list[Case], dense: dict[tuple, list[Case]]) -> list[Case] | None:
    """The line's cases and their twins, or None when a length has no dense twin to compare with."""
    twins = [_twins(c, dense) for c in line]
    if not all(twins):
        return None
    return line + [t for ts in twins for t in ts]


def _cheapest_per_kernel(found: list[tuple[str, bool, float, list[Case]]]) -> list[Case]:
    """Of (backend, not prefill, cost, cases) candidates, each sparse kernel's first (prefill, then cheapest)."""
    best: dict[str, tuple[bool, float, list[Case]]] = {}
    for backend, later, cost, chosen in found:
        if backend not in best or (later, cost) < best[backend][:2]:
            best[backend] = (later, cost, chosen)
    out: list[Case] = []
    for _, _, chosen in best.values():
        out += [c for c in chosen if c not in out]
    return out


def _crossover_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Per sparse kernel, one line at its shortest >= MIN_SPARSE_LENGTHS lengths spanning >= SPARSE_SPAN x, with the
    dense twins at each length; prefill first, then the cheapest (every kernel: the claim holds on one that wins)."""
    lines, dense = _sparse_lines(cases, ctx)
    found = []
    for line in lines:
        seqs = sorted({c.shape.seq_kv for c in line})
        cut = next((seqs[n - 1] for n in range(MIN_SPARSE_LENGTHS, len(seqs) + 1)
                    if seqs[n - 1] >= SPARSE_SPAN * seqs[0]), None)
        if cut is None:
            continue
        chosen = _with_twins([c for c in line if c.shape.seq_kv <= cut], dense)
        if chosen is not None:
            found.append((line[0].backend, line[0].phase != "prefill", ctx.cost(chosen), chosen))
    return _cheapest_per_kernel(found)


def _speedup_least(cases: list[Case], ctx: Context) -> list[Case]:
    """Per sparse kernel, one case at the longest length of a line, with its dense twins; prefill first, then the
    cheapest."""
    lines, dense = _sparse_lines(cases, ctx)
    found = []
    for line in lines:
        chosen = _with_twins(line[-1:], dense)
        if chosen is not None:
            found.append((line[0].backend, line[0].phase != "prefill", ctx.cost(chosen), chosen))
    return _cheapest_per_kernel(found)


QUESTIONS: tuple[Question, ...] = (
    Question("heads", _heads_picks, _heads_least, "the heads figure"),
    Question("scaling", _scaling_picks, _scaling_least, "the throughput and latency figures"),
    Question("decode", _decode_picks, _decode_least, "the decode figure"),
    Question("mla", _mla_picks, _mla_least),
    Question("layer", _layer_picks, _layer_least),
    Question("kv", lambda c: False, _none),  # answered from the caches allocated at the run's start
    Question("paging", _paging_picks, _all),
    Question("variants", _variants_picks, _variants_least),
    Question("sparse", _sparse_picks, _crossover_least),
    Question("sparse-ideal", _sparse_picks, _speedup_least),
    Question("trace", _trace_picks, _trace_least),
    Question("wrapper", _wrapper_picks, _wrapper_least),
)
