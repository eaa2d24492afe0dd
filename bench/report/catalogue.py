"""The figures a report can show, in report order: name, PNG file, title and the sentence on how to read it.

Plain data, no matplotlib: the document is written from this list, and bench.report.figures draws one
figure per entry (a test holds the two together).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FigureEntry:
    name: str
    title: str
    how_to_read: str  # one sentence under the figure in the report

    @property
    def file(self) -> str:
        """The PNG's name in the report folder (a report of several runs prefixes it with run<i>-)."""
        return f"{self.name}.png"


FIGURES: dict[str, FigureEntry] = {e.name: e for e in [
    FigureEntry("throughput", "Throughput", "Each line is a backend's achieved FLOP/s (useful FLOPs only) as the "
                "sequence grows; higher is better, and markers at the axis bottom are cases that did not run (see "
                "the legend)."),
    FigureEntry("latency", "Latency and scaling", "Time per call on log–log axes, where a straight line of slope k "
                "means time ∝ S^k: k ≈ 2 is the quadratic cost of attention, smaller k means fixed overheads still "
                "dominate."),
    FigureEntry("peak_memory", "Peak memory", "Hollow markers are the measured peak above the inputs and lines the "
                "analytic model; a line twice as steep as another means S² against S memory (score matrix vs "
                "tiled kernels)."),
    FigureEntry("heads_sweep", "Heads at fixed d_model", "Each point splits the same d_model into more, smaller "
                "heads, so the FLOPs are identical: flat lines mean extra heads are free, rising lines mean "
                "per-head overhead or small head dims cost time."),
    FigureEntry("kv_cache", "KV cache", "Bytes of K and V a model keeps per sequence as the context grows (left: "
                "the presets; right: one model as MHA, GQA and MQA); where a line crosses the device's memory, "
                "that context no longer fits at batch 1."),
    FigureEntry("decode", "Decode", "Time of one decoding step against the KV-cache length it reads; compare the "
                "same backend across the variant panels to see what fewer KV heads buy."),
    FigureEntry("speedup", "Speedup over naive", "Each cell is naive's time divided by the backend's at that "
                "length (blue: faster than naive, red: slower); grey hatched cells did not run, with the reason."),
    FigureEntry("roofline", "Roofline", "Points under the sloped part of the ceiling are limited by memory "
                "bandwidth, under the flat part by compute; the gap to the ceiling is what a better kernel could "
                "still gain."),
    FigureEntry("serving_lengths", "Ragged batches", "Each bar is one backend's median time per real token (padding "
                "not counted) for a batch whose sequence lengths follow that distribution at the same total; the "
                "lower panels show how much of the work the backend's layout spends on padding (1 = none)."),
    FigureEntry("serving_paged", "Paged KV cache", "Each bar is a backend's decode step on a paged cache divided by "
                "the same step on a contiguous cache: 1 means paging is free, and gathering backends pay for copying "
                "the pages together on every step."),
]}
