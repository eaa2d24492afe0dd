"""One look for every figure: each backend's colour, marker and legend place, status markers, variant lines.

Backends' colours and markers are their registry traits (bench.backends), so a backend looks the same in every
figure of every report; a name the registry does not know (an older results file, a plugin) still gets a
colour and marker that stay the same from report to report.
"""

from __future__ import annotations

import zlib

from bench.backends import BACKENDS

# Colours and markers no registered backend uses, for backends from outside (bench.backends.outside) and names the
# registry does not know (an older results file).
_SPARE_COLORS = ("#bcbd22", "#393b81", "#637939", "#843c39", "#7b4173", "#e7ba52", "#3182bd",
                 "#31a354", "#756bb1", "#636363", "#ad494a")
_SPARE_MARKERS = ("<", ">", "8", "H", "d", "X", "1")
# Registered backends first in registry order, then others alphabetically: legends read the same everywhere.
BACKEND_ORDER: tuple[str, ...] = tuple(BACKENDS)

VARIANT_ORDER = ("mha", "gqa", "mqa", "mla")
VARIANT_STYLES = {"mha": "-", "gqa": "--", "mqa": ":", "mla": "-."}
VARIANT_MARKERS = {"mha": "o", "gqa": "s", "mqa": "^", "mla": "D"}

# How a case that produced no time is drawn: at the bottom of the axis, in the backend's colour; one marker
# for each of bench.results.status.NOT_OK (a test holds the two together).
STATUS_MARKERS: dict[str, str] = {"unsupported": "x", "oom": "v", "error": "X", "incorrect": "d", "skipped": "_",
                                  "timeout": "1", "crashed": "*"}


# name -> slot in the spare (colour, marker) pairs, for this process: two names never share a slot, so every
# backend in a figure (a report draws all its figures in one process) is told apart from every other.
_SLOTS: dict[str, int] = {}


def _slot(name: str) -> int:
    if name not in _SLOTS:
        # crc32, not hash(): stable between processes, so a name keeps its colour across reports unless another
        # name in the same report already took it
        pairs = len(_SPARE_COLORS) * len(_SPARE_MARKERS)
        slot = zlib.crc32(name.encode()) % len(_SPARE_COLORS)
        taken = set(_SLOTS.values())
        while slot in taken and len(taken) < pairs:
            slot = (slot + 1) % pairs
        _SLOTS[name] = slot
    return _SLOTS[name]


def backend_color(name: str) -> str:
    backend = BACKENDS.get(name)
    return backend.color if backend else _SPARE_COLORS[_slot(name) % len(_SPARE_COLORS)]


def backend_marker(name: str) -> str:
    backend = BACKENDS.get(name)
    if backend:
        return backend.marker
    slot = _slot(name)
    return _SPARE_MARKERS[(slot + slot // len(_SPARE_COLORS)) % len(_SPARE_MARKERS)]


def backend_sort_key(name: str) -> tuple[int, str]:
    return (BACKEND_ORDER.index(name), "") if name in BACKEND_ORDER else (len(BACKEND_ORDER), name)


def variant_label(variant: str) -> str:
    return variant.upper()
