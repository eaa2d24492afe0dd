"""attnbench: how fast and how memory-hungry attention really is on your hardware.

The public names (`bench.attention`, `bench.backend`, ...) are loaded on first use (PEP 562): `import bench` alone
imports no torch, so `python -m bench --help`, `bench kv` and the inert pytest plugin start at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it
_PUBLIC = {
    "BACKENDS": "bench.backends",
    "attention": "bench.backends",
    "get_backend": "bench.backends",
    "Unsupported": "bench.backends.base",
    "backend": "bench.backends.outside",
    "AttentionShape": "bench.problem.shapes",
    "MlaDims": "bench.problem.shapes",
    "ServingBatch": "bench.problem.shapes",
    "Mask": "bench.problem.masks",
    "Score": "bench.problem.scores",
    "Sparsity": "bench.problem.sparsity",
    "KeepSet": "bench.problem.keepset",
    "ShapeError": "bench.problem.shapes",
}

__all__ = ["BACKENDS", "AttentionShape", "KeepSet", "Mask", "MlaDims", "Score", "ServingBatch", "ShapeError",
           "Sparsity", "Unsupported", "attention", "backend", "get_backend"]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from bench.backends import BACKENDS, attention, get_backend
    from bench.backends.base import Unsupported
    from bench.backends.outside import backend
    from bench.problem.keepset import KeepSet
    from bench.problem.masks import Mask
    from bench.problem.scores import Score
    from bench.problem.shapes import AttentionShape, MlaDims, ServingBatch, ShapeError
    from bench.problem.sparsity import Sparsity


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
