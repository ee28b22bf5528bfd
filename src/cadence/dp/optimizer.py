"""Apply any torch.optim optimizer one layer at a time.

Each layer gets a view: an optimizer of the user's class over that layer's parameters, sharing
the user's `state` dict, so `state_dict()` and checkpoints keep working on the object the user
holds. Each update uses the hyper-parameters its `step()` was called with (a snapshot), so an LR
scheduler stepped afterwards does not reach updates still pending.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import Optimizer

from cadence.dp.clip import original_clip_grad_norm
from cadence.errors import UserError

if TYPE_CHECKING:
    from cadence.dp.runtime import SyncEngine

Hyperparameters = list[dict[str, Any]]
"""Each param group's values but its parameters, in the user's group order."""


def hyperparameters(optimizer: Optimizer) -> Hyperparameters:
    """The values of `optimizer`'s param groups now (tensors copied: schedulers fill them)."""
    return [
        {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in g.items() if k != "params"}
        for g in optimizer.param_groups
    ]


def _make_view(optimizer: Optimizer, params: set[int]) -> tuple[Optimizer, list[int]] | None:
    groups, origin = [], []
    for g_index, group in enumerate(optimizer.param_groups):
        mine = [p for p in group["params"] if id(p) in params]
        if mine:
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": mine})
            origin.append(g_index)
    if not groups:
        return None
    try:
        view = type(optimizer)(groups, **optimizer.defaults)
    except TypeError:
        view = type(optimizer)(groups)  # type: ignore[call-arg]
    view.state = optimizer.state  # one state, shared by every view and the user's optimizer
    return view, origin


class LayerwiseUpdater:
    """Steps the user's optimizer for one group of parameters at a time."""

    def __init__(self, optimizer: Optimizer, update_groups: Sequence[Sequence[torch.nn.Parameter]]):
        self.optimizer = optimizer
        self._groups = [list(g) for g in update_groups]
        self.rebuild()

    def rebuild(self) -> None:
        self._views = [_make_view(self.optimizer, {id(p) for p in g}) for g in self._groups]
        self._merged: dict[tuple[int, ...], tuple[Optimizer, list[int]] | None] = {}

    @torch.no_grad()
    def step(self, group: int, hparams: Hyperparameters | None = None) -> None:
        self._step(self._views[group], hparams)

    @torch.no_grad()
    def step_many(self, groups: Sequence[int], hparams: Hyperparameters | None = None) -> None:
        """One optimizer step over several groups at once: the same arithmetic as one step per
        group (every torch.optim update is per parameter) for one call's Python overhead.
        `hparams`: the values to step with; None: the user's param groups' values now."""
        if len(groups) == 1:
            self.step(groups[0], hparams)
            return
        key = tuple(sorted(groups))
        if key not in self._merged:  # plans repeat every iteration: views are built once
            params = {id(p) for g in key for p in self._groups[g]}
            self._merged[key] = _make_view(self.optimizer, params)
        self._step(self._merged[key], hparams)

    def _step(
        self, made: tuple[Optimizer, list[int]] | None, hparams: Hyperparameters | None
    ) -> None:
        if made is None:
            return
        view, origin = made
        values = hparams if hparams else self.optimizer.param_groups
        for view_group, g_index in zip(view.param_groups, origin, strict=True):
            for key, value in values[g_index].items():
                if key != "params":
                    view_group[key] = value
        view.step()


class ScheduledOptimizer(Optimizer):
    """What `cadence.data_parallel` returns in place of the user's optimizer.

    `step()` does not compute: it releases the iteration's updates, with the hyper-parameters
    of that moment, and each layer is updated as soon as its gradients are reduced (while the
    next forward runs; each parameter's first use waits for its update). Gradients are cleared
    after each update, so `zero_grad()` only drops a backward pass never stepped.
    `clip_grad_norm_` waits for every reduction first. `flush()` waits for every update.
    """

    def __init__(self, optimizer: Optimizer, engine: SyncEngine):
        # Share the user's group dicts and state: schedulers and checkpoints see one optimizer.
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.state = optimizer.state
        self.inner = optimizer
        self._engine = engine
        self._built = True

    @property
    def engine(self) -> SyncEngine:
        """The engine that reduces and applies (its `wire_bytes`, its compression's state)."""
        return self._engine

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if getattr(self, "_built", False):  # Optimizer.__init__ adds the user's groups itself
            raise UserError(
                "add_param_group after cadence.data_parallel is not supported: give the "
                "optimizer all its groups before wrapping"
            )
        super().add_param_group(param_group)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        if closure is not None:
            raise UserError(
                "cadence.data_parallel optimizers take no closure: call the loss yourself, "
                "then optimizer.step()"
            )
        self._engine.step(hyperparameters(self.inner))
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._engine.zero_grad(set_to_none)

    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
    ) -> torch.Tensor:
        """Clip the gradients of every parameter of this optimizer by their global norm, as
        `torch.nn.utils.clip_grad_norm_` does, once all of them are reduced; the total norm."""
        self._engine.wait_reduced()
        params = [p for group in self.param_groups for p in group["params"]]
        return original_clip_grad_norm(params, max_norm, norm_type, error_if_nonfinite)

    def _cadence_wait_reduced(self) -> None:
        """What `GradScaler.unscale_` waits for before it reads the gradients (`dp.clip`)."""
        self._engine.wait_reduced()

    def flush(self) -> None:
        """Block until every in-flight gradient is reduced and applied."""
        self._engine.flush()

    def state_dict(self) -> dict[str, Any]:
        self._engine.flush()
        return self.inner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._engine.flush()
        self.inner.load_state_dict(state_dict)
        self.param_groups = self.inner.param_groups
        self.state = self.inner.state
        self._engine.updater.rebuild()  # the views must share the newly loaded state
