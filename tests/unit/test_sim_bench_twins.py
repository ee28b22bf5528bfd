"""`cadence bench sim` on `dp-paired --twins` files: each round's prediction scored against
the identical twin as well as the original (`cadence.sim.bench_twins`)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from cadence.sim.bench import table_lines
from cadence.sim.bench_dp import predict_bench_dp
from cadence.sim.bench_twins import twin_fields, twins_line, twins_summary
from tests.unit.test_sim_cli import zoo_profile


def test_a_twin_is_scored_with_the_same_predictions_as_its_original() -> None:
    predicted = [1.0, 1.0, 1.0]
    fields = twin_fields(predicted, original=[1.25, 1.0, 1.0], twin=[1.0, 0.8, 1.25])
    assert fields["twin_round_errors"] == pytest.approx([0.0, 0.25, -0.2])
    assert fields["twin_error"] == pytest.approx(0.0)  # the median round
    assert fields["twin_gap"] == pytest.approx(-0.2)  # twin / original: 0.8, 0.8, 1.25
    assert twin_fields([1.0], [1.0], [1.1])["twin_gap"] == pytest.approx(0.1)


def test_the_summary_scores_both_copies_and_names_the_twin_that_moved_most() -> None:
    rows = [
        {"model": "a", "strategy": "ddp", "bandwidth": "1gbit", "error": -0.12,
         "twin_error": -0.04, "twin_gap": -0.08},
        {"model": "b", "strategy": "cadence-dp", "bandwidth": "1gbit", "error": 0.02,
         "twin_error": 0.0, "twin_gap": 0.02},
        {"model": "c", "strategy": "ddp", "bandwidth": "1gbit", "error": 0.5},  # no twin
    ]  # fmt: skip
    summary = twins_summary(rows)
    assert summary is not None and summary["rows"] == 2
    assert summary["against_twins"] == {"mean_abs_error": pytest.approx(0.02),
                                        "worst_abs_error": pytest.approx(0.04)}  # fmt: skip
    assert summary["against_originals"]["worst_abs_error"] == pytest.approx(0.12)
    assert summary["twins_as_predictions"] == {"mean_abs_error": pytest.approx(0.05),
                                               "worst_abs_error": pytest.approx(0.08)}  # fmt: skip
    assert summary["widest_gap"]["model"] == "a"
    line = twins_line(summary)
    assert "against the twins mean |error| 2.0%, worst 4.0%" in line
    assert "(against the originals 7.0%, 12.0%)" in line
    assert "predictions of their originals: 5.0%, worst 8.0% (a ddp 1gbit)" in line
    assert twins_summary(rows[2:]) is None


def test_bench_sim_reads_the_twins_of_a_paired_file(tmp_path: Path) -> None:
    rounds = {
        "compute": [0.2, 0.4, 0.3],
        "ddp": [0.3, 0.6, 0.45],
        "cadence": [0.25, 0.5, 0.35],
        "ddp-twin": [0.33, 0.6, 0.4],
        "cadence-twin": [0.25, 0.5, 0.35],  # timed exactly as its original
    }
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.3, "rounds_s": rounds,
           "iteration_s": {k: statistics.median(v) for k, v in rounds.items()}}  # fmt: skip
    path = tmp_path / "paired.json"
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": None}, "rows": [row]}))
    ddp, cadence = predict_bench_dp(
        [str(path)], {"cnn": zoo_profile("cnn")}, 1.0, optimizer_step_s=0.0
    )[0]
    # A twin measured as its original scores as it does.
    assert cadence["twin_round_errors"] == pytest.approx(cadence["round_errors"])
    assert cadence["twin_gap"] == 0.0
    # Otherwise the same per-round predictions, against the twin's own rounds.
    predicted = [(1 + e) * m for e, m in zip(ddp["round_errors"], rounds["ddp"], strict=True)]
    expected = [(p - t) / t for p, t in zip(predicted, rounds["ddp-twin"], strict=True)]
    assert ddp["twin_round_errors"] == pytest.approx(expected)
    assert ddp["twin_error"] == pytest.approx(statistics.median(expected))
    assert ddp["twin_gap"] == pytest.approx(0.0)  # 1.1, 1.0, 0.889: the middle one
    # Printed beside the halves, before the score line that scripts read last.
    lines = table_lines([ddp, cadence])
    assert lines[-2].startswith("A/A twins (2 rows): scored against the twins")
    assert lines[-1].startswith("mean |error|")
    # A file without twins has none of these.
    del rounds["ddp-twin"], rounds["cadence-twin"]
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": None}, "rows": [row]}))
    rows, _ = predict_bench_dp([str(path)], {"cnn": zoo_profile("cnn")}, 1.0, optimizer_step_s=0.0)
    assert not any("twin_error" in r for r in rows)
