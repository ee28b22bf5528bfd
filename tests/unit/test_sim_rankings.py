"""`cadence.sim.rankings`: Kendall's tau, one ranking per case of a held-out set, and the
committed ranking set."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadence.sim.held_out import load_held_out, score_row
from cadence.sim.rankings import kendall_tau, rank_cases, ranking_lines

REPO = Path(__file__).resolve().parents[2]


def test_kendall_tau_counts_concordant_and_discordant_pairs() -> None:
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [40, 30, 20, 10]) == -1.0
    assert kendall_tau([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]) == pytest.approx(0.8)  # one swap of 10
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # tau-b: a tie in the prediction is neither concordant nor discordant
    assert kendall_tau([1, 2, 3], [1, 1, 3]) == pytest.approx(2 / (3 * 2) ** 0.5)
    assert kendall_tau([1.0], [2.0]) == 1.0
    with pytest.raises(ValueError):
        kendall_tau([1, 2], [1])


def test_each_case_is_ranked_and_its_pick_scored_by_measured_time() -> None:
    rows = [
        score_row("a", [1.00, 1.02], 0.9),
        score_row("b", [1.20, 1.25], 0.8),  # predicted fastest, measured 20% slower
        score_row("c", [2.0], 1.9),
        score_row("d", [0.5], None),  # not predicted: leaves the case
        score_row("x", [3.0], 3.0),  # no case
    ]
    cases = {"a": "one", "b": "one", "c": "one", "d": "one"}
    (ranking,) = rank_cases(cases, rows)
    assert ranking["measured_order"] == ["a", "b", "c"]
    assert ranking["predicted_order"] == ["b", "a", "c"]
    assert ranking["kendall_tau"] == pytest.approx(1 / 3)
    assert (ranking["pick"], ranking["best"]) == ("b", "a")
    assert ranking["pick_over_best"] == pytest.approx(1.225 / 1.01)
    assert not ranking["pick_within_best_runs"] and not ranking["met"]
    lines = ranking_lines([ranking])
    assert "0 of 1 cases meet tau >= 0.8" in lines[-1] and "1 missed" in lines[-1]
    assert "  one measured:  a < b < c" in lines
    assert ranking["swaps"] == [{"measured_faster": "a", "measured_slower": "b",
                                 "runs_overlap": False}]  # fmt: skip
    assert ranking["verdict"] == "missed"


def test_a_case_swapped_only_where_runs_overlap_is_undecided() -> None:
    rows = [
        score_row("a", [1.00, 1.10], 1.0),
        score_row("b", [1.04, 1.08], 0.95),  # measured 1% slower, runs inside a's: a near tie
        score_row("c", [1.5], 1.6),
    ]
    (ranking,) = rank_cases(dict.fromkeys("abc", "one"), rows)
    assert ranking["kendall_tau"] == pytest.approx(1 / 3) and not ranking["met"]
    assert ranking["pick_over_best"] == pytest.approx(1.06 / 1.05)
    assert ranking["verdict"] == "undecided"
    lines = ranking_lines([ranking])
    assert "  one swapped: a measured faster than b (runs overlap)" in lines
    assert "1 undecided" in lines[-1]
    rows[1] = score_row("b", [1.20, 1.25], 0.95)  # now the runs order them: a swap is a miss
    (ranking,) = rank_cases(dict.fromkeys("abc", "one"), rows)
    assert ranking["verdict"] == "missed"


def test_the_committed_ranking_set_has_cases_of_several_candidates() -> None:
    rows = load_held_out(REPO / "benchmarks" / "held_out_rankings.toml")
    cases: dict[str | None, list[str]] = {}
    for row in rows:
        cases.setdefault(row.case, []).append(row.config.job.strategy)
    assert None not in cases and len(cases) >= 3
    assert all(len(strategies) >= 4 for strategies in cases.values())
    assert any(":" in r.config.model.name for r in rows)  # a public-library model
