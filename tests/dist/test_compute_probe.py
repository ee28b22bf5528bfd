"""The compute probe a run can take after its steps (`TrainConfig.compute_probe_steps`): every
rank agrees on its figures, and it changes nothing of what the run trained."""

from typing import Any

import pytest
import torch

from cadence.comm import init_from_env
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.testing import run_ranks
from cadence.train.loop import run_training


def _config(strategy: str, probe_steps: int) -> TrainConfig:
    return TrainConfig(
        model="cnn", strategy=strategy, workers=2, batch_size=32, steps=4,
        eval_every_epoch=False, compute_probe_steps=probe_steps,
    )  # fmt: skip


def _train_rank(rank: int, world_size: int, strategy: str, probe_steps: int) -> dict[str, Any]:
    metrics = run_training(_config(strategy, probe_steps), init_from_env(), None)
    return {"loss": metrics["step_loss"], "probe": metrics.get("compute_probe")}


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


def test_a_probe_is_only_for_strategies_that_compute_the_whole_model():
    with pytest.raises(UserError, match="for --strategy ddp, cadence-dp, not pipeline"):
        TrainConfig(strategy="pipeline", workers=2, compute_probe_steps=3)
    with pytest.raises(UserError, match="compute_probe_steps must be >= 0"):
        TrainConfig(compute_probe_steps=-1)
