"""Carry out one stage's action list on this rank.

Two runtimes execute the same `Schedule`:

- `torch`: torch.distributed.pipelining's `PipelineStage` and `_PipelineScheduleRuntime`, fed our
  action lists (it lowers them to its own send/recv actions). Used for schedules with one
  micro-batch per message and no recomputation, which is what it supports.
- `torch-builtin`: torch's own `ScheduleGPipe` / `Schedule1F1B` (their order, not our lists),
  only to measure torch's schedules side by side with ours.
- `cadence`: our own, below, on `isend`/`irecv`. Needed for kFkB (K micro-batches' tensors
  concatenated into ONE message, which torch's runtime cannot express) and for recomputation.

Both scale each micro-batch's loss by 1/M, so the accumulated gradients are those of the mean
loss over the full batch: single-process training on the same batch gives the same step
(models with BatchNorm see per-micro-batch statistics, as in any pipeline).

Message order needs no agreement beyond the schedule: every message is tagged with its first
micro-batch id and direction, sends are asynchronous, and the validator has already replayed
the schedule under exactly these rules. Recomputation re-runs a stage's forward in backward, so
BatchNorm running statistics update twice and dropout would draw new masks (no zoo model has
dropout).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor, nn

from cadence.comm import ops as comm
from cadence.pipeline.receives import torch_runtime_supports
from cadence.pipeline.schedule import FORWARD, Action, Schedule
from cadence.pipeline.validation import validate

LossFn = Callable[[Tensor, Tensor], Tensor]
BACKENDS = ("auto", "cadence", "torch", "torch-builtin")
_BUILTIN = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}
_META_LEN = 10  # dtype code, ndim, then up to 8 dims of one micro-batch's activation
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64)


def _torch_runtime() -> bool:
    # The runtime that takes custom action lists is private in torch: fall back to ours
    # should a torch release move it.
    try:
        from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class _Held:
    """What a stage keeps of one micro-batch between its forward and its backward."""

    inp: Tensor | None
    """The stage input (requires grad on stages after the first)."""
    out: Tensor | None = None
    """The stage output, or the loss on the last stage (None while recomputation is pending)."""


@dataclass
class _Links:
    """Point-to-point traffic of one step: posted sends and prefetched receives."""

    sends: list[tuple[dist.Work, Tensor]] = field(default_factory=list)
    recvs: dict[tuple[str, tuple[int, ...]], tuple[dist.Work, Tensor]] = field(
        default_factory=dict
    )


class PipelineExecutor:
    """One pipeline stage on this rank: `step(x, y)` runs its schedule for one batch.

    Gradients accumulate into the stage module's parameters (the caller zeroes them and steps
    the optimizer, as in ordinary training). `ranks[s]` is the global rank running stage s.
    Hybrid data x pipeline: `pp_group` holds this replica's stages (ranks `ranks`, needed by
    torch's runtime) and `dp_group` this stage's replicas, over which gradients are averaged
    at the end of each step.
    """

    def __init__(
        self,
        module: nn.Module,
        schedule: Schedule,
        stage: int,
        loss_fn: LossFn,
        ranks: Sequence[int] | None = None,
        backend: str = "auto",
        pp_group: dist.ProcessGroup | None = None,
        dp_group: dist.ProcessGroup | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        validate(schedule)
        if backend == "auto":
            usable = torch_runtime_supports(schedule) and _torch_runtime()
            backend = "torch" if usable else "cadence"
        if backend == "torch-builtin" and (schedule.name not in _BUILTIN or schedule.recompute):
            raise ValueError(f"torch has no built-in schedule for {schedule.name}")
        if backend == "torch" and not torch_runtime_supports(schedule):
            raise ValueError(f"torch's runtime cannot run {schedule.name} (grouped or recompute)")
        self.module = module
        # Messages are received where the stage computes: NCCL takes only its GPU's tensors.
        self.device = next(module.parameters(), torch.empty(0)).device
        self.schedule = schedule
        self.stage = stage
        self.loss_fn = loss_fn
        self.backend = backend
        self.ranks = list(ranks) if ranks is not None else list(range(schedule.num_stages))
        self.pp_group = pp_group
        self.dp_group = dp_group
        self.is_first = stage == 0
        self.is_last = stage == schedule.num_stages - 1
        # dtype and shape of one micro-batch's stage input (learnt from the first message)
        # and output (known after the first forward): they size every later receive.
        self._in_meta: tuple[torch.dtype, tuple[int, ...]] | None = None
        self._out_meta: tuple[torch.dtype, tuple[int, ...]] | None = None
        self._ys: list[Tensor] = []
        self._meta_sent = False
        self.peak_held = 0
        """Most micro-batches this stage held for backward at once (our runtime; since
        construction): what `memory.peak_in_flight` predicts."""
        self._torch_schedule = self._build_torch() if backend.startswith("torch") else None

    # ---- torch runtime -------------------------------------------------------------------
    def _build_torch(self) -> object:
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining.schedules import (
            _Action,
            _ComputationType,
            _PipelineScheduleRuntime,
        )

        S, M = self.schedule.num_stages, self.schedule.num_microbatches
        if self.pp_group is None and self.ranks != list(range(dist.get_world_size())):
            raise ValueError("torch's runtime needs pp_group when the stages are not all ranks")
        group = self.pp_group
        device = next(self.module.parameters()).device
        stage = PipelineStage(self.module, self.stage, S, device, group=group)
        if self.backend == "torch-builtin":  # torch's own classes, for side-by-side benchmarks
            from torch.distributed import pipelining

            builtin = getattr(pipelining, _BUILTIN[self.schedule.name])
            return builtin(stage, M, loss_fn=self.loss_fn, scale_grads=True)
        runtime = _PipelineScheduleRuntime([stage], M, loss_fn=self.loss_fn, scale_grads=True)
        kinds = {FORWARD: _ComputationType.FORWARD}
        actions: dict[int, list[_Action | None]] = {
            s: [
                _Action(a.stage, kinds.get(a.kind, _ComputationType.FULL_BACKWARD),
                        a.microbatches[0])
                for a in acts
            ]
            for s, acts in enumerate(self.schedule.actions)
        }
        runtime._prepare_schedule_with_comms(actions)
        return runtime

    def _step_torch(self, x: Tensor | None, y: Tensor | None) -> Tensor | None:
        runtime = self._torch_schedule
        losses: list[Tensor] = []
        if self.is_first and self.is_last:
            runtime.step(x, target=y, losses=losses)  # type: ignore[attr-defined]
        elif self.is_first:
            runtime.step(x)  # type: ignore[attr-defined]
        elif self.is_last:
            runtime.step(target=y, losses=losses)  # type: ignore[attr-defined]
        else:
            runtime.step()  # type: ignore[attr-defined]
        if not self.is_last:
            return None
        return torch.stack([loss.detach() for loss in losses]).mean()

    # ---- cadence runtime -----------------------------------------------------------------
    def step(self, x: Tensor | None = None, y: Tensor | None = None) -> Tensor | None:
        """Forward and backward the whole batch; the first stage needs `x`, the last `y`.

        Returns the batch's mean loss on the last stage, None elsewhere.
        """
        if self.is_first and x is None or self.is_last and y is None:
            raise ValueError("the first stage needs the inputs x and the last the targets y")
        for t in (x, y):
            if t is not None and t.shape[0] % self.schedule.num_microbatches:
                raise ValueError(
                    f"batch of {t.shape[0]} does not split into "
                    f"{self.schedule.num_microbatches} equal micro-batches"
                )
        loss = self._step_torch(x, y) if self._torch_schedule is not None else self._step(x, y)
        if self.dp_group is not None:
            self._average_grads(self.dp_group)
        return loss

    def shard(self, batch: Tensor) -> Tensor:
        """This replica's contiguous 1/D share of a global batch (all of it without data
        parallelism): replica d feeds rows [d B/D, (d+1) B/D) to its pipeline."""
        if self.dp_group is None:
            return batch
        return torch.tensor_split(batch, dist.get_world_size(self.dp_group))[
            dist.get_rank(self.dp_group)
        ]

    def _average_grads(self, group: dist.ProcessGroup) -> None:
        # One flat all-reduce per step: the stage's gradients averaged over its replicas.
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        comm.all_reduce(flat, group=group)
        flat /= dist.get_world_size(group)
        for g, value in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            g.copy_(value.view_as(g))

    def _step(self, x: Tensor | None, y: Tensor | None) -> Tensor | None:
        M = self.schedule.num_microbatches
        xs = list(torch.tensor_split(x, M)) if x is not None else []
        ys = list(torch.tensor_split(y, M)) if y is not None else []
        self._ys = ys
        held: dict[int, _Held] = {}
        links = _Links()
        losses: list[Tensor] = []
        acts = self.schedule.actions[self.stage]
        # Post every receive of the step up front (once the message shapes are known, i.e.
        # from the second step on): gloo moves a message only once its receive is posted, so
        # receives posted one action ahead made a train of messages cross one at a time, each
        # waiting for the receiver to reach the action before it (GPipe's gradients).
        for action in acts:
            self._prefetch(action, links)
        for i, action in enumerate(acts):
            if i + 1 < len(acts):
                self._prefetch(acts[i + 1], links)
            if action.kind == FORWARD:
                self._forward(action, xs, ys, held, links, losses)
            else:
                self._backward(action, held, links)
        for work, _ in links.sends:
            work.wait()
        return torch.stack(losses).sum() if self.is_last else None

    def _peer(self, stage: int) -> int:
        return self.ranks[stage]

    @staticmethod
    def _tag(action: Action, grad: bool) -> int:
        return 3 * action.microbatches[0] + (1 if grad else 0)

    def _send(self, tensor: Tensor, stage: int, tag: int, links: _Links) -> None:
        tensor = tensor.contiguous()
        work = comm.isend(tensor, self._peer(stage), tag=tag)
        assert work is not None  # None only for ranks outside the group
        links.sends.append((work, tensor))

    def _send_meta(self, sample: Tensor, links: _Links) -> None:
        # Once per executor: the next stage learns dtype and shape of one micro-batch's output.
        meta = torch.zeros(_META_LEN, dtype=torch.int64, device=self.device)
        meta[0], meta[1] = _DTYPES.index(sample.dtype), sample.dim()
        meta[2 : 2 + sample.dim()] = torch.tensor(sample.shape)
        self._send(meta, self.stage + 1, 2, links)
        self._meta_sent = True

    def _recv_meta(self) -> tuple[torch.dtype, tuple[int, ...]]:
        if self._in_meta is None:
            meta = torch.zeros(_META_LEN, dtype=torch.int64, device=self.device)
            comm.recv(meta, self._peer(self.stage - 1), tag=2)
            ndim = int(meta[1])
            self._in_meta = (_DTYPES[int(meta[0])], tuple(int(d) for d in meta[2 : 2 + ndim]))
        return self._in_meta

    def _inbound(self, action: Action) -> tuple[int, bool, torch.dtype, torch.Size] | None:
        """(peer stage, is-gradient, dtype, shape) of the message `action` waits for; None if
        it needs none or its shape is not known yet (before the first message's metadata)."""
        if action.kind == FORWARD:
            meta, peer, grad = (None if self.is_first else self._in_meta), self.stage - 1, False
        else:
            meta, peer, grad = (None if self.is_last else self._out_meta), self.stage + 1, True
        if meta is None:
            return None
        dtype, one = meta
        return peer, grad, dtype, torch.Size((one[0] * len(action.microbatches), *one[1:]))

    def _prefetch(self, action: Action, links: _Links) -> None:
        # Post the receive of the next action's message now, so it arrives while we compute.
        key = (action.kind, action.microbatches)
        inbound = self._inbound(action)
        if inbound is None or key in links.recvs:
            return
        peer, grad, dtype, shape = inbound
        buf = torch.empty(shape, dtype=dtype, device=self.device)
        work = comm.irecv(buf, self._peer(peer), tag=self._tag(action, grad))
        assert work is not None
        links.recvs[key] = (work, buf)

    def _receive(self, action: Action, links: _Links) -> Tensor:
        key = (action.kind, action.microbatches)
        if key not in links.recvs:
            if action.kind == FORWARD:
                self._recv_meta()
            self._prefetch(action, links)
        work, buf = links.recvs.pop(key)
        work.wait()
        return buf

    def _forward(self, action: Action, xs: list[Tensor], ys: list[Tensor],
                 held: dict[int, _Held], links: _Links, losses: list[Tensor]) -> None:
        mbs = action.microbatches
        if self.is_first:
            inputs = [xs[m] for m in mbs]
        else:
            inputs = list(torch.tensor_split(self._receive(action, links), len(mbs)))
        outputs = []
        for m, inp in zip(mbs, inputs, strict=True):
            if not self.is_first:
                inp = inp.detach().requires_grad_(True)
            if self.schedule.recompute:
                with torch.no_grad():
                    out = self.module(inp)
                held[m] = _Held(inp, None)
            else:
                out = self.module(inp)
                held[m] = _Held(inp, out)
            self.peak_held = max(self.peak_held, len(held))
            if self.is_last:
                loss = self._loss(out, ys[m])
                losses.append(loss.detach())
                if not self.schedule.recompute:
                    held[m].out = loss
            outputs.append(out.detach())
        if not self.is_last:
            self._out_meta = (outputs[0].dtype, tuple(outputs[0].shape))
            if not self._meta_sent:
                self._send_meta(outputs[0], links)
            self._send(torch.cat(outputs), self.stage + 1, self._tag(action, False), links)

    def _loss(self, out: Tensor, y: Tensor) -> Tensor:
        return self.loss_fn(out, y) / self.schedule.num_microbatches

    def _backward(self, action: Action, held: dict[int, _Held], links: _Links) -> None:
        mbs = action.microbatches
        if self.is_last:
            grads: list[Tensor | None] = [None] * len(mbs)
        else:
            grads = list(torch.tensor_split(self._receive(action, links), len(mbs)))
        input_grads = []
        for m, grad in zip(mbs, grads, strict=True):
            h = held.pop(m)
            out = h.out
            if out is None:  # recomputation: rebuild this micro-batch's graph now
                out = self.module(h.inp)
                if self.is_last:
                    out = self._loss(out, self._ys[m])
            torch.autograd.backward(out, grad)
            if not self.is_first:
                assert h.inp is not None and h.inp.grad is not None
                input_grads.append(h.inp.grad)
        if not self.is_first:
            self._send(torch.cat(input_grads), self.stage - 1, self._tag(action, True), links)
