"""1-bit Adam's update of one bucket: Adam with the variance frozen at warm-up's end.

Shared by `ZeroOptimizer.step()` and by the engine's early update (stages 1-2), which runs it
on the communication thread as soon as a bucket's momentum has been reduced, so the
bucket's parameter all-gather can start during the backward.

With `ZeroConfig.replicated_update` every rank applies every piece's update itself (from the
exchanged 1-bit momentum and the whole bucket's frozen denominator) instead of all-gathering
the owners' results: the same arithmetic, element by element, on the same inputs, so every
rank's parameters stay equal bit for bit without any parameter traffic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

VARIANCE_FLOOR = 0.1
"""Floor of the frozen sqrt(variance), as a fraction of its mean over the piece."""


@dataclass(frozen=True)
class FrozenAdamArgs:
    """The hyper-parameters one update reads, taken when it is scheduled (so an LR scheduler
    stepping meanwhile cannot change an update already under way)."""

    lr: float
    """Learning rate."""
    beta1: float
    """Momentum decay (for the bias correction)."""
    bias2: float
    """1 - beta2 ** freeze_steps: the frozen variance's bias correction."""
    eps: float
    """Adam's epsilon."""

    @classmethod
    def of(cls, group: dict[str, Any], freeze_steps: int) -> FrozenAdamArgs:
        beta1, beta2 = group["betas"]
        return cls(float(group["lr"]), beta1, 1 - beta2**freeze_steps, group["eps"])

    @property
    def denominator_key(self) -> tuple[float, float]:
        """What a kept denominator was made with; another key means it must be made again."""
        return (self.bias2, self.eps)


@torch.no_grad()
def frozen_denominator(variance: torch.Tensor, args: FrozenAdamArgs) -> torch.Tensor:
    """Adam's denominator from one piece's frozen variance: sqrt(v / bias2), floored, + eps."""
    root = variance.sqrt() / math.sqrt(args.bias2)
    # Sign compression gives every entry of a piece the same magnitude, so an entry whose
    # variance is far below its piece's (a dead input pixel: v = 0) would take a step of
    # scale / eps. Flooring the frozen root-variance at a fraction of the piece's mean bounds
    # that amplification; entries at or above the floor are plain 1-bit Adam.
    floor = VARIANCE_FLOOR * root.mean()
    return root.clamp_min_(floor).add_(args.eps)


def step_size(state: dict[str, Any], args: FrozenAdamArgs) -> float:
    """Count one more step in `state` and return its signed, bias-corrected step size."""
    state["step"] += 1
    return -args.lr / (1 - args.beta1 ** float(state["step"]))


@torch.no_grad()
def frozen_adam_update(
    shard: torch.Tensor, state: dict[str, Any], args: FrozenAdamArgs, denominator: torch.Tensor
) -> None:
    """Step `shard` with its communicated momentum `state["exp_avg"]` and the `denominator`
    made from its frozen variance (`frozen_denominator`)."""
    shard.addcdiv_(state["exp_avg"], denominator, value=step_size(state, args))


@torch.no_grad()
def replicated_update(
    flat: torch.Tensor,
    pieces: list[tuple[int, int]],
    momentum_of: Callable[[int], torch.Tensor],
    denominator: torch.Tensor,
    value: float,
) -> None:
    """Step every piece j = [lo, hi) of `flat` as its owner does: with `momentum_of(j)` (the
    owner's momentum, formed the same way) and the owner's piece of `denominator`."""
    for j, (lo, hi) in enumerate(pieces):
        flat[lo:hi].addcdiv_(momentum_of(j), denominator[lo:hi], value=value)
