"""`ZeroOptimizer`: the torch Optimizer the user holds; its `step()` drives the engine.

Without compression (and during 1-bit Adam's warm-up) the update is torch's own optimizer
over this rank's flat shards, so the arithmetic is exactly torch's, element by element. After
warm-up, 1-bit Adam updates with the frozen variance and the communicated momentum.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import Optimizer

from cadence.zero.engine import ZeroEngine
from cadence.zero.update import FrozenAdamArgs


class ZeroOptimizer(Optimizer):
    """Sharded optimizer: param_groups and state are the inner torch optimizer's (over shards),
    so LR schedulers work; `state_dict()` is this rank's shard (see `cadence.zero.checkpoint`)."""

    def __init__(self, engine: ZeroEngine) -> None:
        super().__init__(engine.inner.param_groups, engine.inner.defaults)
        self.state = engine.inner.state
        self.engine = engine

    @property
    def bytes_sent_last_step(self) -> dict[str, int]:
        """Payload bytes this rank sent between the previous step and the last one, by purpose."""
        return dict(self.engine.bytes_sent_last_step)

    @property
    def peak_memory(self) -> dict[str, int]:
        """Peak bytes held in parameters, gradients and optimizer state (error buffers included)."""
        return dict(self.engine.peak)

    def wait_gathers(self) -> None:
        """With `overlap_gather`: make every parameter current now (no-op otherwise)."""
        self.engine.wait_gathers()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.engine.zero_grad()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        eng = self.engine
        eng.wait_gathers(earlier_only=True)  # overlap_gather: a block the last forward skipped
        eng.sample_memory()
        compressed = eng.compressed_phase
        eng.finish_reductions()
        if compressed:
            self._onebit_update()
        else:
            for st in eng.states:
                st.shard.grad = st.grad if st.grad is not None else torch.zeros_like(st.shard)
            eng.inner.step()
            for st in eng.states:
                st.shard.grad = None
        eng.sample_memory()
        eng.after_update()
        eng.steps_done += 1
        eng.end_step_bytes()
        return loss

    def _onebit_update(self) -> None:
        """Adam with the variance frozen at warm-up's end and the momentum as 1-bit reduced."""
        eng = self.engine
        args = FrozenAdamArgs.of(eng.inner.param_groups[0], eng.config.freeze_steps)
        for st in eng.states:
            if not st.updated:  # else the engine updated it early, as its momentum arrived
                eng.frozen_update(st, args)
                st.updated = st.replicated  # then every piece is current: no gather

    def state_dict(self) -> dict[str, Any]:
        from cadence.zero.checkpoint import sharded_state

        self.engine.wait_gathers()  # early updates still queued change the state
        return sharded_state(self.engine)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        from cadence.zero.checkpoint import load_sharded_state

        load_sharded_state(self.engine, state_dict)
