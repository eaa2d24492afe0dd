"""One look for every figure: a fixed colour and marker per backend, status markers, human units."""

from __future__ import annotations

import zlib

# Fixed so a backend has the same colour in every figure of every report (tab10 hues, naive dark grey).
BACKEND_COLORS: dict[str, str] = {
    "naive": "#555555",
    "sdpa": "#1f77b4",
    "sdpa-math": "#9467bd",
    "sdpa-flash": "#d62728",
    "sdpa-efficient": "#ff7f0e",
    "sdpa-cudnn": "#8c564b",
    "flex": "#2ca02c",
    "flash-attn": "#e377c2",
}
BACKEND_MARKERS: dict[str, str] = {
    "naive": "o", "sdpa": "s", "sdpa-math": "D", "sdpa-flash": "^", "sdpa-efficient": "v", "sdpa-cudnn": "P",
    "flex": "*", "flash-attn": "h",
}
_SPARE_COLORS = ("#17becf", "#bcbd22", "#393b81", "#637939", "#843c39", "#7b4173")
_SPARE_MARKERS = ("p", "<", ">", "8", "H", "d")
# Known backends first in this order, then others alphabetically: legends read the same everywhere.
BACKEND_ORDER = tuple(BACKEND_COLORS)

VARIANT_ORDER = ("mha", "gqa", "mqa")
VARIANT_STYLES = {"mha": "-", "gqa": "--", "mqa": ":"}
VARIANT_MARKERS = {"mha": "o", "gqa": "s", "mqa": "^"}

# How a case that produced no time is drawn: at the bottom of the axis, in the backend's colour.
STATUS_MARKERS = {"unsupported": "x", "oom": "v", "error": "X", "incorrect": "d"}
NOT_OK = tuple(STATUS_MARKERS)


def _spare(name: str, pool: tuple[str, ...]) -> str:
    # crc32, not hash(): stable between processes, so an unknown backend keeps its colour across reports
    return pool[zlib.crc32(name.encode()) % len(pool)]


def backend_color(name: str) -> str:
    return BACKEND_COLORS.get(name) or _spare(name, _SPARE_COLORS)


def backend_marker(name: str) -> str:
    return BACKEND_MARKERS.get(name) or _spare(name, _SPARE_MARKERS)


def backend_sort_key(name: str) -> tuple[int, str]:
    return (BACKEND_ORDER.index(name), "") if name in BACKEND_ORDER else (len(BACKEND_ORDER), name)


def variant_label(variant: str) -> str:
    return variant.upper()


def _scaled(value: float, steps: tuple[tuple[float, str], ...]) -> tuple[str, str]:
    """(number, unit) with the largest unit the value reaches (the smallest when it reaches none)."""
    factor, unit = steps[-1]
    for f, u in steps:
        if abs(value) >= f:
            factor, unit = f, u
            break
    return f"{value / factor:.3g}", unit


_SECONDS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_BYTES = ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B"))
_RATES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def fmt_seconds(value: float) -> str:
    return "{} {}".format(*_scaled(value, _SECONDS))


def fmt_bytes(value: float) -> str:
    return "{} {}".format(*_scaled(value, _BYTES))


def fmt_flops(value: float) -> str:
    number, prefix = _scaled(value, _RATES)
    return f"{number} {prefix}FLOP/s"


def fmt_bandwidth(value: float) -> str:
    number, prefix = _scaled(value, _RATES)
    return f"{number} {prefix}B/s"


def fmt_tokens(value: float) -> str:
    """Context lengths: 4096 -> '4k', 131072 -> '128k' (powers of two read as the sizes people say)."""
    value = int(value)
    if value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value >> 20}M"
    if value >= 1024 and value % 1024 == 0:
        return f"{value >> 10}k"
    return str(value)


def flops_unit(peak: float) -> tuple[float, str]:
    """A FLOP/s unit for an axis whose largest value is `peak`: TFLOP/s on GPUs, GFLOP/s on CPUs."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if peak >= factor:
            return factor, f"{prefix}FLOP/s"
    return 1.0, "FLOP/s"
