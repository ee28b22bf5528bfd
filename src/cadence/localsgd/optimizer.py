"""The optimizer `cadence.local_sgd` / `cadence.diloco` return in place of the user's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import Optimizer

from cadence.errors import UserError
from cadence.localsgd.runtime import OuterLoop


class LocalSGDOptimizer(Optimizer):
    """`step()` is the user's optimizer's step on this rank's own gradients (the inner step),
    followed, when one is due, by a fragment's outer sync. It shares the user's param groups
    and state, so LR schedulers, clipping and `zero_grad` act as on the user's optimizer.
    `sync()` syncs every fragment now (a collective: every rank calls it), so that evaluation
    and checkpoints read the averaged model."""

    def __init__(self, optimizer: Optimizer, outer: OuterLoop):
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.state = optimizer.state
        self.inner = optimizer
        self.outer = outer
        self._built = True

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if getattr(self, "_built", False):  # Optimizer.__init__ adds the user's groups itself
            raise UserError(
                "add_param_group after cadence.local_sgd/diloco is not supported: give the "
                "optimizer all its groups before wrapping"
            )
        super().add_param_group(param_group)

    # GradScaler calls step() even for a step it skips, setting `found_inf` and `grad_scale`
    # first: the ranks' gradients differ, so one rank may skip where another does not, and
    # the schedule of syncs (collectives) must still count the same steps on every rank.
    _step_supports_amp_scaling = True

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        self.outer.before_inner_step()
        found_inf = getattr(self, "found_inf", None)
        loss: float | None = None
        if found_inf is None:
            loss = self.inner.step(closure)
        elif not found_inf.item():  # (an inf or NaN: skipped, as GradScaler does)
            scale = getattr(self, "grad_scale", None)  # None: the user unscaled already
            if scale is not None:
                with torch.no_grad():
                    for group in self.param_groups:
                        for p in group["params"]:
                            if p.grad is not None:
                                p.grad.div_(scale.to(p.grad.device))
            loss = self.inner.step(closure)
        self.outer.after_inner_step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none)

    def sync(self) -> None:
        """Average every fragment over the ranks now (the outer step included)."""
        self.outer.sync_all()

    def state_dict(self) -> dict[str, Any]:
        """The user's optimizer's state dict plus `localsgd`: theta_outer, the outer optimizer's
        momentum, the schedule's phase and the syncs in flight (a torch optimizer loading it
        ignores the extra key). Each rank saves its own: the replicas differ between syncs."""
        return {**self.inner.state_dict(), "localsgd": self.outer.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        inner = {k: v for k, v in state_dict.items() if k != "localsgd"}
        self.inner.load_state_dict(inner)
        self.param_groups = self.inner.param_groups
        self.state = self.inner.state
        if "localsgd" in state_dict:
            self.outer.load_state_dict(state_dict["localsgd"])
