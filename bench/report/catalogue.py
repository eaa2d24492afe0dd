"""The figures a report can show, in report order: ONE list, each entry naming its drawer, file, title and the
sentence on how to read it.

Adding a figure: its drawing function in a module of bench.report.figures, and one entry here. The drawer is
named "module:function" and imported on first draw, so this list (and the document written from it) never
imports matplotlib.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.analysis.traits import BASELINE


@dataclass(frozen=True)
class FigureEntry:
    name: str
    title: str
    how_to_read: str  # one sentence under the figure in the report
    draw: str  # "module:function" in bench.report.figures; the function takes the frame, returns a Figure or None
    # draws from every row (serving batches; sparse cases beside their dense twins); every other figure gets the dense
    # rows only, so a ragged, paged or sparse case never shares a line with the dense case of the same (B, S)
    every_row: bool = False
    reads_run: bool = False  # the drawer also takes the run's RunMeta (a replayed trace's buckets and weights)

    @property
    def file(self) -> str:
        """The PNG's name in the report folder (a report of several runs prefixes it with run<i>-)."""
        return f"{self.name}.png"

    def drawer(self) -> Callable[[Any], Any]:
        module, _, function = self.draw.partition(":")
        return getattr(importlib.import_module(f"bench.report.figures.{module}"), function)


# what every decode figure's sentence adds: its steps' timing mode (bench.measure.modes)
COLD_STEPS = ("Its steps are timed cold, their cache read from memory as a model's layer meets it (warm in a run from "
              "before cold CPU timing or with --cold-multiple 0: each record's timing_mode says); the Cold and warm "
              "section sets their warm times beside.")

CATALOGUE: tuple[FigureEntry, ...] = (
    FigureEntry("throughput", "Throughput", "Each line is a backend's achieved FLOP/s (useful FLOPs only) as the "
                "sequence grows; higher is better, and markers at the axis bottom are cases that did not run (see "
                "the legend).", "speed:throughput"),
    FigureEntry("latency", "Latency and scaling", "Time per call on log–log axes, where a straight line of slope k "
                "means time ∝ S^k: k ≈ 2 is the quadratic cost of attention, smaller k means fixed overheads still "
                "dominate.", "speed:latency"),
    FigureEntry("peak_memory", "Peak memory", "Hollow markers are the measured peak above the inputs and lines the "
                "analytic model; a line twice as steep as another means S² against S memory (score matrix vs "
                "tiled kernels).", "memory:peak_memory"),
    FigureEntry("heads_sweep", "Heads at fixed d_model", "Each point splits the same d_model into more, smaller "
                "heads, so the FLOPs are identical: flat lines mean extra heads are free, rising lines mean "
                "per-head overhead or small head dims cost time.", "heads:heads_sweep"),
    FigureEntry("kv_cache", "KV cache", "Bytes of K and V a model keeps per sequence as the context grows (left: "
                "the presets; right: one model as MHA, GQA and MQA); where a line crosses the device's memory, "
                "that context no longer fits at batch 1.", "memory:kv_cache"),
    FigureEntry("decode", "Decode", "Time of one decoding step against the KV-cache length it reads; compare the "
                "same backend across the variant panels to see what fewer KV heads buy. " + COLD_STEPS,
                "decode:decode"),
    FigureEntry("speedup", f"Speedup over {BASELINE}", f"Each cell is {BASELINE}'s time divided by the backend's at "
                f"that length (blue: faster than {BASELINE}, red: slower); grey hatched cells did not run, with the "
                "reason.", "speedup:speedup_heatmap"),
    FigureEntry("roofline", "Roofline", "Points under the sloped part of the ceiling are limited by memory "
                "bandwidth, under the flat part by compute; each dtype has its own flat GEMM ceiling (its points "
                "filled alike), and the gap to a point's own ceiling is what a better kernel could still gain.",
                "speed:roofline"),
    FigureEntry("serving_lengths", "Ragged batches", "Each bar is one backend's median time per real token (padding "
                "not counted) for a batch whose sequence lengths follow that distribution at the same total; the "
                "lower panels show how much of the work the backend's layout spends on padding (1 = none).",
                "serving:serving_lengths", every_row=True),
    FigureEntry("serving_paged", "Paged KV cache", "Each bar is a backend's decode step on a paged cache divided by "
                "the same step on a contiguous cache: 1 means paging is free, and gathering backends pay for copying "
                "the pages together on every step. " + COLD_STEPS, "serving:serving_paged", every_row=True),
    FigureEntry("variant_cost", "Attention variants", "Each bar is a backend's time with a score variant (softcap, "
                "ALiBi, sinks) or a chunk mask divided by its plain causal time at the same size: 1 means the "
                "variant is free, the dashed line is the variant claim's threshold; variants a backend cannot run "
                "are named under the panel.", "variants:variant_cost"),
    FigureEntry("sparse_time", "Sparse against dense", "Each coloured line is a sparse method (a sparsity on a "
                "backend) at one attended budget, its cost per forward (kernel, plus a top-K indexer and a mask "
                "rebuilt every forward) against length; the black dashed line is the fastest dense kernel at each "
                "length, and a ring marks S*, the length from which the method stays faster.", "sparse:sparse_time",
                every_row=True),
    FigureEntry("sparse_speedup", "Sparse speedup", "Each point is a sparse case's kernel time divided into its "
                "dense run's (the same backend, or the fastest dense kernel for one that runs only sparse attention) "
                "against its density; the black line is the ideal 1/density and the dashed one half of it, the "
                "speedup claim's bar. Kernels that take a keep-set as a boolean mask compute every pair and sit near "
                "1.", "sparse:sparse_speedup", every_row=True),
    FigureEntry("indexer_share", "Top-K indexer", "The share of a top-K (DSA) method's cost spent in its indexer, "
                "which scores every visible key before the attention reads K of them: beside a kernel that reads "
                "only those K (topk-gather) it grows with the length, the indexer's work being O(S) per query and "
                "the attention's O(K); a kernel that takes the selection as a mask computes every pair anyway, so "
                "its share stays flat or falls.", "sparse:indexer_share", every_row=True),
    FigureEntry("trace_serving", "Real traffic", "Left, what the replayed trace asked for: its requests' prompt and "
                "output lengths. Right, each backend's attention time to serve the whole trace (every bucket's "
                "time times the steps it stands for; pale prefill, solid decode); a hatched bar ran only some "
                "buckets and cannot be ranked.", "traces:trace_serving", every_row=True, reads_run=True),
    FigureEntry("prefix_decode", "Shared-prefix decode", "Left, one decode step of a batch whose requests share a "
                "prefix, against the prefix's length: dashed the best plain kernel (every request reads its own copy "
                "of the prefix), solid the cascade (the prefix read once for the batch), one colour per batch. Right, "
                "the plain step's time over the cascade's: above 1 the cascade is faster. " + COLD_STEPS,
                "prefix:prefix_decode", every_row=True),
    FigureEntry("verify_steps", "Verifying a draft", "Each point is a speculative draft of N tokens verified in one "
                "call over the cache, its time divided by the same backend's one-query decode step: near 1 the extra "
                "queries ride on the cache read, above the dotted bar the draft no longer costs about one step; stars "
                "are the engines' trees, and the dashed line is where the roofline says N queries turn the step "
                "compute-bound. " + COLD_STEPS, "verify:verify_steps", every_row=True, reads_run=True),
)
# By name, for lookups (the same entries, in the same order).
FIGURES: dict[str, FigureEntry] = {e.name: e for e in CATALOGUE}
