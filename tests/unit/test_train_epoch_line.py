"""The per-epoch line of the training loop: an epoch that was not evaluated says nothing about
the test split (it used to print "test loss nan  test acc nan%")."""

import torch

from cadence.comm import DistContext
from cadence.config import TrainConfig
from cadence.train.loop import run_training


def test_an_epoch_without_evaluation_prints_no_test_figures(capsys):
    # digits: 1437 training samples, batch 64 -> 23 steps per epoch; 30 steps = 2 epochs, and
    # only the last one is evaluated with eval_every_epoch off.
    config = TrainConfig.from_flat(
        model="cnn", workers=1, batch_size=64, steps=30, eval_every_epoch=False
    )
    run_training(config, DistContext(0, 1, 0, "gloo", torch.device("cpu")), None)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 2, lines
    assert "test" not in lines[0] and "nan" not in lines[0]
    assert "test acc" in lines[1] and "nan" not in lines[1]
