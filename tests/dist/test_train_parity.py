"""The training loop under DDP and cadence-dp at world sizes 2 and 4 equals single-process
training: same seed and data, global batch split across ranks, compared parameter by parameter."""

import json
from pathlib import Path

import pytest
import torch

from cadence.comm import DistContext, init_from_env
from cadence.config import TrainConfig
from cadence.dp.plan import default_threshold
from cadence.models import get_model_spec
from cadence.testing import run_ranks
from cadence.train.loop import run_training

STEPS = 6


def _config(optimizer: str, world_size: int, strategy: str = "ddp") -> TrainConfig:
    return TrainConfig.from_flat(
        model="cnn",
        strategy=strategy,
        workers=world_size,
        batch_size=32,
        steps=STEPS,
        optimizer=optimizer,
        lr=0.05 if optimizer == "sgd" else 2e-3,
        eval_every_epoch=False,
    )


def _train_rank(rank: int, world_size: int, optimizer: str, out: str, strategy: str) -> list[float]:
    ctx = init_from_env()
    run_dir = Path(out) if rank == 0 else None
    metrics = run_training(_config(optimizer, world_size, strategy), ctx, run_dir)
    return metrics["step_loss"]


@pytest.mark.parametrize(
    ("strategy", "world_size", "optimizer"),
    [
        ("ddp", 2, "sgd"),
        ("ddp", 2, "adam"),
        ("ddp", 4, "sgd"),
        ("ddp", 4, "adam"),
        ("cadence-dp", 2, "adam"),
        ("cadence-dp", 4, "sgd"),
    ],
)
def test_distributed_training_equals_single_process(tmp_path, strategy, world_size, optimizer):
    single_dir = tmp_path / "single"
    single_dir.mkdir()
    reference = run_training(
        _config(optimizer, 1), DistContext(0, 1, 0, "gloo", torch.device("cpu")), single_dir
    )
    dist_dir = tmp_path / "dist"
    dist_dir.mkdir()
    losses = run_ranks(_train_rank, world_size, optimizer, str(dist_dir), strategy, timeout=180)

    for rank_losses in losses:  # every rank reports the same global mean loss per step
        torch.testing.assert_close(rank_losses, reference["step_loss"], rtol=1e-5, atol=1e-6)
    expected = torch.load(single_dir / "checkpoint.pt")["model"]
    got = torch.load(dist_dir / "checkpoint.pt")["model"]
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-5, msg=name)
    # Training moved the parameters away from their seeded start, so equality is not vacuous.
    torch.manual_seed(0)
    initial = get_model_spec("cnn").build().state_dict()
    moved = [n for n in expected if not torch.allclose(expected[n], initial[n])]
    assert len(moved) >= len(expected) // 2
    if strategy == "cadence-dp":  # the run records the threshold it split and fused by
        recorded = json.loads((dist_dir / "metrics.json").read_text())["dp_threshold_bytes"]
        grad_bytes = sum(t.numel() * 4 for t in initial.values() if t.is_floating_point())
        assert recorded == default_threshold(grad_bytes)


def _scores_rank(rank: int, world_size: int, strategy: str) -> tuple[float, float]:
    config = TrainConfig.from_flat(model="resnet32", strategy=strategy, workers=world_size,
                         batch_size=16, steps=3, optimizer="sgd", lr=0.05)  # fmt: skip
    metrics = run_training(config, init_from_env(), None)
    return metrics["final_test_loss"], metrics["final_test_accuracy"]


def test_data_parallel_strategies_score_with_the_same_buffers():
    """BatchNorm's running statistics differ between ranks after training; every rank scores
    its share of the test set through the wrapped model, which (as DDP's) broadcasts rank 0's
    buffers first, so DDP and cadence-dp report the same test loss."""
    ddp = run_ranks(_scores_rank, 2, "ddp", timeout=180)
    cadence = run_ranks(_scores_rank, 2, "cadence-dp", timeout=180)
    for got in cadence:
        torch.testing.assert_close(got, ddp[0], rtol=1e-5, atol=1e-6)
