"""Stage 3: parameters live only as shards; a unit's full parameters exist just around its
forward and its backward.

Units nest (`layout.model_units`): the model itself, and every item of a module container at
any depth. Before a unit's forward its bucket is all-gathered (the next bucket's gather is
queued right behind it, so it travels while this unit computes) and released after the
forward, so an enclosing unit's parameters stay gathered while its inner units compute; a
hook on the unit's output gathers it again before its backward (prefetching the previous
bucket) and the gradient hook releases it once all its gradients exist. The model's own
bucket (tied weights live there), the last bucket, and a unit whose output carries no
gradient stay gathered from forward to backward.

Evaluation and checkpoints need full parameters without collectives inside forward (ranks may
score different numbers of batches), so `model.eval()` gathers every bucket on every rank and
keeps them ("pinned") until training resumes or the optimizer steps. `model.state_dict()` and
`model.load_state_dict()` gather every bucket too (every rank calls them, as under FSDP), and
`state_dict()` returns copies, so its values outlive the next release.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.hooks import RemovableHandle

from cadence.errors import UserError
from cadence.zero.engine import BucketState, ZeroEngine
from cadence.zero.plan import ZeroPlan


def _tensors(output: Any) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, list | tuple):
        return [t for item in output for t in _tensors(item)]
    if isinstance(output, dict):
        return [t for item in output.values() for t in _tensors(item)]
    return []


class Stage3Engine(ZeroEngine):
    """ZeRO-3: `ZeroEngine` plus per-block gather/release hooks."""

    def __init__(
        self,
        model: nn.Module,
        plan: ZeroPlan,
        user_optimizer: torch.optim.Optimizer,
        group: dist.ProcessGroup | None,
        rank: int,
        broadcast_buffers: bool = True,
    ) -> None:
        super().__init__(
            model, plan, user_optimizer, group, rank, broadcast_buffers=broadcast_buffers
        )
        self.pinned = False
        self._pinned_for_state = False
        self.handles: list[RemovableHandle] = []
        for st in self.states:
            self.handles.append(st.block.register_forward_pre_hook(self._pre_forward(st)))
            self.handles.append(st.block.register_forward_hook(self._post_forward(st)))
            self.release(st)
        model.register_state_dict_pre_hook(lambda *_a: self._pin_for_state())
        model.register_state_dict_post_hook(lambda *a: self._copy_state(*a))
        model.register_load_state_dict_pre_hook(lambda *_a: self._pin_for_state())
        model.register_load_state_dict_post_hook(lambda *_a: self._unpin_after_state())
        _swap_train(model, self)

    # ---------------------------------------------------------------- gather / release
    def _start_gather(self, index: int) -> None:
        if not 0 <= index < len(self.states):
            return
        st = self.states[index]
        if not st.gathered and st.pending is None:
            st.pending = self.submit(lambda: self.gather_task(st), "parameters")

    def ensure_gathered(self, st: BucketState) -> None:
        if st.gathered:
            return
        self._start_gather(st.spec.index)
        assert st.pending is not None
        st.pending.result()
        st.pending = None
        st.gathered = True
        self.sample_memory()

    def release(self, st: BucketState) -> None:
        if st.pending is not None:  # a prefetch still writing into the buffer
            st.pending.result()
            st.pending = None
        st.flat.untyped_storage().resize_(0)
        st.gathered = False

    def release_all(self) -> None:
        for st in self.states:
            self.release(st)
        self.pinned = False

    def pin(self) -> None:
        """Gather every bucket and keep them (collective: every rank calls it)."""
        for st in self.states:
            self._start_gather(st.spec.index)
        for st in self.states:
            self.ensure_gathered(st)
        self.pinned = True

    # ---------------------------------------------------------------- hooks
    def _pre_forward(self, st: BucketState) -> Any:
        def hook(module: nn.Module, _args: Any) -> None:
            if self.pinned:
                if not (module.training and torch.is_grad_enabled()):
                    return
                self.release_all()  # training resumes: the pinned copies go
            self.ensure_gathered(st)
            if self.plan.prefetch:
                self._start_gather(st.spec.index + 1)

        return hook

    def _post_forward(self, st: BucketState) -> Any:
        def hook(module: nn.Module, _args: Any, output: Any) -> None:
            if self.pinned:
                return
            needs_grad = [t for t in _tensors(output) if t.requires_grad]
            if module.training and torch.is_grad_enabled():
                for t in needs_grad:
                    t.register_hook(self._pre_backward(st))
                if self.plan.units[st.spec.index].held:
                    return  # backward starts here at once, or the whole model's is held
                if not needs_grad:
                    return  # no output hook would gather it again before its backward
            self.release(st)

        return hook

    def _pre_backward(self, st: BucketState) -> Any:
        def hook(grad: torch.Tensor) -> None:
            self.ensure_gathered(st)
            if self.plan.prefetch:
                self._start_gather(st.spec.index - 1)

        return hook

    def on_bucket_backward_done(self, st: BucketState) -> None:
        if not self.pinned:
            self.release(st)

    def after_update(self) -> None:
        self.release_all()  # stale now; the next forward gathers fresh pieces

    def _pin_for_state(self) -> None:
        """Before (load_)state_dict: every bucket gathered (collective), as under eval()."""
        if not self.pinned:
            self.pin()
            self._pinned_for_state = True

    def _unpin_after_state(self) -> None:
        if self._pinned_for_state:
            self._pinned_for_state = False
            self.release_all()

    def _copy_state(self, _module: nn.Module, state: dict[str, Any], *_args: Any) -> None:
        """state_dict's values that live in ZeRO's buffers become copies (the buffers are
        released again), then the buckets gathered for it go."""
        storages = {st.flat.untyped_storage().data_ptr() for st in self.states}
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() in storages:
                state[key] = value.clone()
        self._unpin_after_state()


RELEASED_MARKS = ("data is not allocated yet", "storage of size 0", "setStorage")
"""Phrases of torch's errors on reading a parameter whose storage stage 3 has released."""


def _swap_train(model: nn.Module, engine: Stage3Engine) -> None:
    """Give `model` a train() that pins full parameters on eval(), as FSDP2 swaps classes, and
    a forward that turns torch's error on a released parameter into one line saying why."""
    base = type(model)

    def train(self: nn.Module, mode: bool = True) -> nn.Module:
        result = base.train(self, mode)
        if not mode and not engine.pinned:
            engine.pin()
        return result

    @functools.wraps(base.forward)  # its signature stays the model's (HF Trainer reads it)
    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        try:
            return base.forward(self, *args, **kwargs)
        except RuntimeError as exc:
            if not any(mark in str(exc) for mark in RELEASED_MARKS):
                raise
            raise UserError(
                "cadence.zero stage 3: the model read a parameter outside the forward of the "
                "unit holding it (units: the model and each item of its ModuleList, Sequential "
                "or ModuleDict); call that module instead, or use stage 2"
            ) from None

    model.__class__ = type(
        f"Zero3{base.__name__}", (base,), {"train": train, "forward": forward}
    )
