"""Stage-to-stage messages outside the training schedule: evaluation's forward, and the probe
that checks, before the first training step, that every stage hands on one tensor.

A stage that fails on its own would leave its neighbours waiting for a message forever; the
probe runs one sample through the stages, passes an empty tensor on after a failure, and
all-reduces the outcome, so every rank of the pipeline raises the same error together.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor, nn

from cadence.comm import ops as comm
from cadence.errors import UserError
from cadence.pipeline.executor import _DTYPES, _META_LEN

_TAG = 1 << 20  # above every tag a training step uses
ONE_TENSOR = "stages pass one tensor to the next: cut the model where a block returns one tensor"


def check_output(module: nn.Module, args: Any, out: Any) -> None:
    """Forward hook on a stage: its output must be one tensor."""
    if not isinstance(out, Tensor):
        raise UserError(f"a pipeline stage returned {type(out).__name__}: {ONE_TENSOR}")


def probe(stage: nn.Module, index: int, ranks: list[int], x: Tensor | None, group: Any) -> None:
    """Run one sample of `x` (first stage) through stage `index` of the stages on `ranks`, in
    eval mode without gradients (no statistics updated); raise on every rank if any failed."""
    failed = torch.zeros(len(ranks))
    reason = ""
    last = index == len(ranks) - 1
    modes = [(m, m.training) for m in stage.modules()]
    stage.eval()
    # Autocast off: casts cached under no_grad would be reused by the training forward in
    # the same autocast region, cut off from the graph (their weights would get no gradient).
    off = [torch.autocast(kind, enabled=False) for kind in ("cpu", "cuda") if _has(kind)]
    try:
        with torch.no_grad(), contextlib.ExitStack() as stack:
            for context in off:
                stack.enter_context(context)
            h = x[:1] if x is not None else recv(ranks[index - 1])
            out: Tensor = torch.empty(0)
            if h.numel():  # empty: an earlier stage failed
                try:
                    out = stage(h)
                except Exception as exc:  # noqa: BLE001 - reported on every rank below
                    failed[index] = 1
                    reason = f"{type(exc).__name__}: {exc}"
            if not last:
                send(out if isinstance(out, Tensor) else torch.empty(0), ranks[index + 1])
    finally:
        for module, mode in modes:
            module.train(mode)
    comm.all_reduce(failed, group=group)
    if failed.any():
        bad = int(failed.nonzero()[0])
        where = reason if failed[index] else f"see the error on rank {ranks[bad]}"
        raise UserError(f"pipeline stage {bad} failed on a one-sample forward ({where})")


def _has(kind: str) -> bool:
    return kind == "cpu" or torch.cuda.is_available()


def send(tensor: Tensor, dst: int) -> None:
    meta = torch.zeros(_META_LEN, dtype=torch.int64)
    meta[0], meta[1] = _DTYPES.index(tensor.dtype), tensor.dim()
    meta[2 : 2 + tensor.dim()] = torch.tensor(tensor.shape)
    comm.send(meta, dst, tag=_TAG)
    comm.send(tensor.contiguous(), dst, tag=_TAG + 1)


def recv(src: int) -> Tensor:
    meta = torch.zeros(_META_LEN, dtype=torch.int64)
    comm.recv(meta, src, tag=_TAG)
    shape = [int(d) for d in meta[2 : 2 + int(meta[1])]]
    out = torch.empty(shape, dtype=_DTYPES[int(meta[0])])
    comm.recv(out, src, tag=_TAG + 1)
    return out


def broadcast(tensor: Tensor | None, src: int, group: Any) -> Tensor:
    """`tensor` from global rank `src` to every rank of `group`, shape and dtype included."""
    meta = torch.zeros(_META_LEN, dtype=torch.int64)
    if tensor is not None:
        meta[0], meta[1] = _DTYPES.index(tensor.dtype), tensor.dim()
        meta[2 : 2 + tensor.dim()] = torch.tensor(tensor.shape)
    comm.broadcast(meta, src, group=group)
    if tensor is None:
        shape = [int(d) for d in meta[2 : 2 + int(meta[1])]]
        tensor = torch.empty(shape, dtype=_DTYPES[int(meta[0])])
    tensor = tensor.contiguous()
    comm.broadcast(tensor, src, group=group)
    return tensor
