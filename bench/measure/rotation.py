"""Cold inputs: what a model's layer reads from memory, handed to the timed call from copies in turn.

Between two decode steps of one layer every other layer's weights and caches pass through the CPU's caches (or a
GPU's L2), so a layer meets its KV cache, paged pool, shared prefix, latent cache or recurrent state cold, while what
it has just computed (the new query) is warm. A case kind says which of its call's inputs are which: it returns a
Rotating call, `call(*cold)`, with the cold tensors apart. The timer (bench.measure.modes) fills it with copies of
those tensors, made by copying (cheap, unlike drawing random numbers), until their total exceeds `multiple` times
the cache (bench.measure.caches), and each call then reads the copy after the last one's: by the time a copy comes
round again, the others have pushed it out. That is oneDNN benchdnn's `--cold-cache` (a pool of about
3 x (L2 + L3 per core) x cores, at most 1,000 buffers on a CPU) and FlashInfer's rotation under CUDA graphs.

The copies are capped by MAX_COPIES and by a share of the memory free when they are made; a rotation that falls
short of its target says so (`Rotation.partly_warm`), and the case's record keeps it. Holding the rotation (`hold`)
gives every call the original inputs again: the warm mode, timed beside.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from bench.measure.cold import ColdPlan, Rotation, copies_for
from bench.measure.memory import available_cpu_bytes


class Rotating:
    """A timed call `call(*view(*cold))` whose cold inputs come from copies in turn (module docstring). `view` turns
    one copy's tensors into the call's arguments (a nested tensor over packed values, say), once per copy, untimed;
    without it the call takes the tensors themselves. Attributes the runner reads off a timed call (guard, after) may
    be set on it as on a function."""

    def __init__(self, call: Callable[..., object], cold: Sequence[torch.Tensor],
                 view: Callable[..., tuple] | None = None) -> None:
        self.call = call
        self.original = tuple(cold)
        self.view = view
        self.copies: list[tuple] = [self._arguments(self.original)]
        self.tensors: list[tuple[torch.Tensor, ...]] = [self.original]  # each copy's cold tensors (read_far's)
        self.turn = 0
        self.guard: Any = None

    def _arguments(self, tensors: tuple[torch.Tensor, ...]) -> tuple:
        return tuple(self.view(*tensors)) if self.view else tensors

    def __call__(self) -> object:
        inputs = self.copies[self.turn]
        self.turn = (self.turn + 1) % len(self.copies)
        return self.call(*inputs)

    def wrapped(self, outer: Callable[[Callable[..., object]], Callable[..., object]]) -> Rotating:
        """The same cold inputs under another call: outer(call), e.g. torch.no_grad()(call)."""
        return Rotating(outer(self.call), self.original, self.view)

    @property
    def filled(self) -> bool:
        """Whether copies are made (fill) and not yet freed (hold)."""
        return len(self.copies) > 1

    @property
    def set_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.original)

    @property
    def device(self) -> torch.device:
        return self.original[0].device

    def fill(self, cache_bytes: int, plan: ColdPlan) -> Rotation:
        """Copies of the cold inputs until the plan's target (or its cap); the next call reads the first copy."""
        free = _free_bytes(self.device)
        copies, why = copies_for(self.set_bytes, cache_bytes, plan, free)
        started = time.perf_counter()
        with torch.no_grad():
            self.tensors = [self.original] + [tuple(t.clone() for t in self.original) for _ in range(copies - 1)]
            self.copies = [self._arguments(tensors) for tensors in self.tensors]
        self.turn = 1 % copies
        if self.device.type == "cuda":  # the copies are queued: their seconds are the stream's
            torch.cuda.synchronize(self.device)
        return Rotation(copies, self.set_bytes, cache_bytes, why, time.perf_counter() - started)

    def hold(self) -> None:
        """Warm from now on: the original inputs on every call; the copies are freed."""
        self.copies = self.copies[:1]
        self.tensors = self.tensors[:1]
        self.turn = 0

    def read_far(self, buffer: torch.Tensor) -> int:
        """Copies the bytes of the copies half a rotation from the next call's into `buffer` (uint8) until it is
        full, and returns how many: a read from memory, for the local control (bench.measure.control). Half the
        copies were read since these were, and as many are read before the case's call reads them again, each half
        more than the cache. 0 when not filled, or on a GPU."""
        n = len(self.tensors)
        if n < 2 or self.device.type != "cpu":
            return 0
        done, size = 0, buffer.numel()
        for step in range(max(n // 2, 1)):  # from half a rotation away back toward the next call's copy, never it
            for t in self.tensors[(self.turn + n // 2 - step) % n]:
                if done >= size:
                    return done
                if t.is_contiguous():
                    flat = t.reshape(-1).view(torch.uint8)
                    k = min(flat.numel(), size - done)
                    buffer[done:done + k].copy_(flat[:k])
                    done += k
        return done


def _free_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_cpu_bytes()
