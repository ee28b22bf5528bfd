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


def add_host_cpus(parser: Any, default: str) -> None:
    """`--host-cpus pinned|shared`, as the benchmarks that run emulated hosts take it;
    `args.host_cpus == "pinned"` is their `pin_hosts`."""
    parser.add_argument(
        "--host-cpus",
        choices=("pinned", "shared"),
        default=default,
        help="processors of the emulated hosts: pinned (each host's threads on one "
        "processor, the hosts taking them in turn) or shared (the kernel places them)",
    )


def add_world(parser: Any) -> None:
    """`--workers` and `--batch-size` (global), as the data-parallel benchmarks take them."""
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch")


def add_threshold(parser: Any) -> None:
    """`--threshold-mb`: cadence-dp's fusion threshold, default its own."""
    parser.add_argument(
        "--threshold-mb", type=float, default=None, help="cadence-dp threshold (default: its own)"
    )


def add_reorder_k(parser: Any) -> None:
    """`--reorder-k`: cadence-dp's backward reordering point, default none."""
    parser.add_argument("--reorder-k", type=int, default=None, help="cadence-dp reorder point")
