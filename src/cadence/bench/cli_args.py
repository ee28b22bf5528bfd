"""Helpers the `cadence bench` parsers share (kept free of heavy imports: `cadence --help`
loads them)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
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
    steps_help: str = "",
    caps_help: str = "",
    options: tuple[str, ...] = (),
    defaults: Mapping[str, Any] | None = None,
    tables: Sequence[tuple[str, tuple[str, ...]]] = (),
) -> None:
    """The options every `cadence bench` benchmark takes, with the same names and meaning:
    `--models` and `--caps` (comma-separated), `--workers`, `--batch-size` (global),
    `--steps`, `--repeats` and `--out` (the JSON; the PNG goes next to it). A benchmark that
    has no use for one passes None for its default and does not get it. `options` names the
    benchmark's own `BenchOptions` fields, `tables` the fields it takes of other tables
    (`TrainConfig`'s sections, `cadence.command_options`') as (table, fields), and `defaults`
    their values where the benchmark's differ. The flags (and
    `--config FILE`) are derived from the fields, so `steps_help` and `caps_help` add nothing:
    every benchmark shows the field's help."""
    from cadence.command_options import COMMAND_TABLES, BenchOptions
    from cadence.config import SECTIONS
    from cadence.config_flags import FlagSet, add_flags

    given = {"models": models, "caps": caps, "out": out, "repeats": repeats}
    given |= {"workers": workers, "batch_size": batch_size, "steps": steps}
    chosen = {k: v for k, v in given.items() if v is not None} | dict(defaults or {})
    bench = (*(k for k in ("models", "caps", "repeats", "out") if k in chosen), *options)
    names: dict[str, tuple[str, ...]] = {"job": (), "data": (), "cluster": ()}
    for section, name in (("cluster", "workers"), ("data", "batch_size"), ("job", "steps")):
        names[section] += (name,) * (name in chosen)
    for section, more in tables:
        names[section] = names.get(section, ()) + more
    known = {**SECTIONS, **COMMAND_TABLES}
    sets = [
        FlagSet(table, known[table], only, {n: chosen[n] for n in only if n in chosen})
        for table, only in names.items()
        if only
    ]
    mine = {n: chosen[n] for n in bench if n in chosen}
    sets.append(FlagSet("bench", BenchOptions, only=bench, defaults=mine))
    add_flags(parser, sets)


def one(text: str, flag: str) -> str:
    """The single item of a comma-separated flag value, or a one-line error naming `flag`."""
    items = names(text)
    if len(items) != 1:
        from cadence.errors import UserError

        raise UserError(f"{flag} takes one value for this benchmark, got '{text}'")
    return items[0]
