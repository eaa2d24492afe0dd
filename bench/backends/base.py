"""The one contract every backend shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


class Unsupported(RuntimeError):
    """This backend cannot run these inputs on this device; the message is the reason."""


class AttentionFn(Protocol):
    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                 window: int | None) -> torch.Tensor: ...


@dataclass(frozen=True)
class Backend:
    name: str
    fn: AttentionFn
    summary: str
