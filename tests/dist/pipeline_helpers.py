"""Models, data and the single-process reference shared by the pipeline tests on gloo ranks."""

from __future__ import annotations

from typing import Any

import torch

from cadence.models import get_model_spec, loss_fn
from cadence.models.blocks import BlockModel

BATCH = 16


def build(model: str) -> BlockModel:
    """A small zoo model, the same on every rank (seed 0)."""
    torch.manual_seed(0)
    spec = get_model_spec(model)
    if model == "mlp":
        return spec.build(hidden=(32, 32, 32))
    return spec.build(d_model=32, n_heads=2, n_layers=3)  # small: 4 ranks share 2 busy cores


def batches(model: str, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One synthetic batch of `BATCH` samples per step (seeded by the step)."""
    spec = get_model_spec(model)
    return [spec.synthetic_batch(BATCH, seed=step) for step in range(steps)]


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def reference(model: str, steps: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    """(losses, final state) of one process training the whole model on the whole batch."""
    net = build(model)
    opt = sgd(net.parameters())
    losses = []
    for x, y in batches(model, steps):
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, net.state_dict()
