"""`cadence bench dp` end to end on the loopback (no cap, so no root needed), and bad input."""

import json

import pytest

from tests.cli_helpers import assert_one_line_error, run_cadence


def test_bench_dp_measures_ddp_and_cadence_and_writes_json_png_and_table(tmp_path):
    # The bucket and heap variants' runs and ratios: tests/unit/test_bench_dp_rows.py.
    proc = run_cadence(
        "bench", "dp", "--models", "mlp", "--caps", "none", "--steps", "11", "--repeats", "1",
        "--ddp-buckets-mb", "", "--out", "out/bench.json", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert report["command"].startswith("cadence bench dp")
    (row,) = report["rows"]
    assert row["model"] == "mlp" and row["cap"] == "none"
    assert set(row["iteration_s"]) == {"ddp", "cadence"}
    assert all(0 < t < 5 for t in row["iteration_s"].values())
    # No cap: the loopback is no link to measure, so the bound is compute alone.
    assert row["wire_s"] == 0.0 and row["bound_s"] == row["compute_s"] > 0
    assert row["wire_runs_s"] == [] and row["line_wire_s"] == 0.0
    assert row["line_bound_s"] == row["bound_s"]
    # Compute alone is measured beside the variants, once per round.
    assert row["compute_runs_s"] == [row["compute_s"]] and row["model_compute_s"] > 0
    assert row["fixed_heap_variants"] == ["cadence"]
    assert row["cadence_over_ddp"] == pytest.approx(
        row["iteration_s"]["cadence"] / row["iteration_s"]["ddp"]
    )
    assert (tmp_path / "out" / "bench.png").stat().st_size > 5_000
    assert "| mlp | none |" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--models", "alexnet"], "unknown model 'alexnet'"),
        (["--caps", "fast"], "fast"),
        (["--steps", "5"], "--steps must be at least 11"),
        (["--ddp-buckets-mb", "big"], "--ddp-buckets-mb must be numbers"),
        (["--caps", "none", "--workers", "1"], "--workers >= 2"),
    ],
)
def test_bench_dp_bad_input_is_one_line(tmp_path, args, needle):
    assert_one_line_error(run_cadence("bench", "dp", *args, cwd=tmp_path), needle)
