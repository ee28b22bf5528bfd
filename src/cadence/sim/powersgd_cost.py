"""What PowerSGD costs beyond its bytes: the arithmetic of the factors and the extra
all-reduce rounds, for the simulator's price of a step (`cadence.sim.methods`).

Per matrix and step one rank adds its error to the gradient, forms P = M Q, orthonormalises
the reduced P, forms Q = Mᵀ P, and after Q's all-reduce rebuilds P Qᵀ and the new error
(`cadence.dp.compress.PowerSGDCodec`; torch's `powerSGD_hook` does the same). That work
grows with the number and shape of the matrices, not with the bytes, so it is timed here on
the model's own shapes rather than fitted. Rounds: P's all-reduce must finish before Q can be
formed, so each bucket or chunk pays its collective's latency once more (twice for torch's
hook, which all-reduces the uncompressed tensors first, then P, then Q).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cadence.comm.cost import AlphaBeta

TORCH_HOOK_ROUNDS = 3
"""Sequential all-reduces per bucket of torch's `powerSGD_hook`: uncompressed tensors, P, Q."""
CADENCE_ROUNDS = 2
"""Sequential all-reduces per chunk of cadence-dp's codec: uncompressed elements with P, Q."""


def compressed_matrices(
    shapes: Sequence[Sequence[int]], rank: int, min_rate: float = 0.0
) -> tuple[tuple[int, int], ...]:
    """The (rows, columns) of each parameter PowerSGD compresses: at least two dimensions, two
    rows and two columns, and (`min_rate` > 0, torch's hook) factors `min_rate` times smaller
    than the matrix."""
    out = []
    for shape in shapes:
        if len(shape) < 2 or shape[0] < 2:
            continue
        n, m = shape[0], math.prod(shape[1:])
        if m < 2:
            continue
        if min_rate > 0 and min(n, m, rank) * (n + m) * min_rate >= n * m:
            continue
        out.append((n, m))
    return tuple(out)


def extra_round_seconds(
    link: AlphaBeta, world_size: int, wire_bytes: float, rounds: int, collectives: int
) -> float:
    """Latency of the rounds beyond the first: `collectives` buckets or chunks, each sending
    its share of `wire_bytes` in `rounds` sequential ring all-reduces of equal size. Each
    round's 2 (n - 1) messages cost the link's all-reduce alpha at that size (measured by size
    with a calibration); the bytes themselves are priced with the first round."""
    if rounds <= 1 or collectives < 1 or world_size < 2:
        return 0.0
    size = wire_bytes / (rounds * collectives)
    per_round = 2 * (world_size - 1) * link.alpha_for("allreduce", size)
    return (rounds - 1) * collectives * per_round


@functools.cache  # `cadence plan` prices every candidate of a model: time once per process
def factor_seconds(
    matrices: tuple[tuple[int, int], ...], rank: int, threads: int | None = None, repeats: int = 5
) -> float:
    """Seconds one rank spends per step on the factors of `matrices` at `rank`, timed on this
    machine at `threads` intra-op threads (None: as it is set), as a worker's profile records
    them: the least of `repeats` runs after an untimed one, since a busy machine only ever
    adds time."""
    import torch

    if not matrices:
        return 0.0
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        return _time_factors(matrices, rank, repeats)
    finally:
        torch.set_num_threads(before)


def _time_factors(matrices: tuple[tuple[int, int], ...], rank: int, repeats: int) -> float:
    import time

    import torch

    from cadence.dp.compress import orthonormalise

    gen = torch.Generator().manual_seed(0)
    work = [
        (torch.randn(n, m, generator=gen), torch.zeros(n, m), torch.randn(m, min(rank, n, m)))
        for n, m in matrices
    ]

    def step() -> None:
        for grad, error, q in work:
            c = grad + error
            p = orthonormalise(c @ q)
            q_new = c.t() @ p
            approx = p @ q_new.t()
            error.copy_(c - approx)

    samples = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        step()
        if i:
            samples.append(time.perf_counter() - start)
    return min(samples)
