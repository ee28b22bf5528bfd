"""`cadence train` runs every strategy with glibc's heap thresholds fixed (`cadence.heap`), as
profiles are taken, unless `--no-keep-heap`."""

from __future__ import annotations

import pytest
import torch

import cadence.heap
from cadence.comm import DistContext
from cadence.config import TrainConfig
from cadence.train import loop
from cadence.train.optim import build_optimizer
from cadence.train.strategies import get_strategy
from tests.unit.test_heap import _Kept, _refuse, _tiny


def test_cadence_train_keeps_the_heap_for_every_strategy_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`cadence train` fixes the thresholds before it builds anything, DDP included (its
    prediction comes from the same profile); `--no-keep-heap` leaves glibc's own, and the
    cadence executors it wraps then leave them too."""
    cpu = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    monkeypatch.setattr(cadence.heap, "keep_heap", _refuse)
    flat = {"model": "mlp", "workers": 1, "steps": 1, "batch_size": 8, "eval_every_epoch": False}
    with pytest.raises(_Kept):
        loop.run_training(TrainConfig.from_flat(strategy="ddp", **flat), cpu, None)
    off = TrainConfig.from_flat(strategy="ddp", keep_heap=False, **flat)
    assert loop.run_training(off, cpu, None)["steps"] == 1
    for strategy in ("zero", "local-sgd", "diloco"):
        for keep in (True, False):
            config = TrainConfig.from_flat(strategy=strategy, keep_heap=keep, **flat)
            model = _tiny()
            optimizer = build_optimizer(model.parameters(), config)
            wrap = get_strategy(strategy).wrap_for(config)
            if keep:
                with pytest.raises(_Kept):
                    wrap(model, optimizer, cpu)
            else:
                wrap(model, optimizer, cpu)
