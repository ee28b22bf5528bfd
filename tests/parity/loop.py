"""One training run of a model case under one habit of an ordinary training loop, through any
strategy that wraps the model and optimizer the way its users would call it.

A strategy is a function `wrap(model, make_optimizer) -> Wrapped`; the loop below is written once
against `Wrapped` so DDP (the reference) and every cadence strategy run exactly the same code.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from tests.parity.models import ModelCase

STEPS = 4
GLOBAL_BATCH = 8  # divisible by world sizes 2 and 4, and again by 2 micro-batches
SAVE_AFTER = 1  # the step after which a checkpoint is saved, or evaluation runs
CLIP = 0.05  # small enough that every model's gradients are clipped
HABITS = (
    "plain",  # zero_grad / forward / backward / step, SGD with momentum
    "accum",  # two micro-batches a step, the first under `no_sync()`
    "clip",  # the strategy's own clip by global norm before `step()`
    "torch_clip",  # `torch.nn.utils.clip_grad_norm_` on the wrapped model's parameters
    "lr_schedule",  # a per-step LambdaLR, and an edit of param_groups' lr between steps
    "adamw_groups",  # AdamW with decay / no-decay groups, and a parameter that gets no grad
    "bf16",  # forward and loss under torch.autocast(bfloat16) on the CPU
    "state_dict",  # model and optimizer state saved mid-run, loaded into a fresh wrap
    "eval",  # model.eval() + no_grad forward between steps sees the updated weights
)
WIDE_HABITS = ("plain", "accum", "clip")
"""The habits that change how gradients are reduced: the matrices cross them with every
setting at world size 4, where four ranks share CI's two cores."""
FOUR_RANK_CASES = ("gpt2", "bert", "encoder", "smallnet")
"""The model cases the matrices cross at world size 4: both transformers models (GPT-2's tied
weights), torch's MultiheadAttention, and the net with BatchNorm buffers, a shared weight and
an unused parameter. resnet and gpt_mini_tied add no part these lack and run at 2."""
HABIT_TOLERANCE = {"bf16": (2e-3, 2e-2)}
"""(atol, rtol) where rounding is coarser than float32's; the rest use `DEFAULT_TOLERANCE`."""
DEFAULT_TOLERANCE = (1e-5, 1e-4)

MakeOptimizer = Callable[[Iterable[Any]], torch.optim.Optimizer]


@dataclass
class Wrapped:
    """A strategy's wrapped model and optimizer, and how the loop reaches its features."""

    model: nn.Module
    """What the loop calls forward on."""
    optimizer: Any
    """step / zero_grad / param_groups / state_dict / load_state_dict, as torch's."""
    module: nn.Module
    """The plain model: its `state_dict()` keys are compared with the reference's."""
    no_sync: Callable[[], AbstractContextManager[Any]] = nullcontext
    """DDP's `no_sync`: gradients of the backward passes inside are accumulated, not synced."""
    clip: Callable[[float], Any] | None = None
    """The strategy's own clip of the global gradient norm, called between backward and step."""
    finish: Callable[[], None] = lambda: None
    """Wait for work still in flight (updates, gathers) before results are read."""
    close: Callable[[], object] = lambda: None
    """Release hooks, threads and groups: the next cell starts clean."""
    state_dict: Callable[[], dict[str, Tensor]] | None = None
    """The model's state as users save it; None: `module.state_dict()`."""
    partial: bool = False
    """Results hold only some of the model's entries (a pipeline stage's): the rest are skipped."""
    train_step: Callable[[Tensor, Tensor, Callable[[Tensor, Tensor], Tensor]], Any] | None = None
    """Replaces the loop's forward and backward: `train_step(x, y, criterion)` on the WHOLE
    global batch on every rank (a pipeline), gradients added to `.grad`; "accum" calls it on
    the two halves of the batch with the loss halved."""
    extra: dict[str, Any] = field(default_factory=dict)


Wrap = Callable[[nn.Module, MakeOptimizer], Wrapped]


def ddp(model: nn.Module, make_optimizer: MakeOptimizer, **ddp_options: Any) -> Wrapped:
    """The reference: torch's DistributedDataParallel with its defaults (buffers broadcast from
    rank 0 at every forward), finding unused parameters so they keep grad None; `ddp_options`
    go to DDP as they are (`bucket_cap_mb`, ...)."""
    wrapped = DistributedDataParallel(model, find_unused_parameters=True, **ddp_options)
    optimizer = make_optimizer(wrapped.parameters())
    return Wrapped(
        model=wrapped,
        optimizer=optimizer,
        module=model,
        no_sync=wrapped.no_sync,
        clip=lambda norm: torch.nn.utils.clip_grad_norm_(wrapped.parameters(), norm),
    )


def _optimizer_factory(habit: str, model: nn.Module) -> MakeOptimizer:
    if habit in ("adamw_groups", "state_dict"):
        decay = {id(p) for n, p in model.named_parameters() if p.ndim >= 2}

        def adamw(params: Iterable[Any]) -> torch.optim.Optimizer:
            params = list(params)
            groups = [
                {"params": [p for p in params if id(p) in decay], "weight_decay": 0.1},
                {"params": [p for p in params if id(p) not in decay], "weight_decay": 0.0},
            ]
            # eps well above float32 rounding noise: some gradients are exactly zero in theory
            # (attention's key bias), and Adam would turn their summation-order noise into
            # full-size steps of either sign, in DDP and every strategy alike.
            return torch.optim.AdamW([g for g in groups if g["params"]], lr=1e-3, eps=1e-6)

        return adamw
    return lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _build(case: ModelCase, habit: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = case.build()
    if habit == "adamw_groups":
        return case.with_unused(model) if case.with_unused is not None else WithUnused(model)
    return model


def _whole_batch_step(case: ModelCase, habit: str, step: Callable[..., Any], x: Tensor,
                      y: Tensor) -> None:  # fmt: skip
    criterion = case.criterion
    if criterion is None:
        raise NotImplementedError(f"model case {case.name} has no criterion for train_step")
    if habit == "accum":
        half = x.shape[0] // 2
        for part in (slice(0, half), slice(half, None)):
            step(x[part], y[part], lambda out, t: criterion(out, t) / 2)
    elif habit == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            step(x, y, criterion)
    else:
        step(x, y, criterion)


class WithUnused(nn.Module):
    """The user's model beside a layer that is never called: it gets no gradient, so DDP leaves
    it alone (no weight decay, no momentum)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.never_called = nn.Linear(3, 3)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs)


def _share(tensor: Tensor, rank: int, world_size: int, parts: int = 1) -> list[Tensor]:
    per_rank = tensor.shape[0] // world_size
    mine = tensor[rank * per_rank : (rank + 1) * per_rank]
    return list(mine.chunk(parts))


def train(case: ModelCase, habit: str, wrap: Wrap, rank: int, world_size: int) -> dict[str, Tensor]:
    """Train `case` for `STEPS` steps with `habit`; the model's state (and, for "eval", the
    logits seen between steps) as host tensors."""
    if habit not in HABITS:
        raise ValueError(f"unknown habit {habit!r}")
    model = _build(case, habit, seed=0)
    make_optimizer = _optimizer_factory(habit, model)
    w = wrap(model, make_optimizer)
    scheduler = None
    if habit == "lr_schedule":
        scheduler = torch.optim.lr_scheduler.LambdaLR(w.optimizer, lambda s: 1.0 / (1 + s))
    gen = torch.Generator().manual_seed(1234)
    out: dict[str, Tensor] = {}
    for step in range(STEPS):
        x, y = case.batch(gen, GLOBAL_BATCH)
        w.optimizer.zero_grad()
        if w.train_step is not None:
            _whole_batch_step(case, habit, w.train_step, x, y)
        elif habit == "accum":
            (x0, x1), (y0, y1) = _share(x, rank, world_size, 2), _share(y, rank, world_size, 2)
            with w.no_sync():
                (case.loss(w.model, x0, y0) / 2).backward()
            (case.loss(w.model, x1, y1) / 2).backward()
        else:
            (xs,), (ys,) = _share(x, rank, world_size), _share(y, rank, world_size)
            if habit == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = case.loss(w.model, xs, ys)
            else:
                loss = case.loss(w.model, xs, ys)
            loss.backward()
        if habit == "clip":
            if w.clip is None:
                raise NotImplementedError("the strategy offers no clip_grad_norm_")
            w.clip(CLIP)
        elif habit == "torch_clip":
            torch.nn.utils.clip_grad_norm_(w.module.parameters(), CLIP)
        w.optimizer.step()
        if scheduler is not None:
            scheduler.step()
            if step == SAVE_AFTER:
                for group in w.optimizer.param_groups:
                    group["lr"] *= 0.5  # a user's own edit between steps
        if step == SAVE_AFTER and habit == "eval":
            w.model.eval()
            with torch.no_grad():
                x_eval, _ = case.batch(torch.Generator().manual_seed(99), 2)
                out["eval:logits"] = case.output(w.model, x_eval).detach().float().clone()
            w.model.train()
        if step == SAVE_AFTER and habit == "state_dict":
            w = _reload(case, habit, wrap, w, make_optimizer)
    w.finish()
    state = w.state_dict() if w.state_dict is not None else w.module.state_dict()
    out.update({k: v.detach().float().cpu().clone() for k, v in state.items()})
    w.close()
    return out


def _reload(case: ModelCase, habit: str, wrap: Wrap, w: Wrapped, make: MakeOptimizer) -> Wrapped:
    """Save the wrapped model's and optimizer's state, wrap a differently initialised model
    afresh and load both: training must go on as if never interrupted."""
    model_state = w.state_dict() if w.state_dict is not None else w.module.state_dict()
    model_state = {k: v.detach().clone() for k, v in model_state.items()}
    optimizer_state = copy.deepcopy(w.optimizer.state_dict())
    w.close()
    fresh = _build(case, habit, seed=7)
    new = wrap(fresh, _optimizer_factory(habit, fresh))
    new.module.load_state_dict(model_state)
    new.optimizer.load_state_dict(optimizer_state)
    return new
