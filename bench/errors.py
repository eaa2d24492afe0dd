"""The project's own input errors. `python -m bench` prints one line and exits 2 for these; anything else is a bug
and surfaces as one (a traceback, exit 1)."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from the user: a flag, a shape, a results file. The message names what is wrong."""


class UsageError(InputError):
    """A command-line option or combination that cannot work, found before any work starts."""
