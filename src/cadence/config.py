"""Frozen configuration objects. Each field says what it means; validation lives in `__post_init__`
so a bad value fails where it is made, with one line naming it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cadence.errors import UserError

OPTIMIZERS = ("adam", "adamw", "sgd")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything `cadence train` needs to run one job; the same object reaches every worker."""

    model: str = "cnn"
    """Model zoo name (`cadence.models.model_names()`)."""
    dataset: str | None = None
    """Dataset name; None picks the model's default (digits for image models)."""
    workers: int = 2
    """Number of worker processes (ranks). Ignored under torchrun, which sets WORLD_SIZE."""
    batch_size: int = 64
    """Global batch size per step, split evenly across workers."""
    epochs: int = 12
    """Passes over the training split."""
    steps: int | None = None
    """Run exactly this many optimizer steps (as many epochs as that takes), instead of `epochs`."""
    lr: float = 2e-3
    """Learning rate."""
    optimizer: str = "adam"
    """One of `OPTIMIZERS`."""
    momentum: float = 0.9
    """Momentum for SGD (ignored by Adam)."""
    weight_decay: float = 0.0
    """Weight decay for every optimizer."""
    strategy: str = "ddp"
    """Distribution strategy (`cadence.train.strategies.strategy_names()`)."""
    seed: int = 0
    """Seed for model initialisation, data split and shuffling; equal on every rank."""
    out: str = "runs"
    """Directory under which `<name>/` receives metrics, plot and checkpoint."""
    name: str | None = None
    """Run name; None makes `<model>-<strategy>-<timestamp>`."""
    threads: int | None = None
    """Intra-op threads per worker; None shares the machine's cores evenly between workers."""
    emulate_bandwidth: str | None = None
    """Run each worker in its own network namespace with links capped at this rate, e.g. 400mbit."""
    master_port: int | None = None
    """Rendezvous port for local launches; None picks a free one."""
    eval_every_epoch: bool = True
    """Evaluate on the test split after every epoch (always done once at the end)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1 (got {self.workers})")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.batch_size % self.workers:
            raise UserError(
                f"--batch-size {self.batch_size} is not divisible by --workers {self.workers}: "
                f"use a multiple of {self.workers}"
            )
        if self.epochs < 1:
            raise UserError(f"--epochs must be at least 1 (got {self.epochs})")
        if self.steps is not None and self.steps < 1:
            raise UserError(f"--steps must be at least 1 (got {self.steps})")
        if not self.lr > 0:
            raise UserError(f"--lr must be positive (got {self.lr})")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(
                f"unknown optimizer '{self.optimizer}': choose one of {', '.join(OPTIMIZERS)}"
            )
        if self.threads is not None and self.threads < 1:
            raise UserError(f"--threads must be at least 1 (got {self.threads})")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise UserError(f"--master-port must be in 1..65535 (got {self.master_port})")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainConfig:
        return cls(**data)
