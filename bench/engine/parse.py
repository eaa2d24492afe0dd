"""How an axis's text becomes its values: the parsers and checks the sweep's `axis(...)` declarations name. Each
raises a UsageError that names the value and the rule (bench.engine.options prefixes the flag)."""

from __future__ import annotations

from collections.abc import Callable

from bench.errors import UsageError
from bench.problem.shapes import ShapeError


def ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from None


def one_int(text: str) -> int:
    """A single whole number (a server knob)."""
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"expected one integer, got {text!r}") from None


def one_int_or_none(text: str) -> int | None:
    """A whole number, or 'none' (no limit)."""
    return None if text.strip().lower() in ("none", "off") else one_int(text)


def seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"expected a number of seconds, got {text!r}") from None


def duration(text: str) -> float | None:
    """'10m', '90s', '1h', '600' (seconds) or 'none' (no limit: infinity)."""
    text = text.strip().lower()
    if text in ("none", "inf", "off"):
        return float("inf")
    units = {"s": 1, "m": 60, "h": 3600}
    scale = units.get(text[-1:])
    try:
        value = float(text[:-1] if scale else text) * (scale or 1)
    except ValueError:
        raise UsageError(f"expected a duration such as 10m, 90s, 1h or none, got {text!r}") from None
    if value <= 0:
        raise UsageError(f"a duration must be positive, got {text!r}")
    return value


def words(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def one_of(name: str, known: tuple[str, ...] | dict) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value not in known:
            raise UsageError(f"unknown {name} {value!r}; known: {', '.join(known)}")
    return check


def positive_ints_check(name: str) -> Callable[[int], None]:
    def check(value: int) -> None:
        if value <= 0:
            raise ShapeError(f"{name}={value!r} must be a positive integer")
    return check


def page_sizes(text: str) -> tuple[int | None, ...]:
    """'contiguous,16,128' -> (None, 16, 128): page sizes, 'contiguous' for an unpaged cache beside them."""
    return tuple(None if word == "contiguous" else ints(word)[0] for word in words(text))


def page_size_check(value: int | None) -> None:
    if value is not None:
        positive_ints_check("page_size")(value)
