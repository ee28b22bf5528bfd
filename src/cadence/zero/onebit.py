"""1-bit collectives with error feedback, built on cadence's counted collectives.

1-bit reduce-scatter: each rank encodes piece j of its vector (plus its sender error) and
sends it to rank j (all-to-all); rank j decodes and averages what it received. 1-bit
all-reduce adds the reducer's side: the average (plus the reducer error) is encoded again and
all-gathered, so every rank ends with the same decoded vector.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from cadence.comm import collectives
from cadence.zero.compress import decode, encode_with_feedback


def onebit_reduce_scatter(
    x: torch.Tensor, sender_error: torch.Tensor, world_size: int, group: dist.ProcessGroup | None
) -> torch.Tensor:
    """Mean over ranks of their decoded piece `rank` of `x` (1-D, p equal pieces of 8k)."""
    pieces = x.view(world_size, -1)
    errors = sender_error.view(world_size, -1)
    wires = [encode_with_feedback(pieces[j], errors[j]) for j in range(world_size)]
    if world_size == 1:
        received = wires
    else:
        received = [torch.empty_like(w) for w in wires]
        collectives.all_to_all(received, wires, group=group)
    return torch.stack([decode(w) for w in received]).mean(dim=0)


def onebit_all_reduce(
    x: torch.Tensor,
    sender_error: torch.Tensor,
    reducer_error: torch.Tensor,
    world_size: int,
    group: dist.ProcessGroup | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(decoded mean of `x` over ranks, the gathered wire bytes that encode it).

    `reducer_error` covers this rank's piece only: the error buffers are sharded like the
    optimizer state.
    """
    mine = onebit_reduce_scatter(x, sender_error, world_size, group)
    wire = encode_with_feedback(mine, reducer_error)
    gathered = gather_wires(wire, world_size, group)
    return decode_all(gathered, world_size), gathered


def gather_wires(
    wire: torch.Tensor, world_size: int, group: dist.ProcessGroup | None
) -> torch.Tensor:
    """All-gather one encoded piece per rank into (p, wire_bytes) uint8."""
    out = torch.empty(world_size, wire.numel(), dtype=torch.uint8)
    if world_size == 1:
        out[0].copy_(wire)
    else:
        collectives.all_gather_into_tensor(out, wire, group=group)
    return out


def decode_all(gathered: torch.Tensor, world_size: int) -> torch.Tensor:
    return torch.cat([decode(gathered[j]) for j in range(world_size)])
