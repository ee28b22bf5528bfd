"""The batches `cadence train --strategy pipeline` profiles and times a model on.

A zoo model on zoo data is profiled on the zoo's synthetic batches, as `cadence profile` does;
a user's model or data (`pkg.module:name`) on the first training samples. The profiler
(`cadence.profile.profile_model`) scores with the zoo's cross entropy, so under `--loss` it
gets class-0 labels shaped like the model's output: it times blocks, and the loss is one small
call on the last output. The stage probe (`stage_probe.py`) runs the training loss itself on
the samples' own targets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from cadence.config import TrainConfig
from cadence.models.refs import is_ref
from cadence.models.registry import get_model_spec
from cadence.models.user import LossFn, load_loss, model_and_data

BatchOf = Callable[[int], tuple[Tensor, Tensor]]
"""(inputs, targets) of `size` samples."""


@dataclass(frozen=True)
class Examples:
    """Where a pipeline job's example batches come from."""

    batch: BatchOf
    """Samples with their own targets, for the training loss."""
    profile_batch: BatchOf
    """Samples with targets the profiler's cross entropy takes."""
    loss: LossFn
    """The training loss (`--loss`, or cross entropy)."""


def job_examples(config: TrainConfig, model: nn.Module) -> Examples:
    """The example batches of `config`'s model and data; `model` is the built model (only
    run forward, in eval mode without gradients, to shape labels for the profiler)."""
    loss = load_loss(config.model.loss)
    batch: BatchOf
    if is_ref(config.model.name) or is_ref(config.data.dataset):
        _, data = model_and_data(
            config.model.name, config.data.dataset, config.job.seed
        )  # user data: cached
        batch = functools.partial(_first_samples, data.train_x, data.train_y)
    else:
        batch = get_model_spec(config.model.name).synthetic_batch
    if config.model.loss is None:  # cross entropy trains on these targets: the profiler's loss too
        return Examples(batch, batch, loss)
    return Examples(batch, lambda size: _labelled(model, batch(size)[0]), loss)


def _first_samples(x: Tensor, y: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The first `size` training samples (repeated when there are fewer)."""
    index = torch.arange(size) % len(x)
    return x[index], y[index]


@torch.no_grad()
def _labelled(model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
    """`x` with class 0 for every row the zoo's cross entropy reads from `model(x)`."""
    was_training = model.training
    model.eval()  # no BatchNorm statistics move
    device = next(model.parameters(), x).device
    try:
        with torch.random.fork_rng(devices=[]):
            shape = model(x.to(device)).shape
    finally:
        model.train(was_training)
    rows = 1
    for d in shape[:-1]:
        rows *= int(d)
    return x, torch.zeros(rows, dtype=torch.long)
