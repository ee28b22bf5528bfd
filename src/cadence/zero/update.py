"""1-bit Adam's update of one bucket's shard: Adam with the variance frozen at warm-up's end.

Shared by `ZeroOptimizer.step()` and by the engine's early update (stages 1-2), which runs it
on the communication thread as soon as a bucket's momentum has been reduced, so the
bucket's parameter all-gather can start during the backward.
"""

from __future__ import annotations

import math
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


@torch.no_grad()
def frozen_adam_update(shard: torch.Tensor, state: dict[str, Any], args: FrozenAdamArgs) -> None:
    """Step `shard` with its communicated momentum `state["exp_avg"]` and frozen variance."""
    m, v = state["exp_avg"], state["exp_avg_sq"]
    state["step"] += 1
    bias1 = 1 - args.beta1 ** float(state["step"])
    root = v.sqrt() / math.sqrt(args.bias2)
    # Sign compression gives every entry of a piece the same magnitude, so an entry whose
    # variance is far below its piece's (a dead input pixel: v = 0) would take a step of
    # scale / eps. Flooring the frozen root-variance at a fraction of the piece's mean bounds
    # that amplification; entries at or above the floor are plain 1-bit Adam.
    floor = VARIANCE_FLOOR * root.mean()
    shard.addcdiv_(m, root.clamp_min_(floor).add_(args.eps), value=-args.lr / bias1)
