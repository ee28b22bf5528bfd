"""`cadence bench` offers the product's eight benchmarks, each with the shared options."""

from __future__ import annotations

import argparse

from cadence.cli import build_parser

SHARED = {"--models", "--caps", "--workers", "--batch-size", "--steps", "--repeats", "--out"}


def _benchmarks() -> dict[str, argparse.ArgumentParser]:
    (top,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    (bench,) = (
        a for a in top.choices["bench"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    return dict(bench.choices)


def test_the_eight_benchmarks() -> None:
    expected = {"dp", "zero", "pipeline", "ps", "collectives", "sim", "soak", "tta"}
    assert set(_benchmarks()) == expected


def test_every_benchmark_takes_the_shared_options_it_uses_and_writes_to_out() -> None:
    for name, parser in _benchmarks().items():
        flags = {f for a in parser._actions for f in a.option_strings}
        assert "--out" in flags, name
        # No benchmark spells a shared option its own way.
        assert not flags & {"--model", "--cap", "--bandwidth", "--hosts", "--rounds"}, name
        assert len(flags & SHARED) >= 4, (name, flags & SHARED)
