"""The training loop's own per-step work in a profile: the batch's way in, the step in the loop."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from cadence.errors import UserError
from cadence.models import get_model_spec
from cadence.profile import Profile, profile_zoo_model
from cadence.profile.in_loop import batch_input_s, steps_in_loop, warm_up

CPU = torch.device("cpu")


def test_the_batch_costs_more_the_more_bytes_it_gathers() -> None:
    small = batch_input_s(torch.randn(2, 8), torch.zeros(2, dtype=torch.long), CPU)
    large = batch_input_s(torch.randn(256, 3, 64, 64), torch.zeros(256, dtype=torch.long), CPU)
    assert 0 < small < large, (small, large)


def test_steps_in_the_loop_leave_the_model_as_it_was() -> None:
    # mlp: Adam's step (~0.7 ms here) outweighs the step without it (~0.5 ms), so the
    # difference stays above the machine's noise; cnn_lstm's ~1.5 ms step under a ~10 ms
    # iteration once came out at 0 on a loaded CI machine. 21 turns: 10 of 10 runs passed
    # beside two busy loops on this 2-core machine (5 turns failed 3 of 14).
    spec = get_model_spec("mlp")
    torch.manual_seed(0)
    model = spec.build()
    x, y = spec.synthetic_batch(4)
    before = [p.detach().clone() for p in model.parameters()]
    warm_up(model, x, y, seconds=0.05)
    loop = steps_in_loop(model, x, y, ("adam", "sgd"), iterations=21, warmup=2)
    steps = loop.optimizer_step_s
    assert set(steps) == {"adam", "sgd"} and all(s >= 0 for s in steps.values())
    assert loop.iteration_s > 0
    # Adam reads and writes four tensors the size of the parameters: never free.
    assert steps["adam"] > 0
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


def test_a_cpu_profile_times_the_batch_and_the_step_alone(tmp_path: Path) -> None:
    profile = profile_zoo_model("cnn", batch_size=8, iterations=2, warmup=1)
    assert profile.input_s is not None and profile.input_s > 0
    assert profile.optimizer_step_timing == "alone"
    path = tmp_path / "p.json"
    profile.save(path)
    assert Profile.load(path) == profile


def test_older_profiles_load_without_the_new_figures(tmp_path: Path) -> None:
    profile = profile_zoo_model("cnn", batch_size=8, iterations=1, warmup=0)
    saved = profile.to_dict()
    del saved["input_s"], saved["optimizer_step_timing"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(saved))
    old = Profile.load(path)
    assert old.input_s is None and old.optimizer_step_timing == "alone"


def test_an_unknown_step_timing_is_a_one_line_error(tmp_path: Path) -> None:
    profile = profile_zoo_model("cnn", batch_size=8, iterations=1, warmup=0)
    path = tmp_path / "bad.json"
    dataclasses.replace(profile, optimizer_step_timing="guessed").save(path)
    with pytest.raises(UserError, match="optimizer_step_timing 'guessed'"):
        Profile.load(path)


def test_a_model_with_nothing_to_train_steps_for_free() -> None:
    spec = get_model_spec("cnn")
    torch.manual_seed(0)
    model = spec.build()
    for p in model.parameters():
        p.requires_grad_(False)
    x, y = spec.synthetic_batch(4)
    x.requires_grad_(True)  # something for backward to reach
    loop = steps_in_loop(model, x, y, ("adam", "sgd"), iterations=2, warmup=0)
    assert loop.optimizer_step_s == {"adam": 0.0, "sgd": 0.0} and loop.iteration_s > 0
