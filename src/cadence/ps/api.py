"""`cadence.parameter_server`: the user's model, optimizer and loop on parameter-server workers.

    model, optimizer = cadence.parameter_server(model, optimizer, PSConfig(servers=2))
    for x, y in loader:                      # this worker's share of the global batch
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()      # each gradient is pushed as soon as it is ready
        optimizer.step()                     # pushes what is left; the next values stream in
        scheduler.step()
    optimizer.close()                        # every worker: stops the servers

Every rank of the process group is a worker; the servers are child processes of the workers
(server s of worker s % W), so they need no rank of their own. Worker 0's initial values
are everyone's, and each block's forward waits for its parameters of the new step. With
`consistency="bsp"` (the default) a step averages the W workers' gradients, like DDP; asp,
ssp and backup workers apply stale or partial gradients by design, so they are not exact.

The servers run the user's SGD, Adam or AdamW elementwise with the hyperparameters of each
parameter's param_group as they were when its gradient was pushed (during backward), so
schedulers and param_groups edits between steps apply to the next step; an edit between
backward and `step()` is refused. A parameter no worker got a gradient for is left alone.
Buffers (BatchNorm statistics) are broadcast from worker 0 before a forward as DDP does (when
the forward before it ran with gradients outside no_sync).
`optimizer.state_dict()` fetches the optimizer state from the servers in torch's format, and
`load_state_dict` sends it back; `model.load_state_dict` (the same state on every worker, as
with DDP) sends worker 0's loaded values to the servers. Refused with a clear error: clipping
by global norm (the averaged gradient exists only on the servers, in slices), gradients
edited after backward, and `torch.amp.GradScaler` (use bf16 autocast without a scaler).
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.optim import Optimizer

from cadence import heap
from cadence.amp import install as install_scaler_hook
from cadence.comm import ops as comm
from cadence.errors import UserError
from cadence.ps.config import PSConfig
from cadence.ps.runtime import PSTrainer
from cadence.ps.wire import HYPER_KEYS, PUSH_HYPER, PUSH_NO_GRAD, Header, Kind
from cadence.ps.worker import ServerTimeout

_UNSUPPORTED = ("amsgrad", "maximize", "differentiable")


def parameter_server(
    model: nn.Module,
    optimizer: Optimizer,
    config: PSConfig | None = None,
    *,
    keep_heap: bool = True,
) -> tuple[nn.Module, PSOptimizer]:
    """Make this rank a parameter-server worker for `model` (the same on every rank) trained
    with `optimizer` (SGD, Adam or AdamW over `model.parameters()`). Returns the same model,
    hooked, and the optimizer the loop steps; call `optimizer.close()` on every rank at the end.
    `keep_heap`: fix glibc's malloc thresholds for the process (`cadence.heap.keep_heap`), so
    each step reuses the heap's pages instead of faulting fresh ones in."""
    if keep_heap:
        heap.keep_heap()
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    base = config or PSConfig(priority="layer")
    # The graph order times a traced forward on an example batch this API does not have.
    priority = "layer" if base.order == "graph" else base.priority
    config = dataclasses.replace(base, workers=world, priority=priority)
    _check_optimizer(model, optimizer)
    worker = _Worker(model, optimizer, config, rank)
    install_scaler_hook()  # GradScaler reaches PSOptimizer._cadence_unscale_grads: refused
    return model, PSOptimizer(optimizer, worker)


def _check_optimizer(model: nn.Module, optimizer: Optimizer) -> None:
    if type(optimizer) not in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
        raise UserError(
            f"parameter servers run SGD, Adam or AdamW, not {type(optimizer).__name__}: "
            "build one of those over model.parameters()"
        )
    for group in optimizer.param_groups:
        for key in _UNSUPPORTED:
            if group.get(key):
                raise UserError(f"parameter servers do not implement {key}=True: turn it off")
    mine = {id(p) for p in model.parameters() if p.requires_grad}
    theirs = {id(p) for g in optimizer.param_groups for p in g["params"]}
    if mine != theirs:
        raise UserError(
            "the optimizer must hold exactly the model's trainable parameters: build it over "
            "model.parameters() (param_groups may split them)"
        )


def _hyper(group: dict[str, Any]) -> bytes:
    betas = group.get("betas", (0.9, 0.999))
    values = {
        "lr": float(group["lr"]), "weight_decay": float(group.get("weight_decay", 0.0)),
        "momentum": float(group.get("momentum", 0.0)),
        "dampening": float(group.get("dampening", 0.0)),
        "beta1": float(betas[0]), "beta2": float(betas[1]), "eps": float(group.get("eps", 1e-8)),
    }  # fmt: skip
    return struct.pack(f"<{len(HYPER_KEYS)}f", *(values[k] for k in HYPER_KEYS))


class _Worker(PSTrainer):
    """`PSTrainer` driven by the user's loop instead of `train_step`."""

    def __init__(self, model: nn.Module, optimizer: Optimizer, config: PSConfig,
                 rank: int) -> None:  # fmt: skip
        self._optimizer = optimizer
        self._accumulating = False
        self._advanced = False
        self._sync_next_forward = True
        self._sent: dict[int, bytes] = {}  # param index -> hyperparameters pushed this step
        self._versions: dict[int, tuple[int, int]] = {}
        super().__init__(model, optimizer, config, rank)
        self._group_of = {
            id(p): g for g in optimizer.param_groups for p in g["params"]
        }  # fmt: skip
        self._model_buffers = list(model.buffers())
        world = dist.get_world_size() if dist.is_initialized() else 1
        if self._model_buffers and world > 1:
            self._handles.append(model.register_forward_pre_hook(self._sync_buffers))
        self._handles.append(model.register_forward_hook(self._after_forward))
        self._handles.append(model.register_state_dict_pre_hook(self._settle))
        self._handles.append(model.register_load_state_dict_pre_hook(self._settle))
        self._handles.append(model.register_load_state_dict_post_hook(self._send_values))

    # ---- hooks ---------------------------------------------------------------------------
    def _sync_buffers(self, module: nn.Module, args: Any) -> None:
        # DDP's rule: a forward broadcasts worker 0's buffers when the forward before it
        # (if any) ran with gradients and outside no_sync.
        if self._sync_next_forward:
            comm.broadcast_by_dtype(self._model_buffers, lambda flat: comm.broadcast(flat, 0))

    def _after_forward(self, module: nn.Module, args: Any, out: Any) -> None:
        # Every parameter of the new step is here once a training forward is done: the step
        # counter the pushes carry moves on before the first backward pushes.
        self._sync_next_forward = torch.is_grad_enabled() and not self._accumulating
        if module.training and torch.is_grad_enabled() and not self._advanced:
            self.channels.wait_all()
            self._advance()
            self._advanced = True

    def _settle(self, *args: Any) -> None:
        self.channels.wait_all()

    def _send_values(self, *args: Any) -> None:
        # Every worker loaded the same values; worker 0's reach each slice's server ahead of its
        # next gradient on the same channel, so the next update starts from them.
        if self.rank == 0:
            for piece in self.plan.slices:
                self._send(Kind.INIT, piece.key, 0, self._flat(piece.key))

    def _push_param(self, index: int) -> None:
        if self._accumulating:
            return  # no_sync: the gradient keeps accumulating in .grad
        if not self._advanced:
            raise UserError(
                "a backward without a training forward first: call model(x) in train mode "
                "with gradients enabled before backward"
            )
        if index in self._pushed:
            raise UserError(
                "a second backward in one step: accumulate gradients under "
                "optimizer.no_sync() and leave the last backward outside it"
            )
        param = self.params[index]
        hyper = _hyper(self._group_of[id(param)])
        flags = PUSH_HYPER | (PUSH_NO_GRAD if param.grad is None else 0)
        keys = [s.key for s in self.plan.slices_of(index)]
        for key in keys:
            payload = self._flat(key, grad=True) + hyper
            piece = self.plan.slices[key]
            header = Header(Kind.PUSH, piece.priority, self.rank, key, self.step, flags,
                            len(payload) // 4)  # fmt: skip
            self.channels.send(piece.server, piece.klass, header, payload)
        self._last_push = self.step
        self._sent[index] = hyper
        if param.grad is not None:
            self._versions[index] = (id(param.grad), param.grad._version)
        self._pushed.add(index)
        self._pull(keys, self.step + 1)

    # ---- the optimizer's side ------------------------------------------------------------
    def finish_step(self) -> None:
        for index, param in enumerate(self.params):
            if index in self._pushed:
                grad = param.grad
                if grad is not None and self._versions.get(index) != (id(grad), grad._version):
                    raise UserError(
                        "gradients changed after backward pushed them to the parameter servers "
                        "(e.g. torch.nn.utils.clip_grad_norm_): edit the loss instead"
                    )
                if self._sent[index] != _hyper(self._group_of[id(param)]):
                    raise UserError(
                        "param_groups changed between backward and step(): the servers got "
                        "this step's hyperparameters with the gradients; change them after "
                        "step() (e.g. scheduler.step() after optimizer.step())"
                    )
        if not self._advanced:
            raise UserError("optimizer.step() without a training forward and backward first")
        for index in range(len(self.params)):
            if index not in self._pushed:
                self._push_param(index)  # no gradient (unused), or not pushed by a hook
        self._pushed.clear()
        self._sent.clear()
        self._versions.clear()
        self._advanced = False
        self.iterations += 1

    def group_changed(self) -> None:
        self._group_of = {
            id(p): g for g in self._optimizer.param_groups for p in g["params"]
        }  # fmt: skip

    def fetch_state(self) -> dict[int, np.ndarray]:
        """Every slice's optimizer state (`SliceOptimizer.export`), by slice key."""
        self.channels.wait_all()  # every update of the last step is applied
        for piece in self.plan.slices:
            header = Header(Kind.STATE, piece.priority, self.rank, piece.key, 0)
            self.channels.send(piece.server, piece.klass, header)
        found: dict[int, np.ndarray] = {}
        while len(found) < len(self.plan.slices):
            try:
                key, data = self.channels.states.get(timeout=self.config.timeout_s)
            except queue.Empty:
                missing = len(self.plan.slices) - len(found)
                raise ServerTimeout(
                    f"worker {self.rank}: {missing} slices' optimizer state never came"
                ) from None
            found[key] = np.frombuffer(data, np.float32)
        return found

    def send_state(self, slices: dict[int, np.ndarray]) -> None:
        """Worker 0 replaces the servers' optimizer state (every worker calls it)."""
        self.channels.wait_all()  # no update of the last step is still to come
        if self.rank != 0:
            return
        for key, data in slices.items():
            piece = self.plan.slices[key]
            header = Header(Kind.LOAD, piece.priority, self.rank, key, 0, 0, data.size)
            self.channels.send(piece.server, piece.klass, header, data.tobytes())

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        self._accumulating = True
        try:
            yield
        finally:
            self._accumulating = False


def _param_state(worker: _Worker, slices: dict[int, np.ndarray], index: int,
                 param: Tensor) -> dict[str, Tensor]:  # fmt: skip
    """torch's optimizer state of one parameter from its slices' exported states."""
    buf, m, v, steps = [], [], [], 0
    for piece in sorted(worker.plan.slices_of(index), key=lambda s: s.start):
        data, n = slices[piece.key], piece.length
        steps, has_buf, has_moments = int(data[0]), int(data[1]), int(data[2])
        rest = data[3:]
        if has_buf:
            buf.append(rest[:n])
            rest = rest[n:]
        if has_moments:
            m.append(rest[:n])
            v.append(rest[n : 2 * n])

    def tensor(parts: list[np.ndarray]) -> Tensor:
        return torch.from_numpy(np.concatenate(parts).copy()).view_as(param)

    entry: dict[str, Tensor] = {}
    if buf:
        entry["momentum_buffer"] = tensor(buf)
    if m and steps:
        entry.update(step=torch.tensor(float(steps)), exp_avg=tensor(m), exp_avg_sq=tensor(v))
    return entry


class PSOptimizer(Optimizer):
    """What `cadence.parameter_server` returns in place of the user's optimizer: it shares the
    user's param_groups (schedulers and edits reach the servers with the next gradients);
    `step()` completes this worker's pushes, the servers compute the update."""

    def __init__(self, optimizer: Optimizer, worker: _Worker) -> None:
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.state = optimizer.state
        self.inner = optimizer
        self.worker = worker

    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise UserError("parameter-server optimizers do not take a closure")
        self.worker.finish_step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none)

    def no_sync(self) -> contextlib.AbstractContextManager[None]:
        """Backward passes inside accumulate gradients locally; the next one outside pushes."""
        return self.worker.no_sync()

    def _cadence_unscale_grads(self, inv_scale: Tensor, found_inf: Tensor) -> None:
        """`torch.amp.GradScaler.unscale_` / `step` on this optimizer (`cadence.amp`)."""
        raise UserError(
            "torch.amp.GradScaler is not supported by parameter servers (backward pushes the "
            "gradients, still scaled, to the servers): use bf16 autocast without a scaler"
        )

    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        raise UserError(
            "clipping by global norm needs the averaged gradient, which only the parameter "
            "servers hold, in slices: use cadence.data_parallel or zero to clip"
        )

    def flush(self) -> None:
        """Block until the parameters of the next step are all here."""
        self.worker.channels.wait_all()

    def state_dict(self) -> dict[str, Any]:
        """torch's format for the user's optimizer, with the state fetched from the servers."""
        worker = self.worker
        slices = worker.fetch_state()
        order = [p for group in self.inner.param_groups for p in group["params"]]
        state: dict[int, dict[str, Tensor]] = {}
        for i, param in enumerate(order):
            entry = _param_state(worker, slices, worker._index[id(param)], param)
            if entry:
                state[i] = entry
        saved = self.inner.state_dict()
        saved["state"] = state
        return saved

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load hyperparameters into the param_groups and the state into the servers."""
        self.inner.load_state_dict(state_dict)
        self.param_groups = self.inner.param_groups
        worker = self.worker
        worker.group_changed()
        adam = not isinstance(self.inner, torch.optim.SGD)
        slices: dict[int, np.ndarray] = {}
        for index, param in enumerate(worker.params):
            entry = self.inner.state.get(param, {})
            for piece in worker.plan.slices_of(index):
                part = slice(piece.start, piece.start + piece.length)

                def values(name: str, entry: dict[str, Any] = entry, part: slice = part
                           ) -> np.ndarray:  # fmt: skip
                    found = entry.get(name)
                    if found is None:
                        return np.zeros(part.stop - part.start, np.float32)
                    flat: np.ndarray = found.detach().float().reshape(-1)[part].numpy()
                    return flat

                has_buf = entry.get("momentum_buffer") is not None
                steps = float(entry["step"]) if "step" in entry else 0.0
                parts = [np.array([steps, float(has_buf), float(adam)], np.float32)]
                parts += [values("momentum_buffer")] if has_buf else []
                parts += [values("exp_avg"), values("exp_avg_sq")] if adam else []
                slices[piece.key] = np.concatenate(parts).astype(np.float32)
        self.inner.state.clear()  # the servers hold it
        self.state = self.inner.state
        worker.send_state(slices)

    def close(self) -> dict[str, Any]:
        """Stop the servers (every worker calls it); the servers' counters."""
        return self.worker.close()
