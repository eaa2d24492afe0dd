"""Human units for every number a report prints: seconds, bytes, FLOP/s, bandwidth, token counts."""

from __future__ import annotations


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


def fmt_ratio(value: float) -> str:
    """A speedup or slowdown: two significant digits, never scientific notation (140×, not 1.4e+02×)."""
    return f"{value:.0f}×" if value >= 99.5 else f"{value:.2g}×"


def flops_unit(peak: float) -> tuple[float, str]:
    """A FLOP/s unit for an axis whose largest value is `peak`: TFLOP/s on GPUs, GFLOP/s on CPUs."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if peak >= factor:
            return factor, f"{prefix}FLOP/s"
    return 1.0, "FLOP/s"
