"""Test-only evidence for the regression checks (CPU): every backend made slower in proportion to its own work.

After each call the backend keeps the core busy for EXTRA x that call's own duration, so every case, compute- or
memory-bound, costs (1 + EXTRA) x its normal time.

  python tests/injected_slowdown.py run ...             `bench run` with every backend 30% slower (this process)
  python tests/injected_slowdown.py inject TREE [EXTRA] write the same slowdown into TREE/bench/backends/__init__.py,
                                                        so a commit of TREE is a really slower revision (`bench ab`)
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import time
from pathlib import Path

EXTRA = 0.3
MARK = "# injected by tests/injected_slowdown.py"


def slowed(fn, extra: float = EXTRA):
    def attention_and_more(q, k, v, *, mask, score):
        t0 = time.perf_counter()
        out = fn(q, k, v, mask=mask, score=score)
        until = time.perf_counter() + extra * (time.perf_counter() - t0)
        while time.perf_counter() < until:  # extra work in proportion to the call's own
            pass
        return out

    return attention_and_more


def inject(tree: str | Path, extra: float = EXTRA) -> Path:
    """Append to TREE's backend registry the code that wraps every backend in `slowed` (the same source)."""
    registry = Path(tree) / "bench" / "backends" / "__init__.py"
    text = registry.read_text()
    if MARK in text:
        raise ValueError(f"{registry} already has an injected slowdown")
    patch = (f"\n\n{MARK}: every backend x{1 + extra:g}\nimport dataclasses as _dataclasses  # noqa: E402\n"
             "import time  # noqa: E402\n\n" f"EXTRA = {extra!r}\n\n\n" + inspect.getsource(slowed) + "\n\n"
             "for _name, _backend in list(BACKENDS.items()):\n"
             f"    BACKENDS[_name] = _dataclasses.replace(_backend, fn=slowed(_backend.fn, {extra!r}))\n")
    registry.write_text(text + patch)
    return registry


def main(argv: list[str]) -> int:
    if argv[:1] == ["inject"] and len(argv) in (2, 3):
        print(inject(argv[1], float(argv[2]) if len(argv) == 3 else EXTRA))
        return 0
    if argv[:1] == ["run"]:
        from bench.backends import BACKENDS
        from bench.cli import main as bench_main

        for name, backend in list(BACKENDS.items()):
            BACKENDS[name] = dataclasses.replace(backend, fn=slowed(backend.fn))
        return bench_main(argv)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
