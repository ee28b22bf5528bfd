"""How the simulator calibrates a profile's per-block times to its measured iteration."""

from __future__ import annotations

import dataclasses

import pytest

from cadence.sim.compute import block_costs
from tests.unit.test_sim_cli import zoo_profile


def test_forward_and_gradients_are_scaled_to_their_own_measured_share() -> None:
    # Per-block timings: forward 0.01 s a block, gradients 0.02 s (one of them double counted).
    blocks = zoo_profile("cnn").blocks
    forward = sum(b.forward_s for b in blocks)
    grads = sum(b.input_grad_s + b.weight_grad_s for b in blocks)
    loss = 0.001
    measured_forward, measured_rest = 0.9 * forward, 0.5 * grads
    profile = dataclasses.replace(
        zoo_profile("cnn"),
        iteration_s=measured_forward + measured_rest + loss,
        loss_s=loss,
        forward_pass_s=measured_forward,
    )
    costs = block_costs(profile)
    assert sum(costs.forward_s) == pytest.approx(measured_forward)
    assert sum(costs.input_grad_s) + sum(costs.weight_grad_s) == pytest.approx(measured_rest)
    assert costs.compute_s == pytest.approx(profile.iteration_s)
    # Without the measured forward (older profiles) one factor scales both to the same total.
    older = block_costs(dataclasses.replace(profile, forward_pass_s=None))
    assert older.compute_s == pytest.approx(profile.iteration_s)
    assert sum(older.forward_s) / forward == pytest.approx(
        (sum(older.input_grad_s) + sum(older.weight_grad_s)) / grads
    )
    assert sum(older.forward_s) < measured_forward  # the forward share it gets wrong
    # Uncalibrated: the profile's own numbers.
    assert sum(block_costs(profile, calibrate=False).forward_s) == pytest.approx(forward)


def test_a_measured_forward_outside_the_iteration_falls_back_to_one_factor() -> None:
    profile = zoo_profile("cnn")
    bad = dataclasses.replace(profile, forward_pass_s=2 * profile.iteration_s)
    assert block_costs(bad) == block_costs(dataclasses.replace(profile, forward_pass_s=None))
