"""How a kind declares a sweep axis (`axis(...)`: its flag, default, parser, check and help) and the parsers and
checks those declarations name. Each parser raises a UsageError that names the value and the rule
(bench.engine.options prefixes the flag).

Below the kinds and the plan alike: a kind declares its axes here without importing the plan, which composes
them into its Sweep (bench.plan.sweep).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

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


def axis(default: Any, flag: str, help: str, parse: Callable[[str], Any] = ints,
         check: Callable[[Any], None] | None = None, clears: str | None = None, shape_field: str | None = None) -> Any:
    """A sweep axis: a field of a kind's axes dataclass, whose values the engine parses and checks.
    clears: a field a profile may derive this axis from, dropped when the user sets it.
    shape_field: each value goes straight into that AttentionShape field (the engine sweeps it with no hook)."""
    return field(default=default, metadata={"flag": flag, "help": help, "parse": parse, "check": check,
                                            "clears": clears, "shape_field": shape_field})
