"""The compute probe a run can take after its steps (`TrainConfig.compute_probe_steps`) or in
blocks between them (`TrainConfig.interleaved_probe_every`): every rank agrees on its figures,
and it changes nothing of what the run trained."""

import statistics
from typing import Any

import pytest
import torch

from cadence.comm import init_from_env
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.testing import run_ranks
from cadence.train.loop import run_training


def _config(strategy: str, probe_steps: int, every: int = 0, steps: int = 4) -> TrainConfig:
    return TrainConfig(
        model="cnn", strategy=strategy, workers=2, batch_size=32, steps=steps,
        eval_every_epoch=False, compute_probe_steps=probe_steps, interleaved_probe_every=every,
    )  # fmt: skip


def _train_rank(
    rank: int, world_size: int, strategy: str, probe_steps: int, every: int = 0, steps: int = 4
) -> dict[str, Any]:
    metrics = run_training(_config(strategy, probe_steps, every, steps), init_from_env(), None)
    keys = ("iteration_times_s", "timed_from_step", "median_iteration_s", "probe_disturbed_steps")
    return {
        "loss": metrics["step_loss"],
        "probe": metrics.get("compute_probe"),
        "interleaved": metrics.get("interleaved_compute_probe"),
        **{key: metrics.get(key) for key in keys},
    }


@pytest.mark.parametrize("strategy", ["ddp", "cadence-dp"])
def test_the_probe_is_agreed_on_every_rank_and_leaves_training_as_it_was(strategy):
    plain = run_ranks(_train_rank, 2, strategy, 0, timeout=180)
    probed = run_ranks(_train_rank, 2, strategy, 5, timeout=180)
    for a, b in zip(plain, probed, strict=True):
        assert a["probe"] is None
        torch.testing.assert_close(b["loss"], a["loss"], rtol=1e-5, atol=1e-6)
    first, second = (r["probe"] for r in probed)
    assert first == second  # the slowest rank's figures, agreed by a collective
    assert first["steps"] == 5
    # Each step's slowest rank is at least either rank's step, so its median is too.
    assert first["lockstep_median_s"] >= first["slowest_rank_median_s"] > 0
    # The optimizer step is part of every step, so each rank's median of it is below its
    # median step, and so are their maxima.
    assert 0 < first["optimizer_step_median_s"] < first["slowest_rank_median_s"]


@pytest.mark.parametrize("strategy", ["ddp", "cadence-dp"])
def test_blocks_between_the_steps_leave_training_as_it_was_and_their_next_steps_out(strategy):
    # Two-step blocks after steps 3 and 6 of 8 (none after the last).
    plain = run_ranks(_train_rank, 2, strategy, 0, 0, 8, timeout=180)
    probed = run_ranks(_train_rank, 2, strategy, 0, 3, 8, timeout=180)
    for a, b in zip(plain, probed, strict=True):
        assert a["interleaved"] is None and a["probe_disturbed_steps"] is None
        torch.testing.assert_close(b["loss"], a["loss"], rtol=1e-5, atol=1e-6)
    first, second = (r["interleaved"] for r in probed)
    assert first == second and first["steps"] == 4
    assert first["lockstep_median_s"] >= first["slowest_rank_median_s"] > 0
    assert 0 < first["optimizer_step_median_s"] < first["slowest_rank_median_s"]
    for r in probed:
        # The step after each block starts with nothing on the wire: not in the median.
        assert r["probe_disturbed_steps"] == [3, 6]
        times = r["iteration_times_s"]
        kept = [t for i, t in enumerate(times) if i >= r["timed_from_step"] and i not in (3, 6)]
        assert len(times) == 8 and r["median_iteration_s"] == statistics.median(kept)


def test_a_probe_is_only_for_strategies_that_compute_the_whole_model():
    with pytest.raises(UserError, match="for --strategy ddp, cadence-dp, not pipeline"):
        TrainConfig(strategy="pipeline", workers=2, compute_probe_steps=3)
    with pytest.raises(UserError, match="for --strategy ddp, cadence-dp, not pipeline"):
        TrainConfig(strategy="pipeline", workers=2, interleaved_probe_every=3)
    with pytest.raises(UserError, match="compute_probe_steps must be >= 0"):
        TrainConfig(compute_probe_steps=-1)
    with pytest.raises(UserError, match="interleaved_probe_every must be >= 0"):
        TrainConfig(interleaved_probe_every=-1)
    with pytest.raises(UserError, match="interleaved compute probe needs --autotune off"):
        TrainConfig(strategy="cadence-dp", workers=2, interleaved_probe_every=3,
                    autotune="guided")  # fmt: skip
