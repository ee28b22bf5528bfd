"""Optimizer construction from the config's name."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim import Optimizer

from cadence.config import TrainConfig


def build_optimizer(params: Iterable[torch.nn.Parameter], config: TrainConfig) -> Optimizer:
    if config.optim.name == "sgd":
        return torch.optim.SGD(
            params,
            lr=config.optim.lr,
            momentum=config.optim.momentum,
            weight_decay=config.optim.weight_decay,
        )
    if config.optim.name == "adamw":
        return torch.optim.AdamW(params, lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    return torch.optim.Adam(params, lr=config.optim.lr, weight_decay=config.optim.weight_decay)
