"""The shard plan, as data: which parameters form each bucket and which slice each rank owns.

A bucket is one unit of the model (`model_units`: the model itself and every item of a
module container at any depth; a zoo `BlockModel`'s blocks), holding the parameters no deeper
unit holds (a tied weight: the deepest unit holding all its users). Its trainable parameters
are flattened in registration order and padded to a multiple of p x `SCALE_CHUNK` elements,
so every rank owns an equal, contiguous, byte-balanced piece whose sign bits pack into whole
bytes and whose 1-bit scales cover whole chunks.
Stages 2 and 3 reduce a bucket as soon as its backward is done, and stage 3 gathers
parameters one bucket at a time. Pure: no process group in here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cadence.errors import UserError
from cadence.zero.wire import SCALE_CHUNK, wire_bytes

if TYPE_CHECKING:  # the bucket sizes and memory formulas below are arithmetic the simulator
    from torch import nn  # reads without torch; only the model walks take modules

FP32 = 4


@dataclass(frozen=True)
class Slot:
    """One parameter's place inside its bucket's flat buffer."""

    name: str
    """Qualified parameter name in the model."""
    shape: tuple[int, ...]
    """The parameter's shape."""
    offset: int
    """First element inside the bucket's flat buffer."""
    numel: int
    """Number of elements."""


@dataclass(frozen=True)
class Bucket:
    """One block's parameters, flattened and split into `world_size` equal pieces."""

    index: int
    """Position in forward order."""
    name: str
    """Block name (for reports)."""
    slots: tuple[Slot, ...]
    """The parameters, in order."""
    numel: int
    """Elements of real parameters."""
    padded: int
    """`numel` rounded up to a multiple of SCALE_CHUNK * world_size."""
    world_size: int
    """Number of pieces."""

    @property
    def piece(self) -> int:
        """Elements each rank owns (a multiple of SCALE_CHUNK)."""
        return self.padded // self.world_size

    def piece_range(self, rank: int) -> tuple[int, int]:
        return rank * self.piece, (rank + 1) * self.piece


@dataclass(frozen=True)
class ZeroLayout:
    """Every bucket of the model, in forward order."""

    buckets: tuple[Bucket, ...]
    """Buckets in forward (block) order."""
    world_size: int
    """Ranks sharing the state."""

    @property
    def numel(self) -> int:
        return sum(b.numel for b in self.buckets)

    @property
    def padded(self) -> int:
        return sum(b.padded for b in self.buckets)

    def fingerprint(self) -> list[tuple[str, int]]:
        """What a checkpoint must match: bucket names and sizes."""
        return [(b.name, b.numel) for b in self.buckets]


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def containers() -> tuple[type[nn.Module], ...]:
    """Modules whose items are ZeRO units: repeated layers live in them (transformers' `h`,
    `layer`, `layers`, torchvision-style stages), and they call (or their owner calls) each
    item."""
    from torch import nn

    return (nn.ModuleList, nn.Sequential, nn.ModuleDict)


def model_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The units ZeRO buckets and (in stage 3) gathers, in pre-order (forward order as far as
    the module tree tells it): the model itself, then every item of a container module
    (`containers()`) at any depth. A zoo `BlockModel` is the model plus its blocks (not deeper),
    so buckets stay its blocks, as the simulator assumes."""
    units: list[tuple[str, nn.Module]] = [("", model)]
    seen = {id(model)}
    kinds = containers()

    def walk(prefix: str, module: nn.Module, deeper: bool) -> None:
        for name, child in module.named_children():
            path = prefix + name
            if isinstance(module, kinds) and id(child) not in seen:
                seen.add(id(child))
                units.append((path, child))
            if deeper:
                walk(path + ".", child, deeper)

    walk("", model, deeper=not callable(getattr(model, "blocks", None)))
    return units


def _owner(path: str, unit_paths: list[str]) -> str:
    """The deepest unit whose subtree holds the module at `path`."""
    best = ""
    for u in unit_paths:
        if (path == u or path.startswith(u + ".")) and len(u) > len(best):
            best = u
    return best


def _common_unit(paths: set[str], unit_paths: list[str]) -> str:
    """The deepest unit holding every module path in `paths` (their lowest common unit)."""
    split = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return _owner(".".join(common), unit_paths)


def bucket_params(model: nn.Module) -> list[tuple[str, nn.Module, list[tuple[str, nn.Parameter]]]]:
    """(unit name, unit, its trainable parameters) for every unit of `model_units`, in pre-order.

    A parameter belongs to the deepest unit that holds every module registering it: a weight
    tied between two units (GPT-2's embedding and head) goes to their common ancestor (the model
    itself at worst), whose parameters stay gathered while any of its descendants computes.
    The model itself is named "model" (a unit without parameters gets an empty list).
    """
    units = model_units(model)
    unit_paths = [path for path, _ in units]
    users: dict[int, set[str]] = {}
    for mod_path, module in model.named_modules(remove_duplicate=False):
        for p in module.parameters(recurse=False):
            if p is None or not p.requires_grad:
                continue
            users.setdefault(id(p), set()).add(mod_path)
    home = {pid: _common_unit(paths, unit_paths) for pid, paths in users.items()}
    by_unit: dict[str, list[tuple[str, nn.Parameter]]] = {path: [] for path in unit_paths}
    for name, p in model.named_parameters():  # registration order, each parameter once
        if id(p) in home:
            by_unit[home[id(p)]].append((name, p))
    return [(path or "model", unit, by_unit[path]) for path, unit in units]


def build_layout(
    blocks: list[tuple[str, list[tuple[str, tuple[int, ...]]]]], world_size: int
) -> ZeroLayout:
    """Lay out (block name, [(param name, shape)]) lists; blocks without parameters are skipped."""
    buckets: list[Bucket] = []
    for block_name, params in blocks:
        slots: list[Slot] = []
        offset = 0
        for name, shape in params:
            numel = 1
            for d in shape:
                numel *= d
            slots.append(Slot(name, tuple(shape), offset, numel))
            offset += numel
        if offset == 0:
            continue
        padded = round_up(offset, SCALE_CHUNK * world_size)
        buckets.append(Bucket(len(buckets), block_name, tuple(slots), offset, padded, world_size))
    if not buckets:
        raise UserError("cadence.zero found no trainable parameters in the model")
    return ZeroLayout(tuple(buckets), world_size)


def comm_bytes_per_step(
    layout: ZeroLayout,
    stage: int,
    compression: str,
    compressed_phase: bool,
    gather_bytes: int = 4,
    replicated_share: float = 0.0,
) -> dict[str, int]:
    """Exact payload bytes each rank sends in one training step, by purpose.

    Stage 1 all-reduces gradients (ring: 2(p-1) pieces); stages 2 and 3 reduce-scatter them
    ((p-1) pieces). With onebit after warm-up the momentum travels as sign bits plus one fp32
    scale per chunk: stage 1 all-reduces it (an all-to-all, (p-1) pieces, and an all-gather of
    the re-compressed result, (p-1) pieces), stages 2 and 3 only reduce-scatter it (the
    all-to-all). Parameters are all-gathered once per step in
    stages 1 and 2; stage 3 gathers every bucket before its forward and again before its
    backward, except the last bucket, which stays gathered from forward to backward.
    Buckets updated on every rank (`ZeroConfig.replicated_update`, the front blocks within
    `replicated_share` of the parameters; onebit after warm-up, stages 1-2): no parameter
    gather; stage 2 all-gathers every rank's p sent pieces instead of the all-to-all
    ((p-1) x p pieces).
    """
    p = layout.world_size
    grads = params = 0
    replicable = compression == "onebit" and compressed_phase and stage < 3
    for b, front in zip(layout.buckets, front_buckets(layout, replicated_share), strict=True):
        replicated = front and replicable
        if replicated and stage == 2:
            grads += p * (p - 1) * wire_bytes(b.piece)
        elif compression == "onebit" and compressed_phase:
            grads += (2 if stage == 1 else 1) * (p - 1) * wire_bytes(b.piece)
        else:
            elem = 2 if compression == "fp16" else FP32
            grads += (2 if stage == 1 else 1) * (p - 1) * b.piece * elem
        gathers = 1 if stage < 3 else (1 if b.index == len(layout.buckets) - 1 else 2)
        params += 0 if replicated else gathers * (p - 1) * b.piece * gather_bytes
    if p == 1:
        grads = params = 0
    return {"gradients": grads, "parameters": params, "total": grads + params}


def front_blocks(sizes: Sequence[int], share: float) -> list[bool]:
    """For each block (sizes in forward order), whether it is one of the front blocks that
    together hold at most `share` of the total size."""
    total = sum(sizes)
    out: list[bool] = []
    held = 0
    for size in sizes:
        held += size
        out.append(held <= share * total and (not out or out[-1]))
    return out


def front_buckets(layout: ZeroLayout, share: float) -> list[bool]:
    """`front_blocks` of the layout's buckets, by padded elements."""
    return front_blocks([b.padded for b in layout.buckets], share)


def state_bytes(layout: ZeroLayout, stage: int, optimizer: str) -> dict[str, int]:
    """ZeRO's per-rank memory formula for params, grads and optimizer state (fp32)."""
    p, n = layout.world_size, layout.padded
    slots = {"sgd": 1, "adam": 2, "adamw": 2}[optimizer]
    return {
        "parameters": FP32 * (n // p if stage == 3 else n),
        "gradients": FP32 * (n if stage == 1 else n // p),
        "optimizer_state": FP32 * slots * n // p,
    }
