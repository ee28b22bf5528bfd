"""Each block's forward and backward time inside one whole training iteration.

Timed in calls of their own, a block's forward and each of its two gradients pay the host's
cost of starting the work (an autograd traversal, kernel launches) while the device waits. On
a fast GPU that cost is most of a block's time: the separate calls of vgg16's, resnet32's and
gpt_mini's blocks added up to 1.4-2.0x a measured iteration. Here one
iteration runs as training runs it, and marks at block boundaries split it: one after each
block's forward, and one from a gradient hook on each block's output, which fires when the
backward reaches that block. On CUDA the marks are events in the stream, so the host runs
ahead as it does in training. The marks' own host time still shows; the simulator scales
block times to the measured iteration (`cadence.sim.compute`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cadence.models import BlockModel, loss_fn
from cadence.profile.clock import Stopwatch, sync


def block_times_in_iteration(
    model: BlockModel, x: Tensor, y: Tensor, device: torch.device
) -> tuple[list[float], list[float]]:
    """(forward, backward) seconds of each block inside one forward + loss + backward.

    A block's backward runs from the moment the gradient of its output is ready to the moment
    the gradient of its input is (the next block down's start), the first block's to the end
    of the backward pass. A block whose output needs no gradient gets no backward time.
    """
    blocks = model.blocks()
    # One mark per block boundary, and the blocks called directly as `nn.Sequential` would
    # (module hooks take a slower call path): on a fast GPU the host's time for each mark is
    # time the device may wait.
    clock = Stopwatch(device, expected_marks=2 * len(blocks) + 2)
    grad_marks: dict[int, int] = {}  # block -> mark when its output's gradient was ready

    def watch_gradient(index: int) -> Any:
        def hook(grad: Tensor) -> None:
            grad_marks[index] = clock.mark()

        return hook

    model.zero_grad(set_to_none=True)
    sync(device)
    bounds = [clock.mark()]
    h = x
    for i, block in enumerate(blocks):
        h = block(h)
        bounds.append(clock.mark())
        if isinstance(h, Tensor) and h.requires_grad:
            h.register_hook(watch_gradient(i))
    loss_fn(h, y).backward()
    end = clock.mark()
    forward = [clock.seconds(bounds[i], bounds[i + 1]) for i in range(len(blocks))]
    backward = [0.0] * len(blocks)
    until = end  # the backward reaches the blocks last to first: block i ends where i - 1 starts
    for i in range(len(blocks)):
        if i in grad_marks:
            backward[i] = clock.seconds(grad_marks[i], until)
            until = grad_marks[i]
    model.zero_grad(set_to_none=True)
    return forward, backward
