"""The measured wire time of `cadence bench dp`: one gloo all-reduce of all gradients on a
real capped emulated cluster, and a capped benchmark row built from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.bench.dp_wire import measure_wire
from cadence.comm.cost import ring_allreduce_wire_s
from cadence.netem._bandwidth import link_bucket_bytes
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
        "1", "--ddp-buckets-mb", "", "--probe-steps", "0", "--out", "out/bench.json",
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


@needs_netem
def test_paired_capped_row_measures_the_wire_every_round(tmp_path: Path) -> None:
    proc = run_cadence(
        "bench", "dp-paired", "--models", "mlp", "--caps", "100mbit", "--block-steps", "3",
        "--block-seconds", "0", "--rounds", "2", "--ddp-buckets-mb", "", "--out",
        "out/paired.json", cwd=tmp_path, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "out" / "paired.json").read_text())["rows"]
    assert set(row["rounds_s"]) == {"compute", "ddp", "cadence"}
    line = ring_allreduce_wire_s(row["gradient_bytes"], 2, 100e6)
    assert len(row["wire_runs_s"]) == 2
    # No faster than the line rate; mlp's 0.3 MB is short enough for latency to show on top.
    assert all(line < w < 3 * line for w in row["wire_runs_s"])
    # The same all-reduce beside every rank's compute, each round. The compute leaves gaps in
    # the sending that refill the link's token bucket, and over any stretch a bucket passes at
    # most its size more than the line rate, so the floor is the line less one bucket's time
    # (one run in six measured 0.96x the line here; an uncapped veth would take ~0.01x).
    assert len(row["wire_computing_runs_s"]) == 2
    floor = line - link_bucket_bytes(100e6) * 8 / 100e6
    assert all(floor < w for w in row["wire_computing_runs_s"])
    assert row["bound_rounds_s"] == [
        max(c, w) for c, w in zip(row["rounds_s"]["compute"], row["wire_runs_s"], strict=True)
    ]
