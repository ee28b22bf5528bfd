"""`--strategy ps` in `cadence train`: the loop's workers become parameter-server workers.

Each worker wraps its model in a `PSTrainer` (which starts the servers s with s % W == rank as
child processes); the loop then calls `train_step` and, before evaluations, `sync`. Servers
leave when their parent worker process ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.optim import Optimizer

from cadence.ps.config import ps_config

if TYPE_CHECKING:
    from cadence.config import TrainConfig


def ps_wrap(
    model: nn.Module, optimizer: Optimizer, rank: int, world_size: int, train: TrainConfig
) -> tuple[nn.Module, Optimizer]:
    """Wrap for the training loop; the optimizer stays the user's (the servers rebuild it).
    glibc's malloc thresholds are fixed for the worker (`cadence.heap.keep_heap`) unless
    `train.cluster.keep_heap` is off."""
    from cadence.heap import keep_heap

    if train.cluster.keep_heap:
        keep_heap()
    from cadence.models.user import load_loss, model_and_data
    from cadence.ps.runtime import PSTrainer
    from cadence.train.sharding import steps_per_epoch

    config = ps_config(train, world_size)
    # zoo or the user's
    spec, data = model_and_data(train.model.name, train.data.dataset, train.job.seed)
    example = None
    if config.order == "graph":  # a batch to trace and time the forward ops on
        per_worker = max(1, train.data.batch_size // (world_size * train.data.grad_accum))
        example = spec.synthetic_batch(per_worker)[0]
    # The loop waits for every worker at each epoch end (and at the last step): backup
    # workers must say they pause there, or a straggler's steps would wait for them forever.
    per_epoch = max(1, steps_per_epoch(len(data.train_x), train.data.batch_size))
    last = train.job.steps if train.job.steps is not None else per_epoch * train.job.epochs

    def pause_after(iteration: int) -> bool:
        return iteration % per_epoch == 0 or iteration == last

    trainer = PSTrainer(
        model, optimizer, config, rank, example, pause_after, load_loss(train.model.loss),
        train.data.grad_accum,
    )  # fmt: skip
    return trainer, optimizer


def ps_unwrap(model: nn.Module) -> nn.Module:
    inner: nn.Module = getattr(model, "module", model)
    return inner
