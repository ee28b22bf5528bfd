"""cadence-dp's side of each forward pass: gates on first use, buffers, `no_sync`.

- The first forward pass is watched (`usemap.UseRecorder`); then a pre-hook on each module
  that first reads some parameters waits for exactly those parameters' updates, and the root's
  pre-hook waits for the parameters read nowhere else.
- Buffers are broadcast from rank 0 before a forward, as DDP does: before every forward that
  follows a synchronising training forward (`DPConfig.broadcast_buffers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from cadence.comm import ops as comm
from cadence.dp.usemap import UseRecorder

if TYPE_CHECKING:
    from cadence.dp.runtime import SyncEngine


class ForwardSide:
    """Hooks `root` for one engine; `close()` removes every hook it added."""

    def __init__(self, engine: SyncEngine, root: nn.Module, broadcast_buffers: bool):
        self.engine = engine
        self.root = root
        self._recorder: UseRecorder | None = UseRecorder(root, engine.layout.params)
        self._recording = False
        self._root_params: tuple[int, ...] = ()
        sync = broadcast_buffers and engine.group is not None
        self._buffers = list(root.buffers()) if sync else []
        self._sync_buffers = True
        self.handles: list[RemovableHandle] = [
            root.register_forward_pre_hook(self._pre),
            root.register_forward_hook(self._post, always_call=True),
        ]

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """As DDP's: backward passes of forwards run inside accumulate locally, unsynced."""
        self.engine.no_sync_depth += 1
        try:
            yield
        finally:
            self.engine.no_sync_depth -= 1

    def _pre(self, module: nn.Module, _args: Any) -> None:
        if self._recording:  # the root called again inside its own first forward
            return
        self.engine.before_forward(module.training)
        if self._buffers and self._sync_buffers:
            # One broadcast per dtype and device of rank 0's values (main thread, default group).
            comm.broadcast_by_dtype(self._buffers, lambda flat: comm.broadcast(flat, src=0))
        if self._recorder is not None:
            self.engine.flush()  # no gates yet: every update lands first
            self._recorder.start()
            self._recording = True
        elif self._root_params:
            self.engine.wait_params(self._root_params)

    def _post(self, _module: nn.Module, _args: Any, _out: Any) -> None:
        self._sync_buffers = torch.is_grad_enabled() and self.engine.no_sync_depth == 0
        if not self._recording or self._recorder is None:
            return
        self._recording = False
        self._recorder.stop()
        uses, self._root_params = self._recorder.uses()
        self._recorder = None
        for gated, params in uses:
            self.handles.append(gated.register_forward_pre_hook(self._gate(params)))

    def _gate(self, params: tuple[int, ...]) -> Callable[[nn.Module, Any], None]:
        def hook(_module: nn.Module, _args: Any) -> None:
            self.engine.wait_params(params)

        return hook

    def close(self) -> None:
        if self._recording and self._recorder is not None:
            self._recorder.stop()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
