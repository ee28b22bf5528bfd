"""`cadence bench sim` scored on alternate runs: how far its score moves with which runs of
one benchmark it is given (`cadence.sim.bench_halves`)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.sim.bench_halves import halves_line, halves_summary, row_halves
from tests.unit.test_bench_costs import RESULTS, _bench_sim_args, _one_row_matrix


def _row(errors: list[float], key: str = "run_errors", **extra: object) -> dict[str, object]:
    row = {"model": "cnn_lstm", "strategy": "ddp", "bandwidth": "400mbit", "run": "m.json",
           "error": statistics.median(errors), key: errors}  # fmt: skip
    return {**row, **extra}


def test_a_rows_halves_are_the_medians_of_its_odd_and_its_even_samples() -> None:
    assert row_halves(_row([0.01, -0.10, 0.02, -0.20, 0.03])) == pytest.approx((0.02, -0.15))
    assert row_halves(_row([0.05, -0.05], "round_errors")) == pytest.approx((0.05, -0.05))
    assert row_halves(_row([0.04])) is None  # one sample: nothing to split
    assert row_halves({"error": 0.04}) is None  # a row from a single `cadence train` run


def test_both_halves_are_scored_over_every_row_and_the_widest_row_is_named() -> None:
    wide = _row([-0.018, -0.104, -0.017, -0.166, -0.168])  # run a's cnn_lstm DDP at 400mbit
    narrow = _row([0.01, 0.02, 0.03, 0.02], strategy="cadence-dp")
    single = {"model": "gpt_mini", "strategy": "ddp", "bandwidth": "1gbit", "error": -0.05}
    summary = halves_summary([wide, narrow, single])
    assert summary is not None
    assert summary["samples"] == "runs"
    assert summary["rows_split"] == 2
    # odd runs: -0.018 (median of -0.018, -0.017, -0.168), 0.02, and the single row's -0.05
    assert summary["odd_samples"]["mean_abs_error"] == pytest.approx((0.018 + 0.02 + 0.05) / 3)
    assert summary["odd_samples"]["worst_abs_error"] == pytest.approx(0.05)
    # even runs: -0.135 (median of -0.104, -0.166), 0.02, -0.05
    assert summary["even_samples"]["worst_abs_error"] == pytest.approx(0.135)
    widest = summary["widest"]
    assert (widest["strategy"], widest["odd_error"], widest["even_error"]) == pytest.approx(
        ("ddp", -0.018, -0.135)
    )
    line = halves_line(summary)
    assert line.startswith("scored on alternate runs (odd | even): mean |error| 2.9% | 6.8%")
    assert "worst 5.0% | 13.5%" in line
    assert "differ by up to 11.7 points (cnn_lstm ddp 400mbit: -1.8% | -13.5%)" in line


def test_no_row_with_two_samples_gives_no_halves() -> None:
    assert halves_summary([_row([0.04]), {"model": "m", "error": 0.01}]) is None


def test_bench_sim_prints_and_saves_the_halves_before_its_score_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.json"
    args = _bench_sim_args(_one_row_matrix(tmp_path))  # cnn_lstm at 400mbit, five runs
    assert main([*args, "--costs", str(RESULTS / "costs-20261126"), "--json", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("mean |error|")  # the score stays last for scripts
    assert lines[-2].startswith("scored on alternate runs (odd | even):")
    report = json.loads(out.read_text())
    halves = report["halves"]
    assert halves["rows_split"] == 2  # DDP and cadence-dp, five runs each
    for row in report["rows"]:
        assert len(row["run_errors"]) == 5
    odd = [abs(statistics.median(r["run_errors"][0::2])) for r in report["rows"]]
    even = [abs(statistics.median(r["run_errors"][1::2])) for r in report["rows"]]
    assert halves["odd_samples"]["worst_abs_error"] == pytest.approx(max(odd))
    assert halves["even_samples"]["worst_abs_error"] == pytest.approx(max(even))
    assert halves["widest"]["model"] == "cnn_lstm"
