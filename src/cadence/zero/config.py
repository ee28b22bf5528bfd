"""`ZeroConfig`: what `cadence.zero` shards and how it communicates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cadence.errors import UserError

DEFAULT_FORWARD_GATHER_SHARE = 1 / 3
"""`ZeroConfig.forward_gather_share` unless given; the simulator's plan mirrors it."""

STAGES = (1, 2, 3)
COMPRESSIONS = ("none", "fp16", "onebit")
ZERO_OPTIMIZERS = ("adam", "adamw", "sgd")
GATHER_DTYPES = ("fp32", "bf16")

TRAIN_SETTINGS = {
    "zero_stage": "stage",
    "optimizer": "optimizer",
    "compression": "compression",
    "freeze_steps": "freeze_steps",
    "gather_dtype": "gather_dtype",
    "overlap_gather": "overlap_gather",
    "replicated_update": "replicated_update",
    "replicated_share": "replicated_share",
}
"""`cadence train`'s ZeRO settings (`TrainConfig` fields) by the `ZeroConfig` field each sets."""


@dataclass(frozen=True, kw_only=True)
class ZeroConfig:
    """One ZeRO job's choices; validated where it is made so bad input fails in one line."""

    stage: int = 2
    """1: optimizer state sharded; 2: plus gradients; 3: plus parameters (gathered per block)."""
    optimizer: str = "adam"
    """One of `ZERO_OPTIMIZERS`; "onebit" compression needs "adam". `cadence.zero` also takes
    the user's torch optimizer: then this names its class ("adam" for other classes)."""
    compression: str = "none"
    """Gradient/momentum traffic: "none" (fp32), "fp16", or "onebit" (1-bit Adam)."""
    freeze_steps: int = 100
    """With "onebit": steps of plain Adam (fp32 traffic) before the variance is frozen."""
    gather_dtype: str = "fp32"
    """Wire dtype of the parameter all-gather; "bf16" halves it (full params are then rounded)."""
    prefetch: bool = True
    """Stage 3: gather the next block's parameters while the current block computes."""
    overlap_gather: bool = False
    """Stages 1-2: `step()` only starts the parameter all-gathers; each block waits for its
    own just before its next forward, so the gathers travel while earlier blocks compute.
    Parameters read outside a forward (not `state_dict()`, which waits) may then be stale
    until `optimizer.wait_gathers()`."""
    forward_gather_share: float = DEFAULT_FORWARD_GATHER_SHARE
    """With `overlap_gather` and 1-bit Adam's early update: the front blocks holding up to this
    share of the parameter bytes are gathered after the backward, in forward order, while the
    next forward runs; the others right behind their update during the backward. Gathered in
    backward order, the front blocks came last, and the next forward waited for every gather
    (0: that order)."""

    gather_lane: bool = True
    """Stages 1-2 with onebit: parameter all-gathers run on a second communication thread and
    process group, so a bucket's momentum exchange and update need not wait for the previous
    bucket's gather to finish. False: one thread for everything."""
    replicated_update: bool = False
    """Stages 1-2 with onebit, after warm-up: every rank applies every piece's update itself,
    from the exchanged 1-bit momentum and a copy of the whole model's frozen Adam denominator
    (gathered once, at the switch-over), so no parameters are all-gathered: the same training
    bit for bit, for 4 more bytes per parameter on every rank. Stage 2 then all-gathers what
    every rank sent instead of the all-to-all (p times its bytes: worth it while p is well
    below 28, where it would cost as much as the fp32 parameter gather it replaces)."""
    replicated_share: float = 1.0
    """With `replicated_update`: only the front blocks holding up to this share of the
    parameter bytes are updated on every rank (4 bytes per parameter more for them); the
    others are updated by their owners and all-gathered as usual. The front blocks' gathers
    are the ones the next forward waits for (their backward comes last), so a part of the
    memory buys most of the time. 1: the whole model."""

    @classmethod
    def from_train_settings(cls, settings: Mapping[str, Any]) -> ZeroConfig:
        """What `cadence train --strategy zero` runs with `settings`: a `TrainConfig`'s
        fields, or a saved run's config (a setting it lacks takes `ZeroConfig`'s default,
        which is `TrainConfig`'s too)."""
        given = {ours: settings[key] for key, ours in TRAIN_SETTINGS.items() if key in settings}
        return cls(**given)

    @property
    def replicates_everything(self) -> bool:
        """After warm-up no parameter is all-gathered (every block is replicated)."""
        return self.replicated_update and self.replicated_share >= 1

    @property
    def updates_early(self) -> bool:
        """1-bit Adam at stages 1-2: once the variance is frozen, each bucket's update and
        parameter gather can run as soon as its momentum is reduced (see `ZeroEngine`)."""
        return self.stage < 3 and self.compression == "onebit"

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise UserError(f"ZeRO stage must be 1, 2 or 3 (got {self.stage})")
        if self.compression not in COMPRESSIONS:
            raise UserError(
                f"unknown compression '{self.compression}': choose one of {', '.join(COMPRESSIONS)}"
            )
        if self.optimizer not in ZERO_OPTIMIZERS:
            raise UserError(
                f"unknown ZeRO optimizer '{self.optimizer}': "
                f"choose one of {', '.join(ZERO_OPTIMIZERS)}"
            )
        if self.compression == "onebit" and self.optimizer != "adam":
            raise UserError(
                f"onebit compression is 1-bit Adam: it needs optimizer adam, not {self.optimizer}"
            )
        if self.freeze_steps < 1 and self.compression == "onebit":
            raise UserError(
                f"--freeze-steps must be at least 1 with onebit (got {self.freeze_steps}): "
                "1-bit Adam needs warm-up steps to learn the variance"
            )
        if self.freeze_steps < 0:
            raise UserError(f"--freeze-steps must be non-negative (got {self.freeze_steps})")
        if not 0 <= self.forward_gather_share <= 1:
            raise UserError(
                f"forward_gather_share must be within [0, 1] (got {self.forward_gather_share})"
            )
        if not 0 <= self.replicated_share <= 1:
            raise UserError(f"replicated_share must be within [0, 1] (got {self.replicated_share})")
        if self.gather_dtype not in GATHER_DTYPES:
            raise UserError(
                f"unknown gather dtype '{self.gather_dtype}': choose one of "
                f"{', '.join(GATHER_DTYPES)}"
            )
        if self.replicated_update and not (self.updates_early and self.gather_dtype == "fp32"):
            raise UserError(
                "replicated_update needs stage 1 or 2 with onebit compression and fp32 "
                f"parameters (got stage {self.stage}, compression {self.compression}, "
                f"gather dtype {self.gather_dtype})"
            )
