"""One look for every figure: each backend's colour, marker and legend place, status markers, variant lines.

Backends' colours and markers are their registry traits (bench.backends), so a backend looks the same in every
figure of every report; a name the registry does not know (an older results file, a plugin) still gets a
colour and marker that stay the same from report to report.
"""

from __future__ import annotations

import zlib

from bench.backends import BACKENDS

_SPARE_COLORS = ("#17becf", "#bcbd22", "#393b81", "#637939", "#843c39", "#7b4173")
_SPARE_MARKERS = ("p", "<", ">", "8", "H", "d")
# Registered backends first in registry order, then others alphabetically: legends read the same everywhere.
BACKEND_ORDER: tuple[str, ...] = tuple(BACKENDS)

VARIANT_ORDER = ("mha", "gqa", "mqa")
VARIANT_STYLES = {"mha": "-", "gqa": "--", "mqa": ":"}
VARIANT_MARKERS = {"mha": "o", "gqa": "s", "mqa": "^"}

# How a case that produced no time is drawn: at the bottom of the axis, in the backend's colour; one marker
# for each of bench.status.NOT_OK (a test holds the two together).
STATUS_MARKERS: dict[str, str] = {"unsupported": "x", "oom": "v", "error": "X", "incorrect": "d", "skipped": "_",
                                  "timeout": "1", "crashed": "*"}


def _spare(name: str, pool: tuple[str, ...]) -> str:
    # crc32, not hash(): stable between processes, so an unknown backend keeps its colour across reports
    return pool[zlib.crc32(name.encode()) % len(pool)]


def backend_color(name: str) -> str:
    backend = BACKENDS.get(name)
    return backend.color if backend else _spare(name, _SPARE_COLORS)


def backend_marker(name: str) -> str:
    backend = BACKENDS.get(name)
    return backend.marker if backend else _spare(name, _SPARE_MARKERS)


def backend_sort_key(name: str) -> tuple[int, str]:
    return (BACKEND_ORDER.index(name), "") if name in BACKEND_ORDER else (len(BACKEND_ORDER), name)


def variant_label(variant: str) -> str:
    return variant.upper()
