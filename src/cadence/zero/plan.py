"""The ZeRO plan, as data: what `cadence.zero` does in one training step.

Built by `build_zero_plan` from a model description (its units, each with its trainable
parameters' names and shapes, in forward order; `describe_model` reads one off a torch model)
and a `ZeroConfig`. The executor (`ZeroEngine`, `Stage3Engine`) takes its shard layout, units
and per-unit choices from it; the simulator (`cadence.sim.zero_graph`) builds its task graph
from the same object. Pure: no process group, no tensors.

Per unit (a bucket of `layout`, see `cadence.zero.layout`):
- the collectives that reduce its gradients, during warm-up (or without onebit) and in
  1-bit Adam's compressed phase, in the order the communication thread issues them;
- the all-gather of its parameters (none where every rank updates every piece);
- whether the next forward gathers it after the step in forward order (`forward_gather`), and
  at stage 3 whether it stays gathered from forward to backward (`held`).

Per step, once every unit is reduced (`used_flags`): without onebit, an all-reduce of one
flag per parameter, which tells every rank which parameters got a gradient on any rank.

Collective sizes (`ZeroOp.nbytes`) are the vector a collective moves, of the unit's real
elements, as the cost model (`AlphaBeta.terms`) takes it; the executor pads each bucket to a
multiple of `SCALE_CHUNK` x p elements (`Bucket.padded`), and `layout.comm_bytes_per_step`
gives the exact bytes each rank sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cadence.zero.config import ZeroConfig
from cadence.zero.layout import (
    FP32,
    Bucket,
    ZeroLayout,
    bucket_params,
    build_layout,
    front_buckets,
)

if TYPE_CHECKING:  # the plan is arithmetic on unit descriptions; only describe_model takes a
    from torch import nn  # module, whose caller has torch loaded

ONEBIT_RATIO = 32
"""fp32 momentum -> one sign bit per element."""

ParamShape = tuple[str, tuple[int, ...]]
"""A trainable parameter: qualified name and shape."""
UnitDescription = tuple[str, Sequence[ParamShape]]
"""A model unit: its name and the parameters it holds (possibly none), in forward order."""


@dataclass(frozen=True)
class ZeroOp:
    """One collective the engine issues for a unit."""

    name: str
    """Short tag for traces: rs, ar, a2a, ag1, ag-sent (gradients), g (parameters), flags."""
    collective: str
    """allreduce, reduce_scatter, all_to_all or allgather (the cost model's names)."""
    purpose: str
    """"gradients" (gradients or 1-bit momentum), "parameters" or "flags" (which parameters
    got a gradient; not counted in `step_bytes`)."""
    wire: str
    """What travels: fp32, fp16, bf16 or onebit (sign bits plus scales)."""
    nbytes: int
    """Bytes of the vector the collective moves (see the module docstring)."""
    lane: str = "comm"
    """The communication thread it runs on: "comm", or "gather" (1-bit Adam's gather lane)."""


@dataclass(frozen=True)
class ZeroUnit:
    """One bucket and what the engine does with it."""

    bucket: Bucket
    """Its parameters' place in the flat buffer and each rank's piece."""
    module: int
    """Position of its unit in the model description (units without parameters included)."""
    warmup_reduce: tuple[ZeroOp, ...]
    """Gradient collectives without compression, or in 1-bit Adam's warm-up (fp32)."""
    reduce: tuple[ZeroOp, ...]
    """Gradient collectives in the steady state (1-bit Adam: after warm-up)."""
    gather: ZeroOp | None
    """The parameter all-gather; None where every rank updates every piece (replicated)."""
    replicated: bool
    """1-bit Adam after warm-up with `replicated_update`: every rank updates every piece."""
    forward_gather: bool
    """With `overlap_gather` (stages 1-2): a front block, whose gather goes after the step in
    forward order when it was updated early."""
    held: bool
    """Stage 3: stays gathered from its forward to its backward (the last unit, and the
    model's own unit, where tied weights live)."""

    @property
    def numel(self) -> int:
        return self.bucket.numel

    @property
    def nbytes(self) -> int:
        """fp32 bytes of its real parameters."""
        return self.bucket.numel * FP32


@dataclass(frozen=True)
class ZeroPlan:
    """Everything `cadence.zero` decides before the first step, identical on every rank."""

    config: ZeroConfig
    """The job's choices."""
    layout: ZeroLayout
    """Buckets in forward order and each rank's piece."""
    units: tuple[ZeroUnit, ...]
    """One per bucket, in forward order."""

    @property
    def stage(self) -> int:
        return self.config.stage

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def early_update(self) -> bool:
        """1-bit Adam at stages 1-2: after warm-up a unit is updated and gathered right behind
        its reduction, during the backward."""
        return self.config.updates_early

    @property
    def reduces_in_backward(self) -> bool:
        """Gradients are reduced from the backward's hooks (stages 2-3; stage 1 with onebit
        after warm-up), not all at the step."""
        return self.stage >= 2 or self.config.compression == "onebit"

    @property
    def gather_lane(self) -> bool:
        """Parameter gathers run on a thread and process group of their own."""
        return any(u.gather is not None and u.gather.lane == "gather" for u in self.units)

    @property
    def prefetch(self) -> bool:
        """Stage 3: the next unit's gather is queued as a unit starts to compute."""
        return self.stage == 3 and self.config.prefetch

    @property
    def used_flags(self) -> ZeroOp | None:
        """The step's all-reduce of one fp32 flag per parameter (max over ranks: which got a
        gradient anywhere, so a parameter unused on every rank is left alone, as DDP and
        torch's optimizers leave it), issued once every unit is reduced; None with onebit,
        whose update steps every piece, or on one rank."""
        if self.config.compression == "onebit" or self.world_size < 2:
            return None
        flags = sum(len(u.bucket.slots) for u in self.units)
        return ZeroOp("flags", "allreduce", "flags", "fp32", FP32 * flags) if flags else None

    def by_module(self) -> dict[int, ZeroUnit]:
        """Units by their position in the model description."""
        return {u.module: u for u in self.units}

    def step_bytes(self, compressed: bool = True) -> dict[str, int]:
        """Bytes of the vectors one step's collectives move, by purpose (`ZeroOp.nbytes`; a
        stage-3 unit not `held` is gathered twice: before its forward and its backward)."""
        grads = params = 0
        for u in self.units:
            grads += sum(op.nbytes for op in (u.reduce if compressed else u.warmup_reduce))
            if u.gather is not None:
                times = 2 if self.stage == 3 and not u.held else 1
                params += times * u.gather.nbytes
        return {"gradients": grads, "parameters": params, "total": grads + params}


def _plain_reduce(stage: int, wire: str, nbytes: int) -> tuple[ZeroOp, ...]:
    size = nbytes // 2 if wire == "fp16" else nbytes
    if stage == 1:
        return (ZeroOp("ar", "allreduce", "gradients", wire, size),)
    return (ZeroOp("rs", "reduce_scatter", "gradients", wire, size),)


def onebit_packed_bytes(nbytes: int, world_size: int) -> int:
    """Bytes of a unit's 1-bit momentum: a sign bit per element plus a scale per rank."""
    return max(1, nbytes // ONEBIT_RATIO) + 4 * world_size


def _onebit_reduce(stage: int, replicated: bool, nbytes: int, p: int) -> tuple[ZeroOp, ...]:
    """1-bit Adam after warm-up (`cadence.zero.onebit`): stages 2-3 reduce-scatter the
    momentum (an all-to-all; a replicated stage 2 all-gathers everything sent), stage 1 then
    all-gathers the re-compressed result."""
    packed = onebit_packed_bytes(nbytes, p)
    if replicated and stage == 2:
        ops = [ZeroOp("ag-sent", "allgather", "gradients", "onebit", packed * p)]
    else:
        ops = [ZeroOp("a2a", "all_to_all", "gradients", "onebit", packed)]
    if stage == 1:
        ops.append(ZeroOp("ag1", "allgather", "gradients", "onebit", packed))
    return tuple(ops)


def build_zero_plan(
    units: Sequence[UnitDescription], config: ZeroConfig, world_size: int
) -> ZeroPlan:
    """The plan for a model whose units (forward order; the model itself first) hold these
    parameters, sharded over `world_size` ranks as `config` says."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1 (got {world_size})")
    numels = [sum(_numel(shape) for _, shape in params) for _, params in units]
    modules = [i for i, n in enumerate(numels) if n > 0]
    layout = build_layout([(units[i][0], list(units[i][1])) for i in modules], world_size)
    share = config.replicated_share if config.replicated_update else 0.0
    replicated = front_buckets(layout, share)
    overlap = config.overlap_gather and config.stage < 3
    forward = front_buckets(layout, config.forward_gather_share if overlap else 0.0)
    gather_wire = config.gather_dtype
    gather_size = 2 if gather_wire == "bf16" else FP32
    lane = (
        "gather"
        if config.updates_early and config.gather_lane and not config.replicates_everything
        else "comm"
    )
    last = len(layout.buckets) - 1
    out: list[ZeroUnit] = []
    for b, module in zip(layout.buckets, modules, strict=True):
        nbytes = b.numel * FP32
        warm = _plain_reduce(config.stage, "fp16" if config.compression == "fp16" else "fp32",
                             nbytes)  # fmt: skip
        rep = replicated[b.index]
        steady = (
            _onebit_reduce(config.stage, rep, nbytes, world_size)
            if config.compression == "onebit"
            else warm
        )
        gather = (
            None
            if rep
            else ZeroOp("g", "allgather", "parameters", gather_wire, b.numel * gather_size, lane)
        )
        held = config.stage == 3 and (b.index == last or module == 0)
        out.append(ZeroUnit(b, module, warm, steady, gather, rep, forward[b.index], held))
    return ZeroPlan(config, layout, tuple(out))


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def describe_model(model: nn.Module) -> list[UnitDescription]:
    """The description `build_zero_plan` takes, read off `model`: its units in pre-order (the
    model itself first, named "model"), each with the trainable parameters it holds (a tied
    weight in the deepest unit holding all its users; see `layout.bucket_params`)."""
    return [
        (name, [(n, tuple(p.shape)) for n, p in params]) for name, _, params in bucket_params(model)
    ]


def block_units(
    param_bytes: Sequence[int], names: Sequence[str] | None = None
) -> list[UnitDescription]:
    """A description of a chain of blocks known only by their fp32 parameter bytes (a
    profile's blocks): one parameter per block; the model itself, holding none, first."""
    labels = list(names) if names is not None else [str(i) for i in range(len(param_bytes))]
    blocks: list[UnitDescription] = [
        (label, [(f"{label}.params", (nbytes // FP32,))] if nbytes else [])
        for label, nbytes in zip(labels, param_bytes, strict=True)
    ]
    return [("model", []), *blocks]
