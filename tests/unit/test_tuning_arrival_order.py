"""Guided autotuning plans its candidates in the order the runtime's hooks saw the gradients:
the ranking runs when the trials begin, after the warm-up, not when training starts."""

from __future__ import annotations

from collections.abc import Callable

import torch

import cadence
from cadence.dp.autotune import Autotuner, Candidate, SimulatedRanking
from cadence.dp.layers import gradient_arrival_order
from cadence.dp.plan import default_credit
from cadence.models import get_model_spec
from cadence.models.loss import loss_fn
from cadence.sim import plan_dp, simulate_dp
from cadence.sim.command import model_params, zoo_arrival_order
from tests.unit.test_sim_cli import zoo_profile


def test_engine_measures_the_order_its_hooks_saw() -> None:
    spec = get_model_spec("cnn_lstm")
    torch.manual_seed(0)
    model = spec.build()
    inputs, targets = spec.synthetic_batch(4)
    expected = gradient_arrival_order(model, lambda m: loss_fn(m(inputs), targets))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, optimizer = cadence.data_parallel(model, optimizer)
    engine = model._cadence_dp_engine
    assert engine.measured_arrival_order() is None  # no backward pass yet
    optimizer.zero_grad()
    loss_fn(model(inputs), targets).backward()
    optimizer.step()
    optimizer.flush()
    assert engine.measured_arrival_order() == expected
    assert expected != tuple(sorted(expected, reverse=True))  # not reverse registration


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.waited = 0.0


def _tuner(clock: _Clock, thresholds: Callable[[], list[Candidate]]) -> Autotuner:
    return Autotuner(
        "guided",
        Candidate(100, None),
        thresholds,
        lambda best: [],
        apply=lambda c: None,
        waited_s=lambda: clock.waited,
        broadcast=False,
        clock=lambda: clock.now,
    )


def _iterate(tuner: Autotuner, clock: _Clock, count: int, waited: float) -> None:
    for _ in range(count):
        tuner.before_forward()
        clock.now += 1.0
        clock.waited += waited


def test_thresholds_are_listed_once_the_trials_begin_and_only_if_they_do() -> None:
    calls: list[int] = []

    def listed() -> list[Candidate]:
        calls.append(1)
        return [Candidate(100, None), Candidate(200, None)]

    clock = _Clock()
    tuner = _tuner(clock, listed)
    _iterate(tuner, clock, 2, waited=0.5)  # the two warm-up iterations
    assert calls == []
    _iterate(tuner, clock, 1, waited=0.5)  # the first trial starts
    assert calls == [1]
    _iterate(tuner, clock, 20, waited=0.5)
    assert tuner.result is not None and tuner.result.trials == 2 and calls == [1]

    calls.clear()
    clock = _Clock()
    tuner = _tuner(clock, listed)
    _iterate(tuner, clock, 5, waited=0.0)  # forwards never waited: nothing to rank
    assert tuner.result is not None and tuner.result.method == "skipped"
    assert calls == []


def test_guided_ranking_predicts_in_the_measured_order() -> None:
    profile = zoo_profile("cnn_lstm")
    params = model_params("cnn_lstm")
    order = zoo_arrival_order("cnn_lstm")
    asked: list[int] = []

    def measured() -> tuple[int, ...]:
        asked.append(1)
        return order

    rate = 125e6  # 1 Gbit/s
    ranking = SimulatedRanking(profile, params, 2, rate, broadcast=False, arrival_order=measured)
    candidates = [Candidate(1 << 20, None), Candidate(64 << 10, None)]
    assert len(ranking.fastest(candidates, 1)) == 1
    assert asked == [1]  # once per ranking, not per candidate
    for candidate in candidates:
        credit = default_credit(candidate.threshold_bytes, sum(p.nbytes for p in params))
        plan = plan_dp(
            profile, params, candidate.threshold_bytes, credit, 2, rate, arrival_order=order
        )
        expected = simulate_dp(profile, plan, 2, rate).iteration_s
        assert ranking.predict(candidate, order) == expected
    # At 1 MiB the measured order fuses other chunks than reverse registration would.
    credit = default_credit(1 << 20, sum(p.nbytes for p in params))
    in_order = plan_dp(profile, params, 1 << 20, credit, 2, rate, arrival_order=order)
    unordered = plan_dp(profile, params, 1 << 20, credit, 2, rate)
    assert in_order.chunks != unordered.chunks
