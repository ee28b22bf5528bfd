"""Which tensors each streaming fragment holds: the model's trainable parameters in module
order, cut into K contiguous groups of about equal size; each floating-point buffer of the
state dict (BatchNorm statistics) rides with the last parameter before it. The cut
(`split_sizes`) is pure on sizes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from cadence.errors import UserError


def split_sizes(sizes: list[int], k: int) -> list[int]:
    """The fragment (0..k-1) of each tensor of `sizes`, in order: tensor j goes where the
    middle of its span falls among k equal shares of the total, so fragments are contiguous
    and in order. A fragment left empty is refused (too few tensors for k)."""
    total = sum(sizes)
    out, start = [], 0
    for size in sizes:
        middle = start + size / 2
        out.append(min(k - 1, int(k * middle / total)) if total else 0)
        start += size
    empty = sorted(set(range(k)) - set(out))
    if empty:
        raise UserError(
            f"{k} fragments cannot be cut from {len(sizes)} parameter tensors of these sizes "
            f"(fragment {empty[0]} would be empty): use fewer --fragments"
        )
    return out


@dataclass
class Fragment:
    """One fragment's tensors, in module order."""

    params: list[torch.Tensor]
    buffers: list[torch.Tensor]


def model_fragments(model: nn.Module, k: int) -> list[Fragment]:
    """`model`'s trainable parameters and floating-point buffers in `k` fragments. Frozen
    parameters never change, integer buffers (BatchNorm's step count) move alike on every
    rank, and non-persistent buffers are caches outside the state dict: none is synced."""
    entries: list[tuple[torch.Tensor, bool]] = []  # (tensor, is a parameter), module order
    seen: set[int] = set()
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                entries.append((p, True))
        transient: set[str] = getattr(module, "_non_persistent_buffers_set", set())
        for name, b in module.named_buffers(recurse=False):
            if b.is_floating_point() and name not in transient and id(b) not in seen:
                seen.add(id(b))
                entries.append((b, False))
    params = [t for t, is_param in entries if is_param]
    if not params:
        raise UserError("local SGD / DiLoCo needs a model with trainable parameters")
    where = split_sizes([p.numel() for p in params], k)
    fragments = [Fragment([], []) for _ in range(k)]
    index, current = 0, 0
    for tensor, is_param in entries:
        if is_param:
            current = where[index]
            index += 1
            fragments[current].params.append(tensor)
        else:
            fragments[current].buffers.append(tensor)
    return fragments
