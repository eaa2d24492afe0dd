"""Serving-shaped workloads: ragged batches, paged KV caches, mixed chunked-prefill + decode batches.

workload: the sequences a serving shape stands for and their counts (no torch); batch: their tensors and the float64
check per sequence; ragged and paged: each layout's builder, chosen by the backend's layout trait; case: one batch
in its backend's layout. What a serving case checks, times and records: bench.kinds.serving.
"""

from bench.serving.workload import is_serving

__all__ = ["is_serving"]
