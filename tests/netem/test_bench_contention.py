"""`cadence bench contention`: a tiny run in a real emulated cluster writes a fit the
simulator can read; bad input ends in one line."""

from __future__ import annotations

import json
from pathlib import Path

from cadence.bench.contention import ContentionFit
from tests.cli_helpers import assert_one_line_error, run_cadence
from tests.conftest import needs_netem


@needs_netem
def test_tiny_run_writes_rows_and_a_readable_fit(tmp_path: Path) -> None:
    proc = run_cadence(
        "bench", "contention", "--model", "mlp", "--batch-size", "8", "--iterations", "200",
        "--rounds", "1", "--sizes", "16KB,64KB", "--bandwidth", "1gbit",
        "--out", "out/c.json", cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out/c.json").read_text())
    assert data["command"].startswith("cadence bench contention --model mlp")
    assert [r["size"] for r in data["rows"]] == [16384, 65536]
    for row in data["rows"]:
        assert row["alone_s"] > 0 and row["with_traffic_s"] > 0
        assert row["messages"] >= 1  # traffic really ran beside the compute
        assert row["bytes"] == row["messages"] * row["size"]
    assert len(data["raw"]["rows"]) == 2 * 2  # 2 ranks x 2 sizes x 1 round
    assert len(data["raw"]["solo_s"]) == 2 * 3  # each rank: before and after each size
    fit = ContentionFit.load(tmp_path / "out/c.json")
    assert fit.cpu_s_per_message >= 0 and fit.cpu_s_per_byte >= 0
    assert "fit:" in proc.stdout and "per byte" in proc.stdout


def test_one_size_is_one_line(tmp_path: Path) -> None:
    proc = run_cadence("bench", "contention", "--sizes", "1MB", cwd=tmp_path, timeout=60)
    assert_one_line_error(proc, "two sizes")
