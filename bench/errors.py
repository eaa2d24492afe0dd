"""The project's own input errors. `python -m bench` prints one line and exits 2 for these; anything else is a bug
and surfaces as one (a traceback, exit 1)."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from the user: a flag, a shape, a results file. The message names what is wrong."""


class UsageError(InputError):
    """A command-line option or combination that cannot work, found before any work starts."""


def positive_int(text: str, what: str, where: str, error: type[InputError] = InputError) -> int:
    """`text` as a positive whole number, else `error` saying where it stood and what it was: "sparsity 'block:x:1':
    block size 'x' is not an integer"."""
    try:
        value = int(text)
    except ValueError:
        raise error(f"{where}: {what} {text!r} is not an integer") from None
    if value <= 0:
        raise error(f"{where}: {what} must be a positive integer, not {value}")
    return value
