"""From the user's model to pipeline blocks: what can be cut into stages, and where.

A pipeline cuts a model between blocks that each take one tensor and return one tensor, so the
model must be a chain: an `nn.Sequential` (the zoo's `BlockModel` is one) or a list of modules.
Anything else has a `forward` cadence cannot see into, and is refused with what to pass instead.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from cadence.errors import UserError
from cadence.models.blocks import BlockModel
from cadence.pipeline.stages import even_split

NOT_SEQUENTIAL = (
    "pass an nn.Sequential or a list of modules (with split_points) whose blocks each take "
    "and return one tensor"
)


def as_blocks(model: nn.Module | Sequence[nn.Module]) -> BlockModel:
    """`model` as a `BlockModel` sharing its modules: a Sequential keeps its child names (so
    state_dict keys are the model's own), a list is numbered like `nn.Sequential(*modules)`."""
    if isinstance(model, BlockModel):
        return model
    if isinstance(model, nn.Sequential):
        return BlockModel(OrderedDict(model.named_children()))
    if isinstance(model, nn.ModuleList | list | tuple) and all(
        isinstance(m, nn.Module) for m in model
    ):
        return BlockModel(*model)
    raise UserError(
        f"{type(model).__name__} is not sequential, so cadence cannot cut it into pipeline "
        f"stages: {NOT_SEQUENTIAL}"
    )


def stage_ranges(
    num_blocks: int, num_stages: int, split_points: Sequence[int] | None
) -> tuple[tuple[int, int], ...]:
    """Block ranges of the stages: cut before each index in `split_points` (S - 1 strictly
    increasing indices in 1..num_blocks-1), or equal block counts when None."""
    if split_points is None:
        return even_split(num_blocks, num_stages)
    cuts = list(split_points)
    if len(cuts) != num_stages - 1:
        raise UserError(
            f"{len(cuts)} split points for {num_stages} stages: give {num_stages - 1} block "
            "indices, one where each stage after the first begins"
        )
    increasing = all(a < b for a, b in zip(cuts, cuts[1:], strict=False))
    if not increasing or any(not 0 < c < num_blocks for c in cuts):
        raise UserError(
            f"split points {cuts} must increase strictly within 1..{num_blocks - 1} "
            f"(the model has {num_blocks} blocks)"
        )
    bounds = [0, *cuts, num_blocks]
    return tuple((bounds[i], bounds[i + 1]) for i in range(num_stages))


def shared_parameters(
    model: BlockModel, ranges: tuple[tuple[int, int], ...]
) -> list[tuple[tuple[int, ...], list[nn.Parameter]]]:
    """Parameters held by more than one stage (tied weights), grouped by the stages holding
    them, in `model.parameters()` order: each stage keeps a copy and their gradients are
    summed over those stages, which is the tied parameter's gradient."""
    holders: dict[int, list[int]] = {}
    for s, (a, b) in enumerate(ranges):
        for p in model[a:b].parameters():
            holders.setdefault(id(p), [])
            if s not in holders[id(p)]:
                holders[id(p)].append(s)
    groups: dict[tuple[int, ...], list[nn.Parameter]] = {}
    for p in model.parameters():
        stages = tuple(holders.get(id(p), ()))
        if len(stages) > 1:
            groups.setdefault(stages, []).append(p)
    return list(groups.items())


def check_batchnorm(model: nn.Module, microbatches: int) -> None:
    """BatchNorm normalises each micro-batch with its own statistics and updates its running
    statistics once per micro-batch: unlike the unsplit batch, so it is refused unless M = 1."""
    if microbatches > 1 and any(isinstance(m, _BatchNorm) for m in model.modules()):
        raise UserError(
            "BatchNorm in a pipeline would normalise each micro-batch on its own statistics: "
            "use microbatches=1 (model parallel, exact) or GroupNorm/LayerNorm"
        )
