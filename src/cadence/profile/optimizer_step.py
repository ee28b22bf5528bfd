"""Seconds of one optimizer step over a model's parameters, on the device they live on.

Training pays the step every iteration (Adam over vgg16's 61 MB costs about a third of its
forward + backward on one CPU thread, and far less on a GPU), so a profile carries it for
the device it was made on.
"""

from __future__ import annotations

import torch
from torch import nn

from cadence.config import OPTIMIZERS, TrainConfig
from cadence.profile.clock import Stopwatch, sync
from cadence.train.optim import build_optimizer

STEPPED_OPTIMIZERS = OPTIMIZERS
"""The optimizers a profile times: those `cadence train` builds."""


def optimizer_step_s(model: nn.Module, optimizer: str, repeats: int = 5) -> float:
    """Seconds of one `optimizer` step over copies of `model`'s parameters with random
    gradients (the model itself is left as it was), built as `cadence train` builds it: the
    least of `repeats` timed steps after an untimed one, since a busy machine only ever adds
    time."""
    params = [nn.Parameter(p.detach().clone()) for p in model.parameters()]
    if not params:
        return 0.0
    device = params[0].device
    for p in params:
        p.grad = torch.randn_like(p)
    opt = build_optimizer(params, TrainConfig.from_flat(optimizer=optimizer))
    samples = []
    for i in range(repeats + 1):
        sync(device)
        clock = Stopwatch(device, expected_marks=2)
        start = clock.mark()
        opt.step()
        end = clock.mark()
        if i:
            samples.append(clock.seconds(start, end))
    return min(samples)
