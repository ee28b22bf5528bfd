"""`cadence.pipeline_parallel`: the user's sequential model as this rank's pipeline stage, with
the ordinary training loop around it.

    pipe = cadence.pipeline_parallel(model, split_points=[2], microbatches=4)
    optimizer = torch.optim.AdamW(pipe.parameters(), lr=1e-3)  # this stage's parameters
    loss = pipe.train_step(x, y, loss_fn)  # forward + backward of the whole global batch
    pipe.clip_grad_norm_(1.0)               # the norm over every stage
    optimizer.step(); scheduler.step()

Each stage runs a plain torch optimizer over its own parameters, so schedulers, param_groups
edits and optimizer state_dicts work as in one process. `train_step` leaves gradients of the
mean loss over the global batch (micro-batch losses are scaled by 1/M) and adds them to any
gradients already there, so calling it on several batches before `step()` accumulates. Tied
weights held by two stages get their gradients summed over those stages. `state_dict()` holds
this stage's entries under the plain model's names; `load_state_dict` takes them from a whole
model's state too. Evaluation is `pipe(x)` under `torch.no_grad()`: every rank gets the output.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.optimizer import register_optimizer_step_pre_hook

from cadence import heap
from cadence.amp import Handler, unscale_local
from cadence.amp import register as register_scaler
from cadence.comm import ops as comm
from cadence.comm.process_group import new_group
from cadence.errors import UserError
from cadence.models.blocks import BlockModel
from cadence.pipeline.api import build_executor, num_stages
from cadence.pipeline.executor import LossFn, PipelineExecutor
from cadence.pipeline.handoff import broadcast, check_output, probe, recv, send
from cadence.pipeline.sequential import (
    as_blocks,
    check_batchnorm,
    shared_parameters,
    stage_ranges,
)

_GROUPS: dict[tuple[int, ...], Any] = {}
_LIVE: weakref.WeakSet[PipelineParallel] = weakref.WeakSet()
_HOOKED = False


def pipeline_parallel(
    model: nn.Module | Sequence[nn.Module],
    *,
    split_points: Sequence[int] | None = None,
    microbatches: int = 4,
    schedule: str = "1f1b",
    data_parallel: int = 1,
    recompute: bool = False,
    backend: str = "auto",
    keep_heap: bool = True,
) -> PipelineParallel:
    """Wrap `model` (the same, identically initialised, on every rank) into this rank's stage.

    `model` is an `nn.Sequential` or a list of modules, each block taking and returning one
    tensor. The W ranks form `data_parallel` replicas of W / data_parallel stages; stage s
    begins at block `split_points[s - 1]` (default: equal block counts). Every global batch
    is split into `data_parallel` shares and each share into `microbatches` micro-batches.
    `keep_heap`: fix glibc's malloc thresholds for the process (`cadence.heap.keep_heap`), so
    each step reuses the heap's pages instead of faulting fresh ones in.
    """
    if keep_heap:
        heap.keep_heap()
    blocks = as_blocks(model)
    stages = num_stages(data_parallel)
    ranges = stage_ranges(len(blocks), stages, split_points)
    check_batchnorm(blocks, microbatches)
    for s, (a, b) in enumerate(ranges):
        if not any(True for _ in blocks[a:b].parameters()):
            raise UserError(
                f"pipeline stage {s} (blocks {a}..{b - 1}) has no parameters to train: choose "
                "split_points that give every stage a block with parameters"
            )
    if backend == "auto" and any(isinstance(m, _BatchNorm) for m in blocks.modules()):
        # torch's runtime runs an extra forward to infer shapes, which would update running
        # statistics once more than training does.
        backend = "cadence"
    return PipelineParallel(
        blocks, ranges, schedule, microbatches, recompute, backend, data_parallel
    )


class PipelineParallel(nn.Module):
    """This rank's stage of a pipeline (see the module docstring for the loop)."""

    def __init__(self, blocks: BlockModel, ranges: tuple[tuple[int, int], ...],
                 schedule: str, microbatches: int, recompute: bool, backend: str,
                 data_parallel: int) -> None:  # fmt: skip
        super().__init__()
        self._loss_fn: LossFn | None = None
        self._scale: Tensor | None = None
        """The GradScaler's scale during a `train_step` that was given one."""
        self.executor: PipelineExecutor = build_executor(
            blocks, ranges, self._loss, schedule, microbatches, recompute, backend, data_parallel
        )
        self.stage = self.executor.module
        self.ranges = ranges
        self.data_parallel = data_parallel
        self.stage.register_forward_hook(check_output)
        self._probed = False
        self._shared = self._shared_groups(blocks, ranges)
        # Parameters held by several stages count once in the global norm: at their first stage.
        counted_elsewhere = {
            id(p) for stages, params in shared_parameters(blocks, ranges)
            if stages[0] != self.executor.stage for p in params
        }  # fmt: skip
        self._norm_params = [p for p in self.stage.parameters() if id(p) not in counted_elsewhere]
        self._versions: dict[int, tuple[int, int]] = {}
        _guard(self)

    # ---- training ------------------------------------------------------------------------
    def _loss(self, out: Tensor, y: Tensor) -> Tensor:
        assert self._loss_fn is not None
        loss = self._loss_fn(out, y)
        return loss if self._scale is None else loss * self._scale.to(loss.device)

    def unscale_grads_(
        self, optimizer: torch.optim.Optimizer, inv_scale: Tensor, found_inf: Tensor
    ) -> None:
        """`GradScaler`'s unscale of `optimizer`'s gradients (`cadence.amp`), with found_inf
        all-reduced (MAX) over every rank, so that every stage skips the same steps."""
        if self._scale is None:
            raise UserError(
                "a GradScaler on a pipeline scales the loss inside train_step: call "
                "pipe.train_step(x, y, loss_fn, scaler=scaler) on every rank"
            )
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        unscale_local(inv_scale, found_inf, grads)
        if dist.is_initialized():
            comm.all_reduce(found_inf, op="max")
        self._record_versions()  # unscaled in place, by the scaler: not a user's edit

    def train_step(self, x: Tensor, y: Tensor, loss_fn: LossFn,
                   scaler: torch.amp.GradScaler | None = None) -> Tensor:  # fmt: skip
        """Forward and backward the global batch (every rank passes the same `x` and `y`);
        gradients are added to the stage's `.grad`. Returns the batch's mean loss on every rank.
        With a `scaler` (`torch.amp.GradScaler`), the loss is scaled as `scaler.scale(loss)`
        before its backward (the returned loss is not); then `scaler.unscale_(optimizer)`,
        `pipe.clip_grad_norm_` and `scaler.step(optimizer)` skip a step on every stage when
        any stage's gradients hold inf/NaN."""
        ex = self.executor
        self._probe(x)
        self._loss_fn = loss_fn
        self._scale = None
        if scaler is not None and scaler.is_enabled():
            device = next(self.stage.parameters()).device
            self._scale = scaler.scale(torch.ones((), device=device))  # every stage: its scale
        # The runtimes scale and average the gradients they produce: set earlier ones aside
        # so that only this batch's are scaled, averaged and summed over tied copies.
        earlier = [(p, p.grad) for p in self.stage.parameters()]
        for p, _ in earlier:
            p.grad = None
        xs, ys = ex.shard(x), ex.shard(y)
        loss = ex.step(xs if ex.is_first else None, ys if ex.is_last else None)
        self._sum_shared()
        for p, grad in earlier:
            if grad is not None:
                p.grad = grad if p.grad is None else grad.add_(p.grad)
        self._record_versions()
        total = loss.detach().reshape(()).float() if loss is not None else torch.zeros(())
        if loss is not None and self._scale is not None:
            total = total / self._scale.to(total.device)
        if dist.is_initialized():
            comm.all_reduce(total)  # one last stage per replica holds its share's loss
            total /= self.data_parallel
        return total

    def _probe(self, x: Tensor | None) -> None:
        # Once, before the first message: a stage that cannot hand on one tensor fails on
        # every rank together instead of leaving its neighbours waiting.
        if not self._probed and dist.is_initialized():
            ex = self.executor
            probe(self.stage, ex.stage, ex.ranks, x if ex.is_first else None, ex.pp_group)
        self._probed = True

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> Tensor:
        """`torch.nn.utils.clip_grad_norm_` over the whole model's gradients: the squared norm
        of every stage's gradients is all-reduced, each stage scales its own. Returns the norm."""
        if norm_type != 2.0:
            raise UserError("pipeline clip_grad_norm_ takes the 2-norm only: use norm_type=2")
        grads = [p.grad for p in self._norm_params if p.grad is not None]
        square = torch.zeros((), dtype=torch.float32)
        for g in grads:
            square += g.detach().float().pow(2).sum()
        if dist.is_initialized():
            comm.all_reduce(square, group=self.executor.pp_group)
        total = square.sqrt()
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for p in self.stage.parameters():
            if p.grad is not None:
                p.grad.detach().mul_(coef.to(p.grad.dtype))
        self._record_versions()
        return total

    def _shared_groups(self, blocks: BlockModel, ranges: tuple[tuple[int, int], ...]
                       ) -> list[tuple[Any, list[nn.Parameter]]]:  # fmt: skip
        # Every rank creates every replica's groups in the same order (new_group is collective).
        ex = self.executor
        replicas = self.data_parallel
        mine = []
        for stages, params in shared_parameters(blocks, ranges):
            for d in range(replicas):
                ranks = tuple(d * len(ranges) + s for s in stages)
                if ranks not in _GROUPS:
                    _GROUPS[ranks] = new_group(list(ranks))
                if ex.stage in stages and ex.ranks[0] == d * len(ranges):
                    mine.append((_GROUPS[ranks], params))
        return mine

    def _sum_shared(self) -> None:
        for group, params in self._shared:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            flat = torch.cat([g.reshape(-1) for g in grads])
            comm.all_reduce(flat, group=group)
            for p, value in zip(params, flat.split([p.numel() for p in params]), strict=True):
                p.grad = value.view_as(p).clone()

    def _record_versions(self) -> None:
        self._versions = {
            id(p): (id(p.grad), p.grad._version)
            for p in self.stage.parameters() if p.grad is not None
        }  # fmt: skip

    def edited_grads(self, params: Iterable[Tensor]) -> bool:
        """Whether any of `params`' gradients changed in place since `train_step` or
        `clip_grad_norm_` (e.g. clipped by torch, which sees only this stage's norm)."""
        for p in params:
            seen = self._versions.get(id(p))
            if seen is not None and p.grad is not None and seen != (id(p.grad), p.grad._version):
                return True
        return False

    # ---- evaluation ----------------------------------------------------------------------
    def forward(self, x: Tensor | None = None) -> Tensor:
        """The model's output on `x` (needed on the first stage), on every rank of the
        pipeline, without gradients: for evaluation between steps."""
        if torch.is_grad_enabled():
            raise UserError(
                "a pipeline trains with train_step(x, y, loss_fn); evaluate with pipe(x) "
                "under torch.no_grad()"
            )
        ex = self.executor
        if ex.is_first and x is None:
            raise UserError("the first pipeline stage needs the inputs x")
        self._probe(x)
        h = self.stage(x) if ex.is_first else self.stage(recv(ex.ranks[ex.stage - 1]))
        if not ex.is_last:
            send(h, ex.ranks[ex.stage + 1])
        return broadcast(h if ex.is_last else None, ex.ranks[-1], ex.pp_group)

    # ---- state ---------------------------------------------------------------------------
    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        """This stage's parameters under the names they have in the plain model."""
        return self.stage.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        return self.stage.named_buffers(prefix, recurse, remove_duplicate)

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "",
                   keep_vars: bool = False) -> Any:  # fmt: skip
        """This stage's entries, under the names they have in the plain model."""
        return self.stage.state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any:  # fmt: skip
        """Load this stage's entries from a stage's or the whole model's state."""
        names = set(self.stage.state_dict())
        mine = {k: v for k, v in state_dict.items() if k in names}
        return self.stage.load_state_dict(mine, strict=strict, assign=assign)


def _scaler_handler(optimizer: torch.optim.Optimizer) -> Handler | None:
    """`cadence.amp`'s resolver: the unscale of an optimizer over a live pipeline stage."""
    ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for live in list(_LIVE):
        if any(id(p) in ids for p in live.stage.parameters()):
            return functools.partial(live.unscale_grads_, optimizer)
    return None


def _guard(pipe: PipelineParallel) -> None:
    """Refuse an optimizer step on gradients edited in place after `train_step` (a torch clip
    on one stage scales by that stage's norm alone: a silently different update)."""
    global _HOOKED
    _LIVE.add(pipe)
    if _HOOKED:
        return

    def check(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        for live in list(_LIVE):
            if live.edited_grads(params):
                raise UserError(
                    "gradients of a pipeline stage changed in place after train_step: to clip, "
                    "call pipe.clip_grad_norm_(max_norm), which takes the norm over every stage"
                )

    register_optimizer_step_pre_hook(check)
    register_scaler(_scaler_handler)
    _HOOKED = True

