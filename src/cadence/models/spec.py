"""`ModelSpec`: what the rest of cadence needs to know about a model in the zoo."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads when a model is built, not when the registry is read
    from torch import Tensor

    from cadence.models.blocks import BlockModel

TASKS = ("classify", "next_token")


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: how to build it and what data it takes."""

    name: str
    """Registry name, e.g. "resnet32"."""
    build: Callable[..., BlockModel]
    """Builder; keyword overrides (num_classes, width, tie_weights, ...) go to it."""
    input_shape: tuple[int, ...]
    """Per-sample input shape: (C, H, W) for images, (context,) for token ids."""
    datasets: tuple[str, ...]
    """Datasets the model accepts; the first is the default."""
    task: str
    """"classify" (targets (B,)) or "next_token" (targets (B, T))."""
    description: str
    """One line for humans (CLI listings)."""
    num_classes: int = 10
    """Classes of the default build, or vocabulary size for next_token models."""

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task {self.task!r} not in {TASKS}")
        if not self.datasets:
            raise ValueError(f"model {self.name!r} lists no datasets")

    @property
    def default_dataset(self) -> str:
        """The dataset used when the user names none."""
        return self.datasets[0]

    def synthetic_batch(self, batch_size: int, seed: int = 0) -> tuple[Tensor, Tensor]:
        """A deterministic random (inputs, targets) batch shaped for the default build.

        Images are float N(0,1) with int64 labels; token models get int64 ids, with targets
        being the inputs shifted by one like real text windows.
        """
        import torch

        gen = torch.Generator().manual_seed(seed)
        if self.task == "next_token":
            (context,) = self.input_shape
            ids = torch.randint(0, self.num_classes, (batch_size, context + 1), generator=gen)
            return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        x = torch.randn((batch_size, *self.input_shape), generator=gen)
        y = torch.randint(0, self.num_classes, (batch_size,), generator=gen)
        return x, y
