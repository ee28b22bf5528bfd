"""The measured wire time of `cadence bench dp`: one gloo all-reduce of all gradients on a
real capped emulated cluster, and a capped benchmark row built from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.bench.dp_wire import measure_wire
from cadence.comm.cost import ring_allreduce_wire_s
from tests.cli_helpers import run_cadence
from tests.conftest import needs_netem


@needs_netem
def test_measured_wire_is_the_line_rate_time_plus_framing() -> None:
    nbytes = 2 << 20
    line = ring_allreduce_wire_s(nbytes, 2, 100e6)  # 0.168 s of payload at line rate
    measured = measure_wire(nbytes, 2, "100mbit")
    # TCP/IP framing alone costs 1514/1448 = 1.046x; gloo and the kernel add a little more.
    assert 1.0 * line < measured < 1.6 * line


@needs_netem
def test_capped_row_has_measured_and_line_rate_bounds(tmp_path: Path) -> None:
    proc = run_cadence(
        "bench", "dp", "--models", "mlp", "--caps", "100mbit", "--steps", "11", "--repeats",
        "1", "--ddp-buckets-mb", "", "--out", "out/bench.json",
        cwd=tmp_path, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "out" / "bench.json").read_text())["rows"]
    assert len(row["wire_runs_s"]) == 1 and row["wire_s"] == row["wire_runs_s"][0]
    assert row["line_wire_s"] == pytest.approx(
        ring_allreduce_wire_s(row["gradient_bytes"], 2, 100e6)
    )
    assert row["wire_s"] > row["line_wire_s"] > 0
    assert row["compute_runs_s"] == [row["compute_s"]]
    assert row["bound_s"] == max(row["compute_s"], row["wire_s"])
    assert row["line_bound_s"] == max(row["compute_s"], row["line_wire_s"])
    cadence = row["iteration_s"]["cadence"]
    assert row["cadence_over_bound"] == pytest.approx(cadence / row["bound_s"])
    assert row["cadence_over_line_bound"] == pytest.approx(cadence / row["line_bound_s"])
    assert "| mlp | 100mbit |" in proc.stdout and "cadence/line bound" in proc.stdout
