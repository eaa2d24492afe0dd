"""The one contract every backend shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import torch


class Unsupported(RuntimeError):
    """This backend cannot run these inputs on this device; the message is the reason."""


class AttentionFn(Protocol):
    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                 window: int | None) -> torch.Tensor: ...


Memory = Literal["materialising", "tiled"]
ALL_DTYPES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Backend:
    """A backend's registry entry: its function and every trait the rest of the project reads."""

    name: str
    fn: AttentionFn
    summary: str
    # materialising: builds the Sq x Skv score matrix (O(S^2) memory); tiled: flash-style, O(S) above the output
    memory: Memory
    color: str  # one colour in every figure of every report
    marker: str  # matplotlib marker, same reason
    devices: tuple[str, ...] = ("cpu", "cuda")
    dtypes: tuple[str, ...] = ALL_DTYPES

    def unsupported_reason(self, device: str, dtype: str) -> str | None:
        """Why this backend cannot run on `device` in `dtype` by its traits alone, or None."""
        if device not in self.devices:
            return f"{self.name}: runs only on {' and '.join(d.upper() for d in self.devices)}, not on {device.upper()}"
        if dtype not in self.dtypes:
            return f"{self.name}: supports {', '.join(self.dtypes)} only, not {dtype}"
        return None
