"""The resumable checkpoint's pieces on one process: the directory swap and which checkpoint a
crash leaves, the settings check, and the pipeline's optimizer state when the stages are cut
elsewhere on resume."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.train import resume
from cadence.train.rank_state import _stage_optimizer_state


def _save(run: Path, step: int) -> None:
    resume.save(run, 0, {"step": step}, {"x": torch.tensor([step])})


def test_swap_keeps_one_complete_checkpoint(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    assert resume.find(tmp_path) == tmp_path / "checkpoint"
    assert not (tmp_path / resume.PREV_DIRNAME).exists()
    assert resume.load_manifest(tmp_path)[1]["step"] == 2
    assert resume.load_rank(tmp_path / "checkpoint", 0)["x"].item() == 2
    # Killed between the two renames: only the previous one is there, and it is taken.
    os.replace(tmp_path / "checkpoint", tmp_path / resume.PREV_DIRNAME)
    assert resume.find(tmp_path) == tmp_path / resume.PREV_DIRNAME
    _save(tmp_path, 3)  # the next save completes the swap
    assert resume.load_manifest(tmp_path)[1]["step"] == 3
    assert not (tmp_path / resume.PREV_DIRNAME).exists()


def test_a_killed_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    _save(tmp_path, 1)

    def die() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        resume.save(tmp_path, 0, {"step": 2}, {}, before_swap=die)
    assert resume.load_manifest(tmp_path)[1]["step"] == 1


def test_settings_that_change_the_trajectory_must_match(tmp_path: Path) -> None:
    saved = TrainConfig.from_flat(model="mlp", lr=1e-3, steps=10)
    manifest = {"world_size": 2, "config": resume.fingerprint(saved)}
    longer = TrainConfig.from_flat(model="mlp", lr=1e-3, steps=50, name="x", checkpoint_every=5)
    resume.check_matches(manifest, longer, 2, tmp_path)
    with pytest.raises(UserError, match="written with --lr 0.001, this job has 0.01"):
        resume.check_matches(manifest, TrainConfig.from_flat(model="mlp", lr=1e-2), 2, tmp_path)
    with pytest.raises(UserError, match="written by 2 workers, this job has 4"):
        resume.check_matches(manifest, longer, 4, tmp_path)
    with pytest.raises(UserError, match="no checkpoint there"):
        resume.load_manifest(tmp_path)


def test_pipeline_state_follows_the_parameters_to_their_new_stage(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3)).sum().backward()
    optimizer.step()
    full = optimizer.state_dict()
    saved_ranges = [[0, 1], [1, 3]]  # stage 0: layer 0 (params 0, 1); stage 1: params 2-5
    for rank, keep in enumerate(({0, 1}, {2, 3, 4, 5})):
        state = {k: v for k, v in full["state"].items() if k in keep}
        torch.save({"optimizer": {**full, "state": state}}, tmp_path / f"rank{rank}.pt")
    fresh = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    owner = SimpleNamespace(ranges=((0, 2), (2, 3)), stage=model[0:2])  # cut elsewhere now
    mine = torch.load(tmp_path / "rank0.pt")
    got = _stage_optimizer_state(fresh, owner, {**mine, "ranges": saved_ranges}, tmp_path)
    assert sorted(got["state"]) == [0, 1, 2, 3]
    for k in range(4):
        assert torch.equal(got["state"][k]["momentum_buffer"], full["state"][k]["momentum_buffer"])
