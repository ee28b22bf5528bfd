"""Helpers the `cadence bench` parsers share (kept free of heavy imports: `cadence --help`
loads them)."""

from __future__ import annotations

import shlex
import sys
from typing import Any


def command_line() -> str:
    """The command as the user typed it, for a benchmark's JSON."""
    return "cadence " + shlex.join(sys.argv[1:])


def names(text: str) -> tuple[str, ...]:
    """A comma-separated flag value as its non-empty items."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def numbers(text: str, flag: str) -> tuple[float, ...]:
    """A comma-separated flag value of numbers, or a one-line error naming `flag`."""
    try:
        return tuple(float(item) for item in names(text))
    except ValueError:
        from cadence.errors import UserError

        raise UserError(f"{flag} must be numbers, got '{text}'") from None


def add_common(
    parser: Any,
    *,
    models: str | None,
    caps: str | None,
    out: str,
    workers: int | None = 2,
    batch_size: int | None = 64,
    steps: int | None = 12,
    repeats: int | None = 3,
    steps_help: str = "steps per run (the first is not timed)",
    caps_help: str = "",
) -> None:
    """The options every `cadence bench` benchmark takes, with the same names and meaning:
    `--models` and `--caps` (comma-separated), `--workers`, `--batch-size` (global),
    `--steps`, `--repeats` and `--out` (the JSON; the PNG goes next to it). A benchmark that
    has no use for one passes None for its default and does not get it."""
    if models is not None:
        parser.add_argument("--models", default=models, help="comma-separated zoo models")
    if caps is not None:
        parser.add_argument(
            "--caps",
            default=caps,
            help="comma-separated link caps of the emulated cluster, e.g. 400mbit" + caps_help,
        )
    if workers is not None:
        parser.add_argument("--workers", type=int, default=workers, help="ranks (emulated hosts)")
    if batch_size is not None:
        parser.add_argument("--batch-size", type=int, default=batch_size, help="global batch")
    if steps is not None:
        parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    if repeats is not None:
        parser.add_argument(
            "--repeats", type=int, default=repeats, help="rounds of every variant, alternating"
        )
    parser.add_argument("--out", default=out, help="JSON file; the PNG goes next to it")


def one(text: str, flag: str) -> str:
    """The single item of a comma-separated flag value, or a one-line error naming `flag`."""
    items = names(text)
    if len(items) != 1:
        from cadence.errors import UserError

        raise UserError(f"{flag} takes one value for this benchmark, got '{text}'")
    return items[0]


def add_threshold(parser: Any) -> None:
    """`--threshold-mb`: cadence-dp's fusion threshold, default its own."""
    parser.add_argument(
        "--threshold-mb", type=float, default=None, help="cadence-dp threshold (default: its own)"
    )


def add_reorder_k(parser: Any) -> None:
    """`--reorder-k`: cadence-dp's backward reordering point, default none."""
    parser.add_argument("--reorder-k", type=int, default=None, help="cadence-dp reorder point")
