"""A user's own model (not a Sequential: two branches added) on the user's data trains under
ddp, cadence-dp, zero and the parameter server at world size 2 exactly as in one process."""

from pathlib import Path

import pytest
import torch

from cadence.comm import DistContext, init_from_env
from cadence.config import TrainConfig
from cadence.testing import run_ranks
from cadence.train.loop import run_training
from tests.user_parts import two_tower


def _config(strategy: str, workers: int) -> TrainConfig:
    return TrainConfig(
        model="tests.user_parts:two_tower",
        dataset="tests.user_parts:blobs",
        strategy=strategy,
        workers=workers,
        batch_size=32,
        steps=5,
        optimizer="sgd",
        lr=0.1,
        eval_every_epoch=False,
    )


def _train_rank(rank: int, world_size: int, out: str, strategy: str) -> list[float]:
    run_dir = Path(out) if rank == 0 else None
    return run_training(_config(strategy, world_size), init_from_env(), run_dir)["step_loss"]


@pytest.mark.parametrize("strategy", ["ddp", "cadence-dp", "zero", "ps"])
def test_a_users_model_trains_as_in_one_process(tmp_path: Path, strategy: str) -> None:
    single = tmp_path / "single"
    single.mkdir()
    cpu = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    reference = run_training(_config("ddp", 1), cpu, single)
    out = tmp_path / strategy
    out.mkdir()
    losses = run_ranks(_train_rank, 2, str(out), strategy, timeout=180)
    torch.testing.assert_close(losses[0], reference["step_loss"], rtol=1e-5, atol=1e-6)
    expected = torch.load(single / "checkpoint.pt")["model"]
    got = torch.load(out / "checkpoint.pt")["model"]
    assert expected.keys() == got.keys() == {
        "left.weight", "left.bias", "right.0.weight", "right.0.bias", "right.2.weight",
        "right.2.bias",
    }  # fmt: skip
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)
    torch.manual_seed(0)  # the seeded start every rank built: training moved every tensor
    initial = two_tower().state_dict()
    assert not any(torch.allclose(expected[n], initial[n]) for n in expected)
