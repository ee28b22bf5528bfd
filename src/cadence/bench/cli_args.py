"""Helpers the `cadence bench` parsers share (kept free of heavy imports: `cadence --help`
loads them)."""

from __future__ import annotations

import shlex
import sys


def command_line() -> str:
    """The command as the user typed it, for a benchmark's JSON."""
    return "cadence " + shlex.join(sys.argv[1:])


def names(text: str) -> tuple[str, ...]:
    """A comma-separated flag value as its non-empty items."""
    return tuple(part.strip() for part in text.split(",") if part.strip())
