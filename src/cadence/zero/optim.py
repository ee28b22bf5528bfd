"""`ZeroOptimizer`: the torch Optimizer the user holds; its `step()` drives the engine.

Without compression (and during 1-bit Adam's warm-up) the update is the user's own torch
optimizer, rebuilt over this rank's pieces of the flat buckets (`shard_optim`), so the
arithmetic is torch's, element by element. After warm-up, 1-bit Adam updates with the frozen
variance and the communicated momentum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.optim import Optimizer

from cadence.zero.engine import ZeroEngine
from cadence.zero.update import FrozenAdamArgs


class ZeroOptimizer(Optimizer):
    """Sharded optimizer: param_groups and state are the inner torch optimizer's (over this
    rank's pieces, in the user's groups), so LR schedulers and edits of param_groups work;
    `state_dict()` is this rank's shard of the optimizer state (see `cadence.zero.checkpoint`)."""

    def __init__(self, engine: ZeroEngine) -> None:
        super().__init__(engine.inner.param_groups, engine.inner.defaults)
        self.param_groups = engine.inner.param_groups  # the very same dicts and list
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

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """DDP's `no_sync` (also `model.no_sync()`): see `ZeroEngine.no_sync`."""
        with self.engine.no_sync():
            yield

    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
    ) -> torch.Tensor:
        """Clip the whole model's gradient by its global norm, between backward and `step()`,
        as `torch.nn.utils.clip_grad_norm_` does on an unsharded model; returns the norm.
        Costs one all-reduce of a scalar after the gradients are reduced."""
        return self.engine.clip_grad_norm_(max_norm, norm_type, error_if_nonfinite)

    def _cadence_unscale_grads(self, inv_scale: torch.Tensor, found_inf: torch.Tensor) -> None:
        """`torch.amp.GradScaler.unscale_` on this optimizer (`cadence.amp`): the reduced
        gradient pieces are unscaled and inf/NaN is looked for on every rank."""
        self.engine.unscale_grads_(inv_scale, found_inf)

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
        elif eng.config.compression == "onebit":  # warm-up: plain Adam over whole pieces
            for st in eng.states:
                st.shard.grad = st.grad if st.grad is not None else torch.zeros_like(st.shard)
            eng.inner.step()
            for st in eng.states:
                st.shard.grad = None
        else:
            eng.set_segment_grads()
            eng.inner.step()
        eng.clear_step()
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
        """This rank's optimizer state (not the parameters: those are the model's)."""
        from cadence.zero.checkpoint import optimizer_state

        self.engine.wait_gathers()  # early updates still queued change the state
        return optimizer_state(self.engine)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load `state_dict()` output saved by the same rank of a job of the same world size
        and model; the model's parameters are left as they are."""
        from cadence.zero.checkpoint import load_optimizer_state

        load_optimizer_state(self.engine, state_dict)
        self.param_groups = self.engine.inner.param_groups
        self.state = self.engine.inner.state
