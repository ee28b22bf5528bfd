"""`cadence train --strategy pipeline --schedule auto`: rank 0 plans (probed link, profiles,
memory limit), every rank runs the choice, metrics.json records it; no fit is one line."""

import json
from pathlib import Path

from tests.cli_helpers import assert_one_line_error, run_cadence

ARGS = ("train", "--model", "mlp", "--strategy", "pipeline", "--workers", "2", "--stages", "2",
        "--schedule", "auto", "--batch-size", "16", "--steps", "3")


def test_auto_plans_at_start_and_records_the_choice(tmp_path: Path) -> None:
    proc = run_cadence(*ARGS, "--memory-limit", "64MiB", "--out", "out", "--name", "auto",
                       cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "out" / "auto" / "metrics.json").read_text())
    plan = metrics["pipeline_plan"]
    best = plan["best"]
    assert plan["probed"] and plan["bandwidth_bytes_per_s"] > 0 and plan["latency_s"] > 0
    assert best in plan["candidates"] and best["fits"]
    assert max(best["peak_bytes"]) <= 64 * 2**20 == plan["memory_limit"]
    fitting = [c["predicted_s"] for c in plan["candidates"] if c["fits"]]
    assert best["predicted_s"] == min(fitting)
    assert 16 % best["microbatches"] == 0
    assert f"pipeline plan: pick {best['schedule']} x {best['microbatches']}" in proc.stdout
    assert len(metrics["step_loss"]) == 3 and metrics["step_loss"][-1] < metrics["step_loss"][0]


def test_auto_with_a_limit_nothing_fits_is_one_line(tmp_path: Path) -> None:
    proc = run_cadence(*ARGS, "--memory-limit", "1kib", "--out", "out", cwd=tmp_path, timeout=240)
    assert_one_line_error(proc, "no schedule fits --memory-limit 1.00KiB per stage")
