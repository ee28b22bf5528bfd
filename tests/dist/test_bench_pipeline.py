"""`cadence bench pipeline` end to end on a tiny config in an emulated cluster, and bad input."""

import json
from pathlib import Path

import pytest

from tests.cli_helpers import assert_one_line_error, run_cadence
from tests.conftest import needs_netem


@needs_netem
def test_bench_pipeline_times_every_candidate_and_writes_json_png_and_table(
    tmp_path: Path,
) -> None:
    proc = run_cadence(
        "bench", "pipeline", "--models", "mlp", "--batch-size", "8", "--microbatches", "2",
        "--warmup", "1", "--steps", "10", "--contention", "off", "--out", "out/b.json",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out" / "b.json").read_text())
    assert report["command"].startswith("cadence bench pipeline")
    (sc,) = report["scenarios"]
    names = [r["name"] for r in sc["rows"]]
    assert {"gpipe", "1f1b", "torch-gpipe", "torch-1f1b"} <= set(names)
    for r in sc["rows"]:
        assert len(r["step_s"]) == 10 and 0 < r["measured_s"] < 5
        assert len(r["measured_peak_bytes"]) == 2 and min(r["measured_peak_bytes"]) > 0
        assert r["fits"] == (max(r["peak_bytes"]) <= sc["memory_limit"])
    assert sc["pick_over_best_feasible"] >= 1.0 and -1.0 <= sc["kendall_tau"] <= 1.0
    assert sc["pick_over_best"] >= sc["pick_over_best_feasible"] - 1e-12
    assert all(r["quartiles_s"][0] <= r["measured_s"] <= r["quartiles_s"][1] for r in sc["rows"])
    assert sc["best_measured_s"] == min(r["measured_s"] for r in sc["rows"])
    # compute costs timed on the stage ranks: both stages, every candidate micro-batch size
    assert [sorted(t, key=int) for t in sc["stage_times"]] == [["1", "2", "4", "8"]] * 2
    assert all(f > 0 and b > 0 for t in sc["stage_times"] for f, b in t.values())
    assert sc["plan_time_s"]["profiles"] > 0 and sc["plan_time_s"]["stage_probe"] > 0
    assert (tmp_path / "out" / "b.png").stat().st_size > 5_000
    assert "| gpipe | 2 | cadence |" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--models", "alexnet"], "unknown model 'alexnet'"),
        (["--steps", "5"], "--steps must be at least 10"),
        (["--caps", "1gbit,400mbit"], "--caps takes one value"),
        (["--microbatches", "5"], "--microbatches 5 does not divide --batch-size 16: use one of"),
        (["--memory-limit", "lots"], "bad --memory-limit 'lots'"),
    ],
)
def test_bench_pipeline_bad_input_is_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    assert_one_line_error(run_cadence("bench", "pipeline", *args, cwd=tmp_path, timeout=60), needle)
