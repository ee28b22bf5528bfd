"""Time collectives on the live process group and fit the alpha-beta model to them.

`calibrate()` runs on every rank of an initialised group. It times `all_reduce` (and, if asked,
other collectives, gloo's and cadence's own) over log-spaced sizes, takes per-size medians after
warm-up, keeps the slowest rank's median (a collective ends when its last rank does), measures
each call's processor time beside its wall time, and fits the model
(`cadence.comm.calibration`, where the saved form and the fits live, free of torch). Every
rank returns the same `Calibration`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
import torch.distributed as dist

from cadence.comm import collectives as cadence_collectives
from cadence.comm.calibrate_plan import DEFAULT_SIZES, MODEL_OF, calls_per_round, sizes_for
from cadence.comm.calibration import (
    FITTED,
    LATENCIES,
    OBJECTIVES,
    Calibration,
    CalibrationRow,
    calibrated_link,
    fit,
    fit_latency,
    predicted_s,
    with_collective_alphas,
    with_host_costs,
)
from cadence.errors import UserError

__all__ = [
    "FITTED",
    "LATENCIES",
    "OBJECTIVES",
    "Calibration",
    "CalibrationRow",
    "bucket_drain",
    "calibrate",
    "calibrated_link",
    "fit",
    "fit_latency",
    "measure",
    "measure_s",
    "predicted_s",
    "slowest",
    "with_collective_alphas",
    "with_host_costs",
]

# torch 2.13 deprecates all_gather_into_tensor for all_gather_single and warns on every call.
_gloo_all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)


def _op(collective: str, buf: torch.Tensor, world_size: int):  # noqa: ANN202 - returns a thunk
    if collective == "all_reduce":
        return lambda: dist.all_reduce(buf)
    if collective == "broadcast":
        return lambda: dist.broadcast(buf, src=0)
    if collective in ("all_gather", "ring_all_gather", "ring_reduce_scatter"):
        # The flat forms `cadence bench collectives` and ZeRO call; the list forms copy
        # differently. The input must not alias the output.
        mine = torch.zeros(buf.numel() // world_size)
        whole = buf[: mine.numel() * world_size]
        if collective == "all_gather":
            return lambda: _gloo_all_gather(whole, mine)
        if collective == "ring_all_gather":
            return lambda: cadence_collectives.all_gather_into_tensor(whole, mine)
        return lambda: cadence_collectives.reduce_scatter_tensor(mine, whole)
    if collective == "ring_all_reduce":
        return lambda: cadence_collectives.all_reduce(buf)
    raise ValueError(f"unknown collective {collective!r}; accepted: {', '.join(MODEL_OF)}")


def bucket_drain(drain_bytes: int) -> Callable[[], None]:
    """What to run before each timed block: an all-reduce of `drain_bytes` (see `calibrate`),
    or nothing at 0. Call it on every rank of the group."""
    if drain_bytes <= 0:
        return lambda: None
    drain = torch.zeros(max(dist.get_world_size(), drain_bytes // 4))
    return lambda: dist.all_reduce(drain)


def measure_s(
    collective: str, sizes: Sequence[int], repeats: int = 7, warmup: int = 2, drain_bytes: int = 0
) -> list[float]:
    """Median seconds per `collective` call at each size, the slowest rank's, on every rank.

    `drain_bytes` > 0: an untimed all-reduce of that many bytes before each timed block (see
    `calibrate`)."""
    return [wall for wall, _ in measure(collective, sizes, repeats, warmup, drain_bytes)]


def measure(
    collective: str, sizes: Sequence[int], repeats: int = 7, warmup: int = 2, drain_bytes: int = 0
) -> list[tuple[float, float]]:
    """(wall, processor) seconds per `collective` call at each size: the median of each, the
    slowest rank's, on every rank. The processor time is this process's, all its threads
    together (gloo's I/O threads, the caller's Python and copies, the kernel's socket work on
    their behalf): what a call takes from a host whose cores are all busy computing
    (`CalibrationRow.cpu_s`). `measure_s` says what the arguments mean."""
    world_size = dist.get_world_size()
    drain = bucket_drain(drain_bytes)
    # Sizes are interleaved round by round, so load from elsewhere on the machine lands on
    # every size alike instead of bending one part of the curve.
    runs = [_op(collective, torch.zeros(max(world_size, n // 4)), world_size) for n in sizes]
    bursts = [calls_per_round(n) for n in sizes]
    walls: list[list[float]] = [[] for _ in sizes]
    cpus: list[list[float]] = [[] for _ in sizes]
    for i in range(warmup + repeats):
        for run, burst, wall, cpu in zip(runs, bursts, walls, cpus, strict=True):
            drain()
            dist.barrier()
            for _ in range(burst):
                start, start_cpu = time.perf_counter(), time.process_time()
                run()
                if i >= warmup:
                    wall.append(time.perf_counter() - start)
                    cpu.append(time.process_time() - start_cpu)
    # The slowest rank's medians: the same table (hence the same fit) on every rank.
    agreed = slowest([statistics.median(s) for s in walls + cpus])
    return list(zip(agreed[: len(sizes)], agreed[len(sizes) :], strict=True))


def slowest(seconds: Sequence[float]) -> list[float]:
    """Each figure's maximum over the ranks, the same on every rank: a collective, or a
    synchronous training step, ends when its last rank does."""
    agreed = torch.tensor(list(seconds), dtype=torch.float64)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return [float(x) for x in agreed.tolist()]


def calibrate(
    sizes: Sequence[int] = DEFAULT_SIZES,
    repeats: int = 7,
    warmup: int = 2,
    collectives: Sequence[str] = (FITTED,),
    objective: str = "regimes",
    drain_bytes: int = 0,
    alpha_per_collective: bool = True,
) -> Calibration:
    """Time `collectives` at `sizes` on the current process group and fit alpha, beta.

    Call it on every rank (it issues collectives). `all_reduce` is always measured: the fit
    uses it. With `alpha_per_collective`, every other collective timed gets an alpha of its own
    (`fit_latency` on its latency-bound sizes, beta kept; `AlphaBeta.collective_alphas`), which
    the simulator then uses for that collective; a collective with no latency-bound size keeps
    all-reduce's. Without it, rows of other collectives show how far all-reduce's fit carries.
    cadence's own collectives ("ring_*" in `MODEL_OF`) are timed at the small sizes only
    (`calibrate_plan.sizes_for`) and their alphas go to `AlphaBeta.p2p_alphas`. Every call's
    processor time is measured with it (`measure`) and kept per collective and per byte sent
    (`with_host_costs`), for the simulator to charge to compute on hosts without a spare core.

    `drain_bytes`: on links shaped by a token bucket (the emulated cluster's tbf), run an
    untimed all-reduce of this many bytes (twice the bucket: every rank sends at least the
    bucket's worth) before each timed block, so the block starts with the bucket empty and
    is timed at the link's steady state, not on tokens saved up while earlier blocks were
    small. A real link keeps no such credit; 0 (the default) drains nothing.
    """
    if not dist.is_initialized():
        raise UserError("calibrate() needs an initialised process group; call init first")
    unknown = [c for c in collectives if c not in MODEL_OF]
    if unknown or repeats < 1 or len(sizes) < 2 or min(sizes) < 4 or objective not in OBJECTIVES:
        raise UserError(
            f"bad calibration request: collectives from {list(MODEL_OF)}, repeats >= 1, "
            f">= 2 sizes of >= 4 bytes, objective in {OBJECTIVES} "
            f"(got {list(collectives)}, {repeats}, {list(sizes)}, {objective!r})"
        )
    world_size = dist.get_world_size()
    order = [FITTED] + [c for c in collectives if c != FITTED]
    measured = {c: list(zip(sizes_for(c, sizes),
                            measure(c, sizes_for(c, sizes), repeats, warmup, drain_bytes),
                            strict=True))
                for c in order}  # fmt: skip
    timed = {c: [(n, wall) for n, (wall, _) in points] for c, points in measured.items()}
    model = fit(sizes, [t for _, t in timed[FITTED]], world_size, objective)
    if alpha_per_collective:
        model = with_collective_alphas(model, timed, world_size)
    busy = {c: [(n, cpu) for n, (_, cpu) in points] for c, points in measured.items()}
    model = replace(with_host_costs(model, busy, world_size), calibrated=True)
    rows = [CalibrationRow(c, n, wall, predicted_s(model, c, n, world_size), cpu)
            for c in order for n, (wall, cpu) in measured[c]]  # fmt: skip
    return Calibration(
        model=model,
        world_size=world_size,
        backend=str(dist.get_backend()),
        repeats=repeats,
        objective=objective,
        rows=tuple(rows),
        torch_version=torch.__version__,
    )
