"""Where inside its block's backward step each parameter's gradient is ready.

A profile times whole blocks (a convolution with its norm, a transformer layer), but a block's
gradients do not all arrive at its end: autograd runs the block's layers back to front, and a
layer's gradients are ready when its own backward ends, so a norm after a convolution hands
over its gradients before the convolution's backward starts. The simulator splits each block's
backward at those points. A layer's point is the share of the block's parameter bytes held by
it and the layers after it: the backward of a weight-carrying layer (a convolution, a linear
layer) is taken as proportional to its parameters, which within one block are applied at the
same positions. Parameters of one layer (weight and bias) share its point.

On vgg16 at 400mbit this moves the first chunk's start from the end of the last convolution
block's backward (its norm's gradients waited for the convolution's) to its start, as traced
runs show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cadence.dp.plan import ParamInfo


@dataclass(frozen=True)
class ReadyPoints:
    """The points in each block's backward where gradients become ready."""

    shares: tuple[tuple[float, ...], ...]
    """Per block: increasing shares of its backward (0 < share <= 1) at which some layer's
    gradients are ready; the last is 1 (its end). Blocks without parameters: (1.0,)."""
    point: tuple[int, ...]
    """Per parameter (`ParamInfo.index`): the index in its block's `shares` of its point."""


def ready_points(
    params: Sequence[ParamInfo], blocks: Sequence[int], num_blocks: int
) -> ReadyPoints:
    """The points of `params`, each in block `blocks[p.index]`, layers taken back to front
    (`ParamInfo.layer` descending) with shares of the block's parameter bytes."""
    layer_bytes: list[dict[int, int]] = [{} for _ in range(num_blocks)]
    for p in params:
        per_layer = layer_bytes[blocks[p.index]]
        per_layer[p.layer] = per_layer.get(p.layer, 0) + p.nbytes
    shares: list[tuple[float, ...]] = []
    layer_point: list[dict[int, int]] = []
    for per_layer in layer_bytes:
        total = sum(per_layer.values())
        points: list[float] = []
        where: dict[int, int] = {}
        done = 0
        for layer in sorted(per_layer, reverse=True):
            done += per_layer[layer]
            share = done / total  # the last layer's is exactly 1: done == total
            if not points or share > points[-1]:
                points.append(share)
            where[layer] = len(points) - 1
        if not points:  # no parameters: the block's end is its one point
            points.append(1.0)
        shares.append(tuple(points))
        layer_point.append(where)
    point = [0] * len(params)
    for p in params:
        point[p.index] = layer_point[blocks[p.index]][p.layer]
    return ReadyPoints(tuple(shares), tuple(point))


@dataclass(frozen=True)
class Piece:
    """One task of a block's backward: a stretch of its input- or weight-gradient step."""

    step: str
    """"I" (input gradient) or "W" (weight gradient)."""
    seconds: float
    """Its compute seconds."""
    point: int | None
    """The ready point (index into the block's shares) it ends at; None: none."""


def split_backward(
    input_s: float, weight_s: float, shares: Sequence[float], joined: bool
) -> tuple[list[Piece], list[Piece]]:
    """(input-gradient pieces, weight-gradient pieces) of one block's backward, cut at
    `shares`. `joined`: the two steps run back to back (ordinary order), so the shares are of
    both together, as autograd runs one node per layer that yields both; else (backward
    reordering moves the weight gradients) of the weight-gradient step alone."""
    span = input_s + weight_s if joined else weight_s
    offset = 0.0 if joined else input_s  # where the shares' time line starts
    cuts = [offset + s * span for s in shares]
    cuts[-1] = input_s + weight_s  # exactly the end, whatever the float sums
    inputs: list[Piece] = []
    pos, j = 0.0, 0
    # The input step ends at the points inside it; the last point is always the weight step's.
    while joined and j < len(cuts) - 1 and cuts[j] <= input_s:
        inputs.append(Piece("I", max(0.0, cuts[j] - pos), j))
        pos, j = max(pos, cuts[j]), j + 1
    if pos < input_s or not inputs:
        inputs.append(Piece("I", input_s - pos, None))
        pos = input_s
    weights = []
    for k in range(j, len(cuts)):
        weights.append(Piece("W", max(0.0, cuts[k] - pos), k))
        pos = max(pos, cuts[k])
    return inputs, weights


def piece_name(step: str, block: int, point: int | None, last: bool) -> str:
    """Task name of a backward piece: "I3", "W3" (the block's weight step ends at its last
    point), or "I3:0" / "W3:1" for a piece that ends at an earlier point."""
    return f"{step}{block}" if point is None or last else f"{step}{block}:{point}"


def point_of(name: str, shares: Sequence[Sequence[float]]) -> tuple[int, int] | None:
    """(block, point) a backward piece named `name` (`piece_name`) ends at; None: none."""
    step, rest = name[0], name[1:]
    block, _, point = rest.partition(":")
    if point:
        return int(block), int(point)
    if step == "W":
        return int(block), len(shares[int(block)]) - 1
    return None


