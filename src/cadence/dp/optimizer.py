"""Apply any torch.optim optimizer one layer at a time.

Each layer gets a view: an optimizer of the user's class over that layer's parameters, with the
user's hyper-parameters and sharing the user's `state` dict, so `state_dict()`, LR schedulers and
checkpoints keep working on the object the user holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.optim import Optimizer


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
    def step(self, group: int) -> None:
        self._step(self._views[group])

    @torch.no_grad()
    def step_many(self, groups: Sequence[int]) -> None:
        """One optimizer step over several groups at once: the same arithmetic as one step per
        group (every torch.optim update is per parameter) for one call's Python overhead."""
        if len(groups) == 1:
            self.step(groups[0])
            return
        key = tuple(sorted(groups))
        if key not in self._merged:  # plans repeat every iteration: views are built once
            params = {id(p) for g in key for p in self._groups[g]}
            self._merged[key] = _make_view(self.optimizer, params)
        self._step(self._merged[key])

    def _step(self, made: tuple[Optimizer, list[int]] | None) -> None:
        if made is None:
            return
        view, origin = made
        for view_group, g_index in zip(view.param_groups, origin, strict=True):
            for key, value in self.optimizer.param_groups[g_index].items():
                if key != "params":
                    view_group[key] = value  # LR schedulers change the user's groups
        view.step()


class ScheduledOptimizer(Optimizer):
    """What `cadence.data_parallel` returns in place of the user's optimizer.

    `step()` does not compute: updates are applied per layer as soon as that layer's gradients
    are reduced. `zero_grad()` is a no-op because each layer's gradients are cleared right after
    its update. `flush()` waits until every update is applied.
    """

    def __init__(self, optimizer: Optimizer, flush: Callable[[], None], updater: LayerwiseUpdater):
        # Share the user's group dicts and state: schedulers and checkpoints see one optimizer.
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.state = optimizer.state
        self.inner = optimizer
        self._flush = flush
        self._updater = updater

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        if closure is not None:
            raise ValueError("cadence.data_parallel optimizers do not take a closure")
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None

    def flush(self) -> None:
        """Block until every in-flight gradient is reduced and applied."""
        self._flush()

    def state_dict(self) -> dict[str, Any]:
        self._flush()
        return self.inner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._flush()
        self.inner.load_state_dict(state_dict)
        self.param_groups = self.inner.param_groups
        self.state = self.inner.state
        self._updater.rebuild()  # the views must share the newly loaded state
