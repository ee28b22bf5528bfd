"""Configuration of scheduled data parallel."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class DPConfig:
    """How cadence schedules gradient synchronisation."""

    threshold_bytes: int = 4 * 1024 * 1024
    """Split gradients larger than this; fuse smaller ones (in backward order) up to it."""
    credit_bytes: int | None = None
    """Bytes allowed in flight at once; None means two chunks' worth (`2 * threshold_bytes`)."""
    warmup_iterations: int = 1
    """Iterations timed (in backward order) before the priority plan is built from them."""
    link_bytes_per_s: float | None = None
    """Link rate for planning; None measures it during warm-up."""
    reorder_k: int | None = None
    """Backward reordering point K (1-based layer): Linear/Conv weight gradients are deferred
    and run in the order K..1 then L..K+1 once input gradients have propagated. None (or K at
    least the number of layers L) keeps autograd's ordinary order."""

    def __post_init__(self) -> None:
        if self.threshold_bytes < 1:
            raise ValueError(f"threshold_bytes must be at least 1, got {self.threshold_bytes}")
        if self.credit_bytes is not None and self.credit_bytes < 1:
            raise ValueError(f"credit_bytes must be at least 1, got {self.credit_bytes}")
        if self.warmup_iterations < 1:
            raise ValueError("warmup_iterations must be at least 1")
        if self.reorder_k is not None and self.reorder_k < 1:
            raise ValueError(f"reorder_k must be at least 1, got {self.reorder_k}")

    @property
    def credit(self) -> int:
        return self.credit_bytes if self.credit_bytes is not None else 2 * self.threshold_bytes
