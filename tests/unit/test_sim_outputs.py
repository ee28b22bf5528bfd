"""Chrome trace and timeline PNG of a simulated schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.dp.plan import build_plan
from cadence.sim import simulate_dp
from tests.unit.test_sim_dp import LINK, TWO, params_of


def test_chrome_trace_has_a_row_per_resource_and_the_simulated_times(tmp_path: Path) -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    result = simulate_dp(TWO, plan, 2, LINK)
    path = tmp_path / "trace.json"
    result.write_trace(path)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {"w0.compute", "w0.comm", "w0.nic"}
    flows = [e for e in events if e["ph"] == "X" and e["cat"] == "allreduce"]
    assert len(flows) == 2 * 3  # two chunks in each of three iterations
    first = min(flows, key=lambda e: e["ts"])
    assert (first["name"], first["ts"], first["dur"]) == (
        "ar c0",
        pytest.approx(4e6),
        pytest.approx(5e6),  # 400 B at 80 B/s: c1 queues behind it
    )
    memory = [e["args"]["bytes"] for e in events if e["ph"] == "C"]
    assert max(memory) == result.peak_memory_bytes == 2200
    assert trace["otherData"]["iteration_time_s"] == pytest.approx(14.0)


def test_timeline_png_is_written(tmp_path: Path) -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    path = tmp_path / "timeline.png"
    simulate_dp(TWO, plan, 2, LINK).write_png(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
