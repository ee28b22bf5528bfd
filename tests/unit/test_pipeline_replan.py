"""Re-planning's pure parts: when it happens, what it records and prints, bad input."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from cadence.comm.cost import AlphaBeta
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.pipeline.replan import Replanner, consume_request, decide


def _record(best: tuple[str, int, float], others: list[tuple[str, int, float]]) -> dict[str, Any]:
    rows = [{"schedule": s, "microbatches": m, "predicted_s": t} for s, m, t in [best, *others]]
    return {"best": rows[0], "candidates": rows}


LINK = AlphaBeta(alpha_s=0.002, beta_s_per_byte=1e-8)  # 100 MB/s, 2 ms a message


def test_decide_records_old_and_new_pick_under_the_new_link() -> None:
    record = _record(("kfkb:2", 8, 0.030), [("gpipe", 1, 0.045)])
    replan = decide(record, 10, "every 5", ("gpipe", 1), LINK)
    assert replan.switched
    assert (replan.old_predicted_s, replan.new_predicted_s) == (0.045, 0.030)
    assert replan.bandwidth_bytes_per_s == pytest.approx(1e8) and replan.latency_s == 0.002
    assert replan.to_json()["switched"] is True
    assert replan.line() == (
        "pipeline re-plan at step 10 (every 5): link 100.0 MB/s, latency 2.00 ms; "
        "switch gpipe x 1 (45.0 ms) -> kfkb:2 x 8 (30.0 ms predicted)"
    )


def test_decide_keeps_the_pick_when_it_is_still_best_or_the_planner_fails() -> None:
    same = decide(_record(("1f1b", 4, 0.02), []), 3, "requested", ("1f1b", 4), None)
    assert not same.switched and not same.probed
    assert same.line().endswith("no link to probe; keep 1f1b x 4 (20.0 ms predicted)")
    failed = decide("no schedule fits", 3, "requested", ("1f1b", 4), LINK)
    assert not failed.switched and failed.error == "no schedule fits"
    assert math.isnan(failed.new_predicted_s)
    assert failed.line().endswith("keep 1f1b x 4: no schedule fits")


def _replanner(**replan: Any) -> Replanner:
    config = TrainConfig.from_flat(strategy="pipeline", schedule="auto", **replan)
    return Replanner(
        config, replicas=1, is_main=True, ranges=((0, 1), (1, 2)), inputs=None,
        probe=lambda: None,
    )  # fmt: skip


def test_periodic_replans_skip_the_start(tmp_path: Path) -> None:
    planner = _replanner(replan_every=3)
    assert [planner.reason(s) for s in range(7)] == [
        None, None, None, "every 3", None, None, "every 3",
    ]  # fmt: skip


def test_a_request_file_asks_once_and_a_stale_one_nothing(tmp_path: Path) -> None:
    request = tmp_path / "replan"
    request.touch()
    planner = _replanner(replan_file=str(request), replan_every=4)
    assert not request.exists()  # removed at start
    assert planner.reason(1) is None
    request.touch()
    assert planner.reason(2) == "requested" and not request.exists()
    assert planner.reason(3) is None
    request.touch()
    assert planner.reason(4) == "every 4" and not request.exists()  # served by the period
    assert planner.reason(5) is None
    assert not consume_request(request)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replan_every": -1, "schedule": "auto"}, "--replan-every must be 0 (never) or more"),
        ({"replan_every": 5}, "--replan-every re-runs the pipeline planner: use it with "
                              "--strategy pipeline --schedule auto (got --strategy pipeline "
                              "--schedule 1f1b)"),
        ({"replan_file": "x", "schedule": "auto", "strategy": "ddp"},
         "--replan-file re-runs the pipeline planner"),
    ],
)  # fmt: skip
def test_bad_replan_input(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig.from_flat(**{"strategy": "pipeline", **kwargs})
