"""`cadence bench soak`, short and on the loopback: every rank's samples reach the JSON, the
table and the picture; a run past its time limit is stopped and reported as such."""

from __future__ import annotations

import json
from pathlib import Path

from cadence.bench.soak import SoakBenchConfig, run_soak_bench


def test_short_soak_writes_json_table_and_png(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    config = SoakBenchConfig(
        strategies=("cadence-dp",), cap="none", steps=30, start_step=10, every=10,
        out=str(out), run_root=str(tmp_path / "runs"),
    )  # fmt: skip
    lines: list[str] = []
    run_soak_bench(config, "cadence bench soak (test)", lines.append)
    report = json.loads(out.read_text())
    assert report["runs"]["cadence-dp"]["finished"]
    assert report["runs"]["cadence-dp"]["steps_reached"] == 30
    assert [r["process"] for r in report["rows"]] == ["rank 0", "rank 1"]
    for row in report["rows"]:
        assert (row["start_step"], row["end_step"]) == (10, 30)
        assert row["rss_start_bytes"] > 0 and row["threads_start"] > 1 and row["sockets_start"] > 0
    assert [s["steps"] for s in report["series"]] == [[10, 20, 30]] * 2
    assert sum(line.startswith("| cadence-dp | rank ") for line in lines) == 2
    assert out.with_suffix(".png").stat().st_size > 0
    assert not list((tmp_path / "runs").glob("*/checkpoint.pt"))


def test_time_limit_stops_the_run(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    config = SoakBenchConfig(
        strategies=("zero",), cap="none", steps=100_000, start_step=10, every=10,
        time_limit_s=1.0, out=str(out), run_root=str(tmp_path / "runs"),
    )  # fmt: skip
    lines: list[str] = []
    run_soak_bench(config, "cadence bench soak (test)", lines.append)
    run = json.loads(out.read_text())["runs"]["zero"]
    assert not run["finished"] and run["steps_reached"] < 100_000
    assert any("stopped by --time-limit" in line for line in lines)
