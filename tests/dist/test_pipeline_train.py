"""`--strategy pipeline` in the training loop and the `cadence train` command."""

import json
from pathlib import Path

import pytest
import torch

from cadence.comm import DistContext, init_from_env
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.models import get_model_spec
from cadence.pipeline.train import pipeline_wrap_for
from cadence.testing import run_ranks
from cadence.train.loop import run_training
from tests.cli_helpers import assert_one_line_error, run_cadence

STEPS = 5
SCHEDULES = [("1f1b", False), ("kfkb:2", True)]  # torch's runtime; ours with recomputation


def _config(world: int, strategy: str, schedule: str = "1f1b", recompute: bool = False):
    return TrainConfig.from_flat(
        model="cnn",
        strategy=strategy,
        workers=world,
        stages=min(world, 2),
        batch_size=32,
        microbatches=4,
        schedule=schedule,
        recompute=recompute,
        steps=STEPS,
        optimizer="sgd",
        lr=0.05,
        eval_every_epoch=False,
    )


def _train_rank(rank: int, world: int, out: str) -> list[list[float]]:
    ctx = init_from_env()
    losses = []
    for schedule, recompute in SCHEDULES:
        run_dir = Path(out) / schedule if rank == 0 else None
        if run_dir is not None:
            run_dir.mkdir()
        config = _config(world, "pipeline", schedule, recompute)
        losses.append(run_training(config, ctx, run_dir)["step_loss"])
    return losses


def test_hybrid_pipeline_training_equals_single_process(tmp_path: Path) -> None:
    # 4 workers = 2 replicas x 2 stages: exercises sharding, loss shares and the stage sync.
    single = tmp_path / "single"
    single.mkdir()
    ctx = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    reference = run_training(_config(1, "ddp"), ctx, single)
    per_rank = run_ranks(_train_rank, 4, str(tmp_path), timeout=240)
    expected = torch.load(single / "checkpoint.pt")["model"]
    for i, (schedule, _) in enumerate(SCHEDULES):
        for losses in per_rank:  # the loop's loss average equals the full-batch loss
            torch.testing.assert_close(losses[i], reference["step_loss"], rtol=1e-5, atol=1e-6)
        # Rank 0 saved the whole model after syncing every stage into it.
        got = torch.load(tmp_path / schedule / "checkpoint.pt")["model"]
        assert got.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(
                got[name], expected[name], rtol=1e-4, atol=1e-5, msg=f"{schedule} {name}"
            )
    torch.manual_seed(0)
    initial = get_model_spec("cnn").build().state_dict()
    assert all(not torch.equal(initial[n], expected[n]) for n in expected)


def test_too_many_stages_for_the_model() -> None:
    config = TrainConfig.from_flat(model="cnn", strategy="pipeline", workers=4, stages=4)
    model = get_model_spec("cnn").build()
    ctx = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(UserError, match=r"3 blocks cannot be split into 4 stages: use --stages"):
        pipeline_wrap_for(config)(model, optimizer, ctx)


def test_cli_trains_a_pipeline(tmp_path: Path) -> None:
    proc = run_cadence(
        "train",
        "--model",
        "mlp",
        "--strategy",
        "pipeline",
        "--stages",
        "2",
        "--workers",
        "2",
        "--schedule",
        "kfkb:2",
        "--microbatches",
        "4",
        "--steps",
        "12",
        "--out",
        "out",
        "--name",
        "p",
        "--json",
        "m.json",
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["steps"] == 12 and metrics["config"]["schedule"] == "kfkb:2"
    assert metrics["step_loss"][-1] < metrics["step_loss"][0]
    assert metrics["final_test_accuracy"] > 0.3  # the synced whole model was evaluated


def test_cli_bad_pipeline_input_is_one_line(tmp_path: Path) -> None:
    # The other config checks are unit-tested; this one goes through the real command.
    proc = run_cadence(
        "train", "--strategy", "pipeline", "--schedule", "kfkb:3", cwd=tmp_path, timeout=60
    )
    assert_one_line_error(proc, "kfkb:3 needs K to divide the 4 micro-batches: use K in [1, 2, 4]")
