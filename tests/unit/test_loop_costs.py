"""`cadence.sim.loop_costs`: a compression's in-loop cost, measured, saved and priced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cadence.errors import UserError
from cadence.sim.loop_costs import (
    LoopCosts,
    load_loop_costs,
    loop_costs_for,
    measure_loop_costs,
    measured_methods,
    probe_step_s,
    with_floor,
)
from cadence.sim.methods import Method, StepEstimate, method_step_s, parse_method, parse_methods
from tests.unit.test_sim_strategies import _setup


def test_the_measured_methods_come_each_after_its_uncompressed_strategy() -> None:
    methods = parse_methods(
        "ddp,ddp+powersgd,cadence-dp+sign,cadence-dp+powersgd,ddp+fp16,local-sgd:H16"
    )
    assert [m.name for m in measured_methods(methods)] == [
        "ddp", "ddp+powersgd", "cadence-dp", "cadence-dp+powersgd", "ddp+fp16",
    ]  # fmt: skip


def test_an_overhead_is_the_methods_step_over_its_strategys_never_below_zero() -> None:
    costs = LoopCosts("cnn", 2, 64, {"ddp": 0.010, "ddp+powersgd": 0.016, "cadence-dp": 0.011,
                                     "cadence-dp+powersgd": 0.010, "ddp+fp16": 0.012})  # fmt: skip
    assert costs.overhead_s(parse_method("ddp+powersgd")) == pytest.approx(0.006)
    assert costs.overhead_s(parse_method("cadence-dp+powersgd")) == 0.0  # faster: nothing added
    assert costs.overhead_s(parse_method("ddp+fp16")) is None  # a floor only: it can hide
    assert LoopCosts("cnn", 2, 64, {"ddp": 0.01}).overhead_s(parse_method("ddp+powersgd")) is None


def test_no_step_is_predicted_faster_than_its_loop_on_the_loopback() -> None:
    costs = LoopCosts("cnn", 4, 64, {"ddp": 0.016, "ddp+powersgd": 0.029, "ddp+fp16": 0.019})
    fp16, psgd, ddp = (parse_method(n) for n in ("ddp+fp16", "ddp+powersgd", "ddp"))
    fast = StepEstimate("ddp+fp16", 0.010, 1.0, "simulated")
    raised = with_floor(fast, fp16, costs, 4)
    assert raised.step_s == 0.019 and "raised to the 19.0 ms its loop took" in raised.assumed
    assert with_floor(fast, fp16, costs, 1) == fast  # one worker per host: other conditions
    slow = StepEstimate("ddp", 0.050, 1.0, "simulated")  # a slow link: the wire dominates
    assert with_floor(slow, ddp, costs, 4) == slow
    warm = StepEstimate("ddp+powersgd", 0.030, 1.0, "simulated", 10, 0.012)
    raised = with_floor(warm, psgd, costs, 4)  # the uncompressed start: at least ddp's loop
    assert (raised.step_s, raised.warmup_step_s) == (0.030, 0.016)
    assert with_floor(fast, parse_method("cadence-dp+fp16"), costs, 4) == fast  # not probed


def test_a_probe_is_timed_after_the_uncompressed_start() -> None:
    metrics = {"iteration_times_s": [9.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0], "timed_from_step": 1}
    assert probe_step_s(metrics, 5) == 2.0
    assert probe_step_s(metrics, 0) == 1.0  # the loop's own warm-up is still left out
    with pytest.raises(UserError, match="more steps"):
        probe_step_s(metrics, 8)


def test_loop_costs_are_measured_once_then_read_back(tmp_path: Path) -> None:
    trained: list[tuple[str, int, int, int]] = []

    def train(model: str, method: Method, workers: int, batch: int, steps: int) -> Any:
        trained.append((method.name, workers, batch, steps))
        step = 0.02 if method.compression == "powersgd" else 0.01
        return {"iteration_times_s": [1.0] * 12 + [step] * 30, "timed_from_step": 1}

    methods = parse_methods("ddp,cadence-dp+powersgd")
    costs = measure_loop_costs("cnn", methods, 2, 64, echo=lambda _: None, train=train)
    # Three rounds, alternating the order, so that drift touches both alike.
    plain, psgd = ("cadence-dp", 2, 64, 40), ("cadence-dp+powersgd", 2, 64, 40)
    assert trained == [plain, psgd, psgd, plain, plain, psgd]
    assert costs.overhead_s(parse_method("cadence-dp+powersgd")) == pytest.approx(0.01)
    assert costs.runs_s["cadence-dp"] == [0.01] * 3
    path = tmp_path / "costs.json"
    assert loop_costs_for(path, "cnn", methods, 2, 64, 10, echo=lambda _: None, train=train)
    assert len(trained) == 12 and path.exists()  # measured and saved
    assert loop_costs_for(path, "cnn", methods, 2, 64, 10) == costs  # read back, not measured
    assert len(trained) == 12
    with pytest.raises(UserError, match="not gpt_mini on 2 at 64"):
        loop_costs_for(path, "gpt_mini", methods, 2, 64, 10)
    said: list[str] = []
    more = parse_methods("ddp,cadence-dp+powersgd,ddp+fp16")  # ddp+fp16 was not probed
    again = loop_costs_for(path, "cnn", more, 2, 64, 10, echo=said.append, train=train)
    assert "has no probe of ddp, ddp+fp16" in said[0] and len(trained) == 12 + 4 * 3
    assert set(again.step_s) == {"cadence-dp", "cadence-dp+powersgd", "ddp", "ddp+fp16"}
    assert load_loop_costs(path) == again  # saved over the old file
    path.write_text("{}")
    with pytest.raises(UserError, match="is not a `cadence plan tta --loop-costs` file"):
        load_loop_costs(path)


def test_a_measured_overhead_is_priced_into_the_step() -> None:
    setup = _setup(2, 20e6)
    shapes = [(1000, 1000)] * 4
    for name in ("ddp+powersgd", "cadence-dp+powersgd"):
        method = parse_method(name)
        none = method_step_s(setup, method, shapes=shapes, loop_overhead_s=0.0)
        some = method_step_s(setup, method, shapes=shapes, loop_overhead_s=0.004)
        assert some.step_s == pytest.approx(none.step_s + 0.004)
        assert "4.00 ms measured in the loop" in some.assumed
