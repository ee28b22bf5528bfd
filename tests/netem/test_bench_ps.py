"""`cadence bench ps`: its table and picture from result rows, and bad input as one line.

A real run takes minutes (every order is a full emulated-cluster training run), so it is the
benchmark itself (benchmarks/baselines/bench-ps-resnet32.json), not a test."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadence.bench.ps import PUBLISHED, plot, table_lines
from tests.cli_helpers import assert_one_line_error, run_cadence


def _row(model: str, fifo: float, graph: float) -> dict[str, object]:
    times = {"fifo": fifo, "graph": graph}
    return {
        "model": model, "cap": "400mbit", "compute_s": 0.5, "wire_s": 1.0, "bound_s": 1.0,
        "iteration_s": times, "over_fifo": {k: v / fifo for k, v in times.items()},
        "published_graph_over_fifo": PUBLISHED.get(model),
    }  # fmt: skip


def test_table_puts_ratios_next_to_the_published_ones(tmp_path: Path) -> None:
    rows = [_row("vgg16", 2.0, 1.5), _row("mlp", 1.0, 1.0)]
    extra = {
        "model": "resnet32", "straggler": "1:0.300",
        "iteration_s": {"backup": 1.0, "backup+straggler": 1.1, "bsp+straggler": 1.6,
                        "asp": 0.8},
        "backup_straggler_over_backup": 1.1, "asp_samples_per_s": 40.0,
    }  # fmt: skip
    lines = table_lines(rows, extra)
    assert (
        "| vgg16 | 0.500 s | 1.000 s | 1.000 s | 2.000 s (100.0%) | 1.500 s (75.0%) | 93.5% |"
        in lines
    )
    assert lines[3].endswith("| - |")  # no published figure for mlp
    assert "| 1.000 s | 1.100 s | 1.10 | 1.600 s | 40.0 |" in lines
    plot(rows, extra, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--orders", "graph,layer"], "--orders must include fifo"),
        (["--orders", "fifo,fast"], "unknown --ps-priority 'fast'"),
        (["--caps", "none"], "--caps must be a bandwidth"),
        (["--steps", "5"], "--steps must be at least 11"),
        (["--models", "nope"], "unknown model 'nope'"),
    ],
)
def test_bad_bench_settings_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    proc = run_cadence("bench", "ps", *args, cwd=tmp_path, timeout=60)
    assert_one_line_error(proc, needle)
