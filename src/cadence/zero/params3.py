"""Stage 3: parameters live only as shards; a block's full parameters exist just around its
forward and its backward.

Before a block's forward its bucket is all-gathered (the next bucket's gather is queued right
behind it, so it travels while this block computes) and released after the forward; a hook
on the block's output gathers it again before its backward (prefetching the previous bucket)
and the gradient hook releases it once all its gradients exist. The last bucket stays gathered
from its forward to its backward.

Evaluation and checkpoints need full parameters without collectives inside forward (ranks may
score different numbers of batches), so `model.eval()` gathers every bucket on every rank and
keeps them ("pinned") until training resumes or the optimizer steps.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.hooks import RemovableHandle

from cadence.zero.config import ZeroConfig
from cadence.zero.engine import BucketState, ZeroEngine


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
        config: ZeroConfig,
        optimizer_kwargs: dict[str, Any],
        group: dist.ProcessGroup | None,
        world_size: int,
        rank: int,
    ) -> None:
        super().__init__(model, config, optimizer_kwargs, group, world_size, rank)
        self.pinned = False
        self.handles: list[RemovableHandle] = []
        for st in self.states:
            self.handles.append(st.block.register_forward_pre_hook(self._pre_forward(st)))
            self.handles.append(st.block.register_forward_hook(self._post_forward(st)))
            self.release(st)
        model.register_state_dict_pre_hook(self._check_full)
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
            if self.config.prefetch:
                self._start_gather(st.spec.index + 1)

        return hook

    def _post_forward(self, st: BucketState) -> Any:
        def hook(module: nn.Module, _args: Any, output: Any) -> None:
            if self.pinned:
                return
            needs_grad = [t for t in _tensors(output) if t.requires_grad]
            if module.training and torch.is_grad_enabled() and needs_grad:
                for t in needs_grad:
                    t.register_hook(self._pre_backward(st))
                if st.spec.index == len(self.states) - 1:
                    return  # backward starts here at once
            self.release(st)

        return hook

    def _pre_backward(self, st: BucketState) -> Any:
        def hook(grad: torch.Tensor) -> None:
            self.ensure_gathered(st)
            if self.config.prefetch:
                self._start_gather(st.spec.index - 1)

        return hook

    def on_bucket_backward_done(self, st: BucketState) -> None:
        if not self.pinned:
            self.release(st)

    def after_update(self) -> None:
        self.release_all()  # stale now; the next forward gathers fresh pieces

    def _check_full(self, *_args: Any, **_kwargs: Any) -> None:
        if not all(st.gathered for st in self.states):
            raise RuntimeError(
                "ZeRO-3 parameters are sharded: call model.eval() on every rank before "
                "model.state_dict() to gather them"
            )


def _swap_train(model: nn.Module, engine: Stage3Engine) -> None:
    """Give `model` a train() that pins full parameters on eval(), as FSDP2 swaps classes."""
    base = type(model)

    def train(self: nn.Module, mode: bool = True) -> nn.Module:
        result = base.train(self, mode)
        if not mode and not engine.pinned:
            engine.pin()
        return result

    model.__class__ = type(f"Zero3{base.__name__}", (base,), {"train": train})
