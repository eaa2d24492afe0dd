"""attnbench: how fast and how memory-hungry attention really is on your hardware."""

from bench.backends import BACKENDS, attention, get_backend
from bench.backends.base import Unsupported
from bench.backends.outside import backend
from bench.shapes import AttentionShape, ShapeError

__all__ = ["BACKENDS", "AttentionShape", "ShapeError", "Unsupported", "attention", "backend", "get_backend"]
__version__ = "0.1.0"
