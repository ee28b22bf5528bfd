"""`cadence bench heap-cost` end to end on a real capped emulated cluster."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from cadence.bench.heap_cost import round_factor
from tests.cli_helpers import run_cadence
from tests.conftest import needs_netem


@needs_netem
def test_heap_cost_times_ddp_with_the_heap_dynamic_and_fixed_in_turns(tmp_path: Path) -> None:
    proc = run_cadence(
        "bench", "heap-cost", "--models", "mlp", "--caps", "100mbit", "--repeats", "1",
        "--steps", "11", "--probe-steps", "3", "--out", "out/heap.json", cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "| mlp | 100mbit |" in proc.stdout
    assert "mlp @ 100mbit: DDP, heap fixed (round 1/1)" in proc.stdout
    report = json.loads((tmp_path / "out" / "heap.json").read_text())
    assert report["benchmark"] == "heap-cost"
    assert report["command"].startswith("cadence bench heap-cost")
    (row,) = report["rows"]
    assert (row["model"], row["cap"]) == ("mlp", "100mbit")
    for key in ("dynamic_s", "fixed_s", "compute_s", "dynamic_compute_s"):
        assert len(row[key]) == 1 and 0 < row[key][0] < 5
    expected = round_factor(row["dynamic_s"][0], row["fixed_s"][0], row["compute_s"][0])
    assert row["round_factors"] == [expected]
    assert row["factor"] == statistics.median([expected])
