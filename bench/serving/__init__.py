"""Serving-shaped workloads: ragged batches, paged KV caches, mixed chunked-prefill + decode batches.

workload: the sequences a serving shape stands for and their counts (no torch); batch: their tensors and the float64
check per sequence; ragged and paged: each backend's layout and timed call; case: what the runner asks for.
"""

from bench.serving.workload import is_serving

__all__ = ["is_serving"]
