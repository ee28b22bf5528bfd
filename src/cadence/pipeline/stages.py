"""Split a block model into S contiguous stages balanced on profiled compute.

The split is a pure function of per-block costs: the partition of the blocks into S contiguous,
non-empty runs that minimises the slowest stage's forward + backward time (exact, by dynamic
programming). `StagePlan` carries what the executor, the memory model and a planner need per
stage: block ranges, compute seconds, parameter bytes and per-sample activation/message bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from cadence.errors import UserError
from cadence.profile.record import Profile

if TYPE_CHECKING:  # the split is arithmetic on costs, which the simulator runs without torch
    from cadence.models.blocks import BlockModel

PIPELINE_BLOCK_TIMING = "auto"
"""How the pipeline's planners profile blocks (`cadence.profile.profile_model`): inside whole
iterations on CUDA, in calls of their own on the CPU: the pipeline planner and `cadence bench
pipeline` were validated on the CPU with blocks timed in calls of their own."""


def balance(costs: Sequence[float], num_stages: int) -> tuple[tuple[int, int], ...]:
    """Block ranges [start, end) of the contiguous split of `costs` into `num_stages` non-empty
    stages with the smallest maximum stage cost (ties: the earliest cut wins)."""
    n = len(costs)
    if num_stages < 1:
        raise UserError(f"--stages must be at least 1 (got {num_stages})")
    if num_stages > n:
        raise UserError(
            f"a model of {n} blocks cannot be split into {num_stages} stages: use --stages 1..{n}"
        )
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)

    @cache
    def best(start: int, stages: int) -> tuple[float, tuple[int, ...]]:
        # Cheapest bottleneck for blocks[start:] in `stages` stages, and the cut positions.
        if stages == 1:
            return prefix[n] - prefix[start], ()
        options = []
        for cut in range(start + 1, n - stages + 2):
            rest, cuts = best(cut, stages - 1)
            options.append((max(prefix[cut] - prefix[start], rest), (cut, *cuts)))
        return min(options, key=lambda o: o[0])

    cuts = (0, *best(0, num_stages)[1], n)
    return tuple((cuts[i], cuts[i + 1]) for i in range(num_stages))


def even_split(num_blocks: int, num_stages: int) -> tuple[tuple[int, int], ...]:
    """Equal block counts per stage (the first stages take one more when it does not divide)."""
    balance([1.0] * num_blocks, num_stages)  # same checks and errors as a balanced split
    base, extra = divmod(num_blocks, num_stages)
    sizes = [base + (1 if s < extra else 0) for s in range(num_stages)]
    starts = [sum(sizes[:s]) for s in range(num_stages)]
    return tuple((a, a + n) for a, n in zip(starts, sizes, strict=True))


@dataclass(frozen=True)
class StagePlan:
    """Where a model is cut and what each stage costs, from one profile."""

    model: str
    """Model name (from the profile)."""
    ranges: tuple[tuple[int, int], ...]
    """Block index range [start, end) of each stage."""
    block_names: tuple[tuple[str, ...], ...]
    """Names of each stage's blocks."""
    forward_s: tuple[float, ...]
    """Forward seconds of each stage at `profile_batch` samples."""
    backward_s: tuple[float, ...]
    """Backward (input-grad + weight-grad) seconds of each stage at `profile_batch` samples."""
    param_bytes: tuple[int, ...]
    """Parameter bytes owned by each stage."""
    activation_bytes_per_sample: tuple[float, ...]
    """Bytes each stage keeps for backward per sample in flight."""
    input_bytes_per_sample: tuple[float, ...]
    """Bytes of each stage's input per sample (what recomputation keeps; a received message)."""
    output_bytes_per_sample: tuple[float, ...]
    """Bytes of each stage's output per sample: the activation message to the next stage, and
    the size of the gradient message coming back."""
    profile_batch: int
    """Batch size the times were measured at (they scale with the micro-batch size)."""
    grad_transient_bytes: tuple[int, ...] = ()
    """Per stage, the largest block's parameter bytes: while a micro-batch's weight gradients
    are added into the ones accumulated so far, one block's new gradients exist besides them
    (empty: not counted)."""
    workspace_bytes: tuple[int, ...] = ()
    """Per stage, what a kernel allocates besides its output while one of the stage's blocks
    runs forward or backward: on CPU, oneDNN convolutions repack the weight on every call
    (measured: one weight-sized copy in each pass), so
    the largest block's parameter bytes; linear-only stages are over-counted by as much
    (empty: not counted)."""

    @property
    def num_stages(self) -> int:
        return len(self.ranges)

    def compute_s(self, stage: int) -> float:
        """Forward + backward seconds of `stage` at the profiled batch size."""
        return self.forward_s[stage] + self.backward_s[stage]

    def forward_time(self, stage: int, samples: int) -> float:
        """Forward seconds of `stage` on `samples` samples (linear in the batch, from the
        profile; profile at the micro-batch size for small batches)."""
        return self.forward_s[stage] * samples / self.profile_batch

    def backward_time(self, stage: int, samples: int) -> float:
        """Backward seconds of `stage` on `samples` samples (linear, like `forward_time`)."""
        return self.backward_s[stage] * samples / self.profile_batch

    def summary(self) -> str:
        """One line per stage: blocks, compute and parameter size."""
        return "\n".join(
            f"stage {s}: blocks {a}..{b - 1} ({', '.join(self.block_names[s])}), "
            f"{1000 * self.compute_s(s):.1f} ms, {self.param_bytes[s] / 1e6:.2f} MB params"
            for s, (a, b) in enumerate(self.ranges)
        )


def plan_stages(
    profile: Profile, num_stages: int, ranges: tuple[tuple[int, int], ...] | None = None
) -> StagePlan:
    """Balance `profile`'s blocks into `num_stages` stages (or use the given `ranges`)."""
    blocks = profile.blocks
    if ranges is None:
        ranges = balance([b.total_s for b in blocks], num_stages)
    batch = profile.batch_size
    input_elems = 1
    for d in profile.input_shape:
        input_elems *= d
    outputs = [4.0 * input_elems] + [b.output_bytes / batch for b in blocks]

    def per_stage(values: Sequence[float]) -> tuple[float, ...]:
        return tuple(sum(values[a:b]) for a, b in ranges)

    largest = tuple(max((b.param_bytes for b in blocks[a:z]), default=0) for a, z in ranges)
    return StagePlan(
        model=profile.model,
        ranges=ranges,
        block_names=tuple(tuple(b.name for b in blocks[a:z]) for a, z in ranges),
        forward_s=per_stage([b.forward_s for b in blocks]),
        backward_s=per_stage([b.backward_s for b in blocks]),
        param_bytes=tuple(int(v) for v in per_stage([b.param_bytes for b in blocks])),
        activation_bytes_per_sample=per_stage([b.activation_bytes / batch for b in blocks]),
        input_bytes_per_sample=tuple(outputs[a] for a, _ in ranges),
        output_bytes_per_sample=tuple(outputs[b] for _, b in ranges),
        profile_batch=batch,
        grad_transient_bytes=largest,
        workspace_bytes=largest,
    )


def stage_module(model: BlockModel, ranges: tuple[tuple[int, int], ...], stage: int) -> BlockModel:
    """Stage `stage` of `model`: a `BlockModel` slice sharing the model's parameters."""
    from cadence.models.blocks import BlockModel

    start, end = ranges[stage]
    piece = model[start:end]
    assert isinstance(piece, BlockModel)
    return piece
