"""`cadence bench runtime-cost` end to end on this machine (no network, no root), and bad input."""

import json
import statistics

from tests.cli_helpers import assert_one_line_error, run_cadence


def test_runtime_cost_times_each_runtime_against_compute_in_every_process(tmp_path):
    proc = run_cadence(
        "bench", "runtime-cost", "--models", "mlp", "--procs", "2", "--rounds", "2",
        "--block-steps", "4", "--block-seconds", "0.2", "--out", "out/cost.json",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "| mlp |" in proc.stdout
    report = json.loads((tmp_path / "out" / "cost.json").read_text())
    assert report["benchmark"] == "runtime-cost"
    assert report["command"].startswith("cadence bench runtime-cost")
    (row,) = report["rows"]
    assert row["model"] == "mlp"
    assert len(row["rounds_s"]) == 2  # one set of turns per process
    for rounds in row["rounds_s"]:
        assert set(rounds) == {"compute", "ddp", "cadence"}
        assert all(len(t) == 2 and all(0 < s < 5 for s in t) for t in rounds.values())
    for strategy, variant in (("ddp", "ddp"), ("cadence-dp", "cadence")):
        ratios = [
            t / c
            for rounds in row["rounds_s"]
            for t, c in zip(rounds[variant], rounds["compute"], strict=True)
        ]
        assert row["slowdown"][strategy] == statistics.median(ratios)


def test_runtime_cost_bad_input_is_one_line(tmp_path):
    proc = run_cadence("bench", "runtime-cost", "--procs", "0", cwd=tmp_path)
    assert_one_line_error(proc, "--procs must be at least 1")
    proc = run_cadence("bench", "runtime-cost", "--models", "nope", cwd=tmp_path)
    assert_one_line_error(proc, "unknown model 'nope'")
