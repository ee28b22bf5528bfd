"""1-bit collectives with error feedback, built on cadence's counted collectives.

1-bit reduce-scatter: each rank encodes piece j of its vector (plus its sender error) and
sends it to rank j (all-to-all); rank j decodes and averages what it received. 1-bit
all-reduce adds the reducer's side: the average (plus the reducer error) is encoded again and
all-gathered, so every rank ends with the same encoded vector.

`momentum_all_reduce` is stage 1's exchange: every rank forms its local momentum from the
all-reduced one, which it keeps encoded. Stages 2 and 3 use `momentum_reduce_scatter`, a 1-bit
reduce-scatter only: every rank forms its local momentum from what it itself sent last step
(kept encoded, the same size), whose mean over the ranks is the owners' momentum, so nothing
needs gathering back and the owner keeps no reducer error; the parameters are all-gathered in
full precision instead. With `ZeroConfig.replicated_update`, stage 2 uses
`momentum_all_gather_sent` instead: every rank gets every rank's sent pieces, so it can form
every owner's mean itself and no parameters need gathering. (Sending only the new part,
(1 - beta1) x the gradient, needs no encoded copy at all, but signs of a gradient lose far
more than signs of a momentum: on gpt_mini that lagged Adam by 10% in test loss.)

Both touch the momentum as few times as they can: the error buffers hold the running sums in
place (no temporaries the size of the bucket), received pieces are decoded straight into the
sum, and the all-reduce's gathered result is not decoded for its own sake: the owner already
holds its piece in fp32 (what it encoded) and the other pieces are decoded, fused into the
next step's sum (a replicated update also decodes them once more, to step their pieces).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from cadence.comm import collectives
from cadence.zero.compress import decode_add_, encode_feedback_, wire_bytes


def momentum_all_reduce(
    grad: torch.Tensor,
    last_wire: torch.Tensor,
    momentum: torch.Tensor,
    sender_error: torch.Tensor,
    reducer_error: torch.Tensor,
    beta1: float,
    rank: int,
    group: dist.ProcessGroup | None,
) -> torch.Tensor:
    """One 1-bit Adam momentum step of a bucket over the ranks; returns the new gathered wire.

    The local momentum is beta1 * (last all-reduced momentum) + (1 - beta1) * `grad`, where the
    last one is `last_wire` (p, wire bytes) decoded, except this rank's piece, `momentum` (its
    fp32 decoding, kept by the owner). `sender_error` (the whole bucket) and `reducer_error`
    (this rank's piece) are updated in place; `momentum` receives the new all-reduced piece.
    """
    sent = encode_local_momentum(grad, last_wire, momentum, sender_error, beta1, rank)
    wire = reduce_received(exchange_pieces(sent, group), reducer_error, momentum)
    return gather_wires(wire, sent.shape[0], group)


def momentum_reduce_scatter(
    grad: torch.Tensor,
    last_sent: torch.Tensor,
    momentum: torch.Tensor,
    sender_error: torch.Tensor,
    beta1: float,
    group: dist.ProcessGroup | None,
) -> torch.Tensor:
    """One 1-bit Adam momentum step of a bucket, reduced onto its owners (stages 2 and 3);
    returns what this rank sent, the next step's `last_sent`.

    Rank i's local momentum is beta1 x `last_sent` decoded (the (p, wire bytes) it sent last
    step) + (1 - beta1) x `grad`; it sends piece j of that plus its `sender_error` (updated in
    place) to rank j, which sets `momentum` (its fp32 piece) to the mean of what arrived. The
    mean of the ranks' last sent pieces is the owner's last momentum, so this is the momentum
    recursion over the mean gradient, plus the change in the mean sender error.
    """
    sent = encode_sent(grad, last_sent, sender_error, beta1)
    mean_of_received(momentum, exchange_pieces(sent, group))
    return sent


def momentum_all_gather_sent(
    grad: torch.Tensor,
    last_sent: torch.Tensor,
    momentum: torch.Tensor,
    sender_error: torch.Tensor,
    beta1: float,
    rank: int,
    group: dist.ProcessGroup | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`momentum_reduce_scatter` for a replicated update: every rank gets every rank's sent
    pieces (all-gathered, (p sources, p pieces, wire bytes)), so it can form every owner's
    momentum itself; returns (sent, everything every rank sent)."""
    sent = encode_sent(grad, last_sent, sender_error, beta1)
    p = sent.shape[0]
    everyone = gather_wires(sent.view(-1), p, group).view(p, p, -1)
    mean_of_received(momentum, everyone[:, rank])
    return sent, everyone


def encode_sent(
    grad: torch.Tensor, last_sent: torch.Tensor, sender_error: torch.Tensor, beta1: float
) -> torch.Tensor:
    """Stages 2-3 sender side: (p, wire bytes), row j piece j of beta1 x `last_sent` decoded +
    (1 - beta1) x `grad`, plus the sender error, which keeps what the encoding lost."""
    p = last_sent.shape[0]
    errors = sender_error.add_(grad, alpha=1 - beta1).view(p, -1)
    sent = torch.empty_like(last_sent)
    scratch = torch.empty_like(errors[0])
    for j in range(p):  # error + local momentum -> wire j, the error keeps what it lost
        decode_add_(errors[j], last_sent[j], alpha=beta1)
        encode_feedback_(errors[j], sent[j], scratch)
    return sent


def mean_of_received(out: torch.Tensor, received: torch.Tensor) -> torch.Tensor:
    """`out` = the mean of the decoded rows of `received` (p, wire bytes), summed in row order
    (every rank that forms it gets the same bits)."""
    out.zero_()
    for j in range(received.shape[0]):
        decode_add_(out, received[j], alpha=1 / received.shape[0])
    return out


def exchange_pieces(sent: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """All-to-all of encoded pieces: row j of `sent` goes to rank j; row i of the result came
    from rank i (a world of one keeps its own)."""
    if sent.shape[0] == 1:
        return sent
    received = torch.empty_like(sent)
    collectives.all_to_all(list(received), list(sent), group=group)
    return received


def encode_local_momentum(
    grad: torch.Tensor,
    last_wire: torch.Tensor,
    momentum: torch.Tensor,
    sender_error: torch.Tensor,
    beta1: float,
    rank: int,
) -> torch.Tensor:
    """Sender side: (p, wire bytes), row j the local momentum's piece j plus its error."""
    p = last_wire.shape[0]
    errors = sender_error.view(p, -1)
    piece = errors.shape[1]
    sender_error.add_(grad, alpha=1 - beta1)
    for j in range(p):
        if j == rank:
            errors[j].add_(momentum, alpha=beta1)
        else:
            decode_add_(errors[j], last_wire[j], alpha=beta1)
    sent = torch.empty(p, wire_bytes(piece), dtype=torch.uint8, device=sender_error.device)
    scratch = torch.empty_like(errors[0])
    for j in range(p):  # error + local momentum -> wire j, the error keeps what it lost
        encode_feedback_(errors[j], sent[j], scratch)
    return sent


def reduce_received(
    received: torch.Tensor, reducer_error: torch.Tensor, momentum: torch.Tensor
) -> torch.Tensor:
    """Reducer side: mean of the p received wires plus the error, re-encoded (returned);
    `momentum` receives what the encoding says, the error what it lost."""
    p = received.shape[0]
    for j in range(p):
        decode_add_(reducer_error, received[j], alpha=1 / p)
    wire = torch.empty(received.shape[1], dtype=torch.uint8, device=received.device)
    encode_feedback_(reducer_error, wire, momentum)
    return wire


def gather_wires(
    wire: torch.Tensor, world_size: int, group: dist.ProcessGroup | None
) -> torch.Tensor:
    """All-gather one encoded piece per rank into (p, wire_bytes) uint8."""
    out = torch.empty(world_size, wire.numel(), dtype=torch.uint8, device=wire.device)
    if world_size == 1:
        out[0].copy_(wire)
    else:
        collectives.all_gather_into_tensor(out, wire, group=group)
    return out
