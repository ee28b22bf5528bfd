"""The user's torch optimizer, rebuilt over this rank's pieces of the flat buckets.

A rank owns one contiguous piece of every bucket; the piece cuts through the bucket's
parameters, so the optimizer steps one 1-D segment per (parameter, piece) overlap, each a view
into the piece. Every segment keeps its parameter's param group (decay / no-decay stays as the
user set it), and a parameter that got no gradient on any rank gets grad None, so torch skips it
(no weight decay, no momentum), as under DDP. Sharding is exact only for optimizers whose update
of an element reads that element's gradient and state alone: those are listed in `ELEMENTWISE`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from cadence.errors import UserError
from cadence.zero.layout import Bucket

ELEMENTWISE: tuple[type[Optimizer], ...] = (
    torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad,
    torch.optim.Adadelta, torch.optim.Adamax, torch.optim.ASGD, torch.optim.NAdam,
    torch.optim.RAdam, torch.optim.RMSprop, torch.optim.Rprop,
)  # fmt: skip
"""torch optimizers whose update is element by element (shape-blind): exact on any shard."""

BY_NAME: dict[str, type[Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": torch.optim.SGD,
}

OptimizerArg = str | Optimizer | Callable[[Iterable[nn.Parameter]], Optimizer]
"""What `cadence.zero` takes: a name (with keyword hyper-parameters), an optimizer built over
`model.parameters()`, or a factory `params -> optimizer`."""


@dataclass(frozen=True)
class Segment:
    """One parameter's overlap with this rank's piece of its bucket."""

    slot: int
    """Index of the parameter in its bucket's slots."""
    lo: int
    """First element, in the piece's coordinates."""
    hi: int
    """One past the last element, in the piece's coordinates."""


def segments(bucket: Bucket, rank: int) -> list[Segment]:
    """The overlaps of `rank`'s piece of `bucket` with its parameters, in order (pure)."""
    lo, hi = bucket.piece_range(rank)
    out = []
    for i, slot in enumerate(bucket.slots):
        a, b = max(lo, slot.offset), min(hi, slot.offset + slot.numel)
        if a < b:
            out.append(Segment(i, a - lo, b - lo))
    return out


def resolve(optimizer: OptimizerArg, model: nn.Module, kwargs: dict[str, Any]) -> Optimizer:
    """The user's optimizer over `model`'s parameters (built here from a name or a factory),
    refused in one line if it cannot be sharded exactly."""
    if isinstance(optimizer, str):
        if optimizer not in BY_NAME:
            raise UserError(
                f"unknown ZeRO optimizer '{optimizer}': choose one of {', '.join(BY_NAME)} "
                "or pass a torch optimizer"
            )
        try:
            built = BY_NAME[optimizer](model.parameters(), **kwargs)
        except TypeError as exc:
            raise UserError(f"bad arguments for optimizer {optimizer}: {exc}") from None
    elif kwargs:
        raise UserError(
            f"cadence.zero got optimizer arguments {sorted(kwargs)} beside a torch optimizer: "
            "set them on the optimizer itself"
        )
    elif isinstance(optimizer, Optimizer):
        built = optimizer
    elif callable(optimizer):
        built = optimizer(model.parameters())
        if not isinstance(built, Optimizer):
            raise UserError("the optimizer factory passed to cadence.zero must return a torch "
                            f"optimizer, not {type(built).__name__}")  # fmt: skip
    else:
        raise UserError(
            "cadence.zero takes an optimizer name, a torch optimizer or a factory params -> "
            f"optimizer, not {type(optimizer).__name__}"
        )
    if type(built) not in ELEMENTWISE:
        names = ", ".join(c.__name__ for c in ELEMENTWISE)
        raise UserError(
            f"cadence.zero cannot shard {type(built).__name__}: its update may read a whole "
            f"parameter or the whole model; use one of {names}, or cadence.data_parallel"
        )
    if any(float(s.get("step", 1)) > 0 for s in built.state.values()):  # Adagrad: step 0
        raise UserError(
            "the optimizer passed to cadence.zero has already stepped: wrap the model before "
            "training, then load saved state with the returned optimizer's load_state_dict"
        )
    return built


def group_index(user: Optimizer, params: list[nn.Parameter]) -> dict[int, int]:
    """id(parameter) -> index of its param group; refuses parameters the model lacks."""
    known = {id(p) for p in params}
    out: dict[int, int] = {}
    for gi, group in enumerate(user.param_groups):
        for p in group["params"]:
            if not p.requires_grad:  # frozen: no gradient, so torch's step would skip it too
                continue
            if id(p) not in known:
                raise UserError(
                    "the optimizer passed to cadence.zero holds a parameter that is not a "
                    "trainable parameter of the model: build it over model.parameters()"
                )
            out[id(p)] = gi
    return out


def rebuild(user: Optimizer, groups: list[list[nn.Parameter]]) -> Optimizer:
    """An optimizer of `user`'s class and hyper-parameters over `groups` (one list of segment
    parameters per user param group; empty lists are kept so group indices stay the user's)."""
    if not any(groups):  # a rank whose pieces are all padding still needs a parameter
        groups = [[nn.Parameter(torch.zeros(0))], *groups[1:]]
    specs = [
        {**{k: v for k, v in g.items() if k != "params"}, "params": ps}
        for g, ps in zip(user.param_groups, groups, strict=True)
    ]
    inner = type(user)(specs)  # type: ignore[call-arg]  # every built-in takes params alone
    inner.defaults = dict(user.defaults)
    return inner


def single_group(user: Optimizer, what: str) -> dict[str, Any]:
    """The hyper-parameters of an optimizer that must have one param group (1-bit Adam)."""
    if type(user) is not torch.optim.Adam or len(user.param_groups) != 1:
        raise UserError(
            f"{what} is 1-bit Adam: pass optimizer 'adam' or one torch.optim.Adam with a single "
            f"param group (got {type(user).__name__} with {len(user.param_groups)} groups)"
        )
    return {k: v for k, v in user.param_groups[0].items() if k != "params"}
