"""`Profile`: what one profiling run measured, per block and for the whole iteration."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.errors import UserError
from cadence.profile.facts import ModelFacts

FORMAT = "cadence-profile"
VERSION = 1
PEAK_KINDS = ("cuda_max_allocated", "cpu_accounted")
BLOCK_TIMINGS = ("separate", "in-iteration")
DEFAULT_BLOCK_TIMING = "in-iteration"
"""How `cadence profile` and `profile_model` time blocks unless told ("auto": in-iteration on
CUDA, separate on the CPU, as the pipeline planners profile)."""
STEP_TIMINGS = ("alone", "in-loop")


@dataclass(frozen=True)
class BlockProfile:
    """Costs of one block of a `BlockModel` (times are medians over the timed iterations)."""

    name: str
    """Block name, as `BlockModel.block_names()` gives it."""
    forward_s: float
    """Seconds for the block's forward."""
    input_grad_s: float
    """Seconds to compute the gradient w.r.t. the block's input alone; 0 for the first block
    (nothing upstream needs it)."""
    weight_grad_s: float
    """Seconds to compute the gradients w.r.t. the block's parameters alone; 0 without params.
    Work shared by both gradients (e.g. through a ReLU) is timed in each of them."""
    param_bytes: int
    """Bytes of parameters first owned by this block (a tied parameter counts once, in the
    first block that uses it), so the blocks sum to the model's parameter bytes."""
    activation_bytes: int
    """Bytes of tensors autograd saves for backward during this block's forward (parameters
    excluded, de-duplicated by storage; includes the block's input if it is saved)."""
    output_bytes: int
    """Bytes of the block's output tensor."""
    peak_bytes: int
    """Memory in use when this block's forward ends, with the kind of `Profile.peak_memory_kind`:
    CUDA allocator peak since the iteration began, or on CPU the accounted sum of all params,
    their grads, the activations saved so far (de-duplicated across blocks) and this output."""

    @property
    def backward_s(self) -> float:
        """Input-gradient plus weight-gradient seconds."""
        return self.input_grad_s + self.weight_grad_s

    @property
    def total_s(self) -> float:
        """Forward plus backward seconds."""
        return self.forward_s + self.backward_s


@dataclass(frozen=True)
class Profile:
    """A model profiled at one batch size on one device."""

    model: str
    """Model name (the zoo name, or what the caller passed for a custom model)."""
    batch_size: int
    """Samples per batch."""
    input_shape: tuple[int, ...]
    """Per-sample input shape."""
    blocks: tuple[BlockProfile, ...]
    """One entry per block, in forward order."""
    iteration_s: float
    """Median seconds of a whole-model forward + loss + backward (the real thing, not the sum);
    on CUDA timed as the training loop times its steps, on the host's clock up to a
    synchronise, after a second of warm-up (`cadence.profile.in_loop`)."""
    loss_s: float
    """Median seconds of the loss and its gradient w.r.t. the model output."""
    iterations: int
    """Timed iterations behind each median."""
    warmup: int
    """Untimed iterations run first."""
    device: str
    """Where it ran, e.g. "cpu" or "cuda:0"."""
    threads: int
    """torch.get_num_threads() during the run (intra-op CPU threads)."""
    torch_version: str
    """torch.__version__ of the run."""
    peak_memory_bytes: int
    """Peak memory of an iteration: on CUDA the allocator peak over forward + backward; on CPU
    the accounted peak (params + grads + saved activations alive at the end of forward)."""
    peak_memory_kind: str
    """"cuda_max_allocated" or "cpu_accounted": how the peak figures were obtained."""
    forward_pass_s: float | None = None
    """Median seconds of the whole-model forward within `iteration_s` (None in profiles made
    before it was recorded). The per-block gradient timings count work shared by a block's
    two gradients twice and the forward timings do not, so the simulator scales forward and
    gradient times separately to this and to the rest of the iteration."""
    optimizer_step_s: dict[str, float] | None = None
    """Seconds of one step of each optimizer (sgd, adam, adamw) over the whole model, timed
    where the profile was made (see `optimizer_step_timing`); None in profiles made before it
    was recorded, for which the simulator times the step on its own CPU."""
    optimizer_step_timing: str = "alone"
    """How `optimizer_step_s` was timed: "alone" (steps of their own on an idle device,
    `cadence.profile.optimizer_step`) or "in-loop" (on CUDA: what the step adds to whole
    training steps, `cadence.profile.in_loop`)."""
    input_s: float | None = None
    """Median seconds of one batch's way from host memory to the device as `cadence train`
    takes it every step (a gather by sample numbers, then a copy; `cadence.profile.in_loop`);
    None in profiles made before it was recorded (the simulator then charges nothing)."""
    block_timing: str = "separate"
    """How the block times were taken: "separate" (each block's forward and each of its
    gradients timed in calls of their own) or "in-iteration" (on CUDA: marks at block
    boundaries inside whole iterations, each block's backward split between its two gradients
    as the separate calls measured; see `cadence.profile.in_iteration`)."""
    codec_s_per_element: dict[str, float] | None = None
    """Seconds per fp32 element of 1-bit Adam's codec on the profile's device ("encode": with
    error feedback, "decode": into a running sum; `cadence.zero.codec_cost`), which the
    simulator's ZeRO adapter charges; None in profiles made before it was recorded (the
    simulator then times it on its own CPU)."""
    ps_serving_s: dict[str, float] | None = None
    """Processor seconds a parameter server spends serving BSP steps, per message it takes or
    sends ("message") and per slice byte per worker ("byte"), on the machine the profile was
    made on (`cadence.ps.serving_cost`): the simulator's parameter-server adapter charges each
    slice's serving to the processor of its server's host. None in profiles made without it:
    the held-out benchmark then measures it where it predicts, `cadence simulate` and `cadence
    plan` charge the optimizer's arithmetic only."""
    model_facts: ModelFacts | None = None
    """The zoo model's parameter layout, buffers and gradient arrival order, which the
    simulator reads instead of building the model (`cadence.profile.facts`); None for a model
    outside the zoo and in profiles made before it was recorded (the simulator then builds
    the zoo model)."""
    neighbours: int = 0
    """Processes that trained the same model on the same host while it was timed
    (`cadence.profile.neighbours`): a training run's workers per host minus one, so the
    times include the contention for the host's cores that training sees."""
    host_cores: int | None = None
    """Cores the profiled process could run on (its affinity) on the host it was taken on:
    with `threads` and `neighbours`, whether training's workers leave a core to spare for
    communication (`cadence.sim.host_cpu`); None in profiles made before it was recorded."""
    pace_factor: float = 1.0
    """What the times were multiplied by to put them at the pace of training's steps: with
    neighbours, the slowest process's iteration when all start together, over this
    process's own iteration as timed beside free-running neighbours
    (`cadence.profile.neighbours`); 1 for a profile taken alone."""

    @property
    def param_bytes(self) -> int:
        """Bytes of all parameters (sum over blocks)."""
        return sum(b.param_bytes for b in self.blocks)

    @property
    def block_sum_s(self) -> float:
        """Sum of the per-block forward, input-grad and weight-grad medians."""
        return sum(b.total_s for b in self.blocks)

    @property
    def block_sum_ratio(self) -> float:
        """(block sum + loss) / measured iteration: 1 when the per-block split adds up."""
        return (self.block_sum_s + self.loss_s) / self.iteration_s

    def to_dict(self) -> dict[str, Any]:
        """The saved form as a dict (format tag and version first)."""
        return {"format": FORMAT, "version": VERSION, **asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Profile:
        """Parse `to_json` output; raises ValueError/KeyError/TypeError on anything else."""
        data: dict[str, Any] = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        if data.get("version") != VERSION:
            raise ValueError(f"{FORMAT} version {data.get('version')}, expected {VERSION}")
        fields = {k: v for k, v in data.items() if k not in ("format", "version")}
        fields["input_shape"] = tuple(int(d) for d in fields["input_shape"])
        fields["blocks"] = tuple(BlockProfile(**b) for b in fields["blocks"])
        if fields.get("model_facts") is not None:
            fields["model_facts"] = ModelFacts.from_dict(fields["model_facts"])
        profile = cls(**fields)
        if profile.peak_memory_kind not in PEAK_KINDS:
            raise ValueError(f"peak_memory_kind {profile.peak_memory_kind!r} not in {PEAK_KINDS}")
        if profile.optimizer_step_timing not in STEP_TIMINGS:
            raise ValueError(
                f"optimizer_step_timing {profile.optimizer_step_timing!r} not in {STEP_TIMINGS}"
            )
        if profile.block_timing not in BLOCK_TIMINGS:
            raise ValueError(f"block_timing {profile.block_timing!r} not in {BLOCK_TIMINGS}")
        codec = profile.codec_s_per_element
        if codec is not None and sorted(codec) != ["decode", "encode"]:
            raise ValueError(f"codec_s_per_element needs encode and decode, got {sorted(codec)}")
        serving = profile.ps_serving_s
        if serving is not None and sorted(serving) != ["byte", "message"]:
            raise ValueError(f"ps_serving_s needs message and byte, got {sorted(serving)}")
        return profile

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path, expected_model: str | None = None) -> Profile:
        """Read a saved profile; a bad file, or one of a model other than `expected_model`,
        is a one-line UserError."""
        try:
            profile = cls.from_json(Path(path).read_text())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            reason = " ".join(str(exc).split())  # one line, whatever the parser said
            raise UserError(f"cannot read profile {path}: {reason}") from None
        if expected_model is not None and profile.model != expected_model:
            raise UserError(
                f"profile {path} is of model {profile.model!r}, expected {expected_model!r}"
            )
        return profile


def scaled_profile(profile: Profile, factor: float) -> Profile:
    """`profile` with its block, loss and whole-iteration times multiplied by `factor`
    (sizes and optimizer steps unchanged)."""
    blocks = tuple(
        dataclasses.replace(
            b,
            forward_s=b.forward_s * factor,
            input_grad_s=b.input_grad_s * factor,
            weight_grad_s=b.weight_grad_s * factor,
        )
        for b in profile.blocks
    )
    forward_pass_s = None if profile.forward_pass_s is None else profile.forward_pass_s * factor
    return dataclasses.replace(
        profile,
        blocks=blocks,
        iteration_s=profile.iteration_s * factor,
        loss_s=profile.loss_s * factor,
        forward_pass_s=forward_pass_s,
    )
