"""Optimizer construction from the config's name."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim import Optimizer

from cadence.config import TrainConfig


def build_optimizer(params: Iterable[torch.nn.Parameter], config: TrainConfig) -> Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
