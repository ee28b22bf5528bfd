"""A user's own model on the user's data trains as in one process: one that is not a
Sequential (two branches added) under ddp, cadence-dp, zero and the parameter server at world
size 2; an nn.Sequential with its own loss and gradient accumulation in a pipeline at world
sizes 2 and 4; and the parameter server with a loss and accumulation of its own."""

from pathlib import Path

import pytest
import torch

from cadence.comm import DistContext, init_from_env
from cadence.config import TrainConfig
from cadence.testing import run_ranks
from cadence.train.loop import run_training
from tests.user_parts import two_tower


def _config(strategy: str, workers: int) -> TrainConfig:
    return TrainConfig.from_flat(
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


# --- a user's nn.Sequential under the pipeline (and --loss, --grad-accum everywhere) --------
P = "tests.user_parts"
_PIPELINE_RUNS = {2: [("1f1b", 2), ("auto", 1)], 4: [("gpipe", 2)]}
"""Per world size, (schedule, grad_accum) runs: 2 workers are 2 stages, 4 are 2 replicas x 2."""


def _regression(strategy: str, workers: int, schedule: str = "1f1b", grad_accum: int = 1):
    return TrainConfig.from_flat(
        model=f"{P}:deep_regressor",
        dataset=f"{P}:line",  # float targets: the profiler gets labels of its own
        loss=f"{P}:mse",
        strategy=strategy,
        workers=workers,
        stages=2,
        batch_size=16,
        microbatches=2,
        schedule=schedule,
        grad_accum=grad_accum,
        steps=6,  # over two epochs of the 64 samples
        optimizer="sgd",
        lr=0.05,
        eval_every_epoch=False,
    )


def _pipeline_rank(rank: int, world_size: int, out: str) -> list[list[float]]:
    ctx = init_from_env()
    losses = []
    for schedule, accum in _PIPELINE_RUNS[world_size]:
        run_dir = Path(out) / f"{schedule}-{accum}" if rank == 0 else None
        if run_dir is not None:
            run_dir.mkdir()
        config = _regression("pipeline", world_size, schedule, accum)
        losses.append(run_training(config, ctx, run_dir)["step_loss"])
    return losses


@pytest.mark.parametrize("world", [2, 4])
def test_a_users_sequential_trains_in_a_pipeline_as_in_one_process(
    tmp_path: Path, world: int
) -> None:
    cpu = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    references = {}
    for accum in sorted({a for _, a in _PIPELINE_RUNS[world]}):
        single = tmp_path / f"single-{accum}"
        single.mkdir()
        metrics = run_training(_regression("ddp", 1, grad_accum=accum), cpu, single)
        references[accum] = (metrics["step_loss"], torch.load(single / "checkpoint.pt")["model"])
    per_rank = run_ranks(_pipeline_rank, world, str(tmp_path), timeout=240)
    for i, (schedule, accum) in enumerate(_PIPELINE_RUNS[world]):
        expected_losses, expected = references[accum]
        for losses in per_rank:
            torch.testing.assert_close(losses[i], expected_losses, rtol=1e-5, atol=1e-6)
        got = torch.load(tmp_path / f"{schedule}-{accum}" / "checkpoint.pt")["model"]
        assert got.keys() == expected.keys() == {
            f"{i}.{kind}" for i in (0, 2, 4) for kind in ("weight", "bias")
        }  # the user's own names: the pipeline cut the Sequential, it did not rename it
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-5, msg=name)


def _ps_rank(rank: int, world_size: int, out: str) -> list[float]:
    config = _loss_config("ps", world_size, grad_accum=2)
    return run_training(config, init_from_env(), Path(out) if rank == 0 else None)["step_loss"]


def _loss_config(
    strategy: str, workers: int, grad_accum: int, loss: str | None = f"{P}:smooth_loss"
) -> TrainConfig:
    return TrainConfig.from_flat(
        model=f"{P}:small_net",
        dataset=f"{P}:blobs",
        loss=loss,
        strategy=strategy,
        workers=workers,
        batch_size=32,
        grad_accum=grad_accum,
        steps=5,
        optimizer="sgd",
        lr=0.1,
        eval_every_epoch=False,
    )


def test_the_parameter_server_takes_a_loss_and_accumulates(tmp_path: Path) -> None:
    cpu = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    single = tmp_path / "single"
    single.mkdir()
    reference = run_training(_loss_config("ddp", 1, grad_accum=2), cpu, single)
    plain = run_training(_loss_config("ddp", 1, grad_accum=2, loss=None), cpu, None)
    # the label smoothing tells --loss apart from the default cross entropy
    assert plain["step_loss"][0] != pytest.approx(reference["step_loss"][0], rel=1e-3)
    out = tmp_path / "ps"
    out.mkdir()
    losses = run_ranks(_ps_rank, 2, str(out), timeout=180)
    torch.testing.assert_close(losses[0], reference["step_loss"], rtol=1e-5, atol=1e-6)
    expected = torch.load(single / "checkpoint.pt")["model"]
    got = torch.load(out / "checkpoint.pt")["model"]
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)
