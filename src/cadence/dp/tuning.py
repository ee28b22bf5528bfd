"""Connecting an `Autotuner` to a running `SyncEngine`: candidate lists, link probe, saving."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from cadence.comm import ops as comm
from cadence.comm.ops import wire_device
from cadence.dp.autotune import (
    Autotuner,
    Candidate,
    SimulatedRanking,
    TuneResult,
    k_trials,
    load_result,
    threshold_trials,
)
from cadence.dp.config import DPConfig
from cadence.dp.runtime import SyncEngine
from cadence.profile.clock import sync

PROBE_BYTES = 4 * 2**20


def probe_link_bytes_per_s(world_size: int, repeats: int = 3) -> float:
    """Link rate seen by a ring all-reduce of `PROBE_BYTES` on the default group (main thread,
    before training starts, so nothing else is on the wire). Rank 0's figure, broadcast."""
    if world_size < 2:
        return 1e12  # a world of one sends nothing
    device = wire_device()
    buffer = torch.zeros(PROBE_BYTES // 4, device=device)
    comm.all_reduce(buffer)  # connections set up outside the timing
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        comm.all_reduce(buffer)
        sync(device)  # NCCL returns once the work is queued
        times.append(time.perf_counter() - start)
    wire_bytes = 2 * (world_size - 1) / world_size * PROBE_BYTES
    rate = torch.tensor([wire_bytes / statistics.median(times)], dtype=torch.float64, device=device)
    comm.broadcast(rate, src=0)
    return float(rate.item())


def attach_tuner(
    engine: SyncEngine, config: DPConfig, profile: Any | None, world_size: int
) -> None:
    """Load a saved choice, or set up the tuning the config asks for (or nothing)."""
    if config.autotune_file is not None:
        saved = load_result(config.autotune_file)
        if saved is not None:
            engine.reconfigure(saved.threshold_bytes, saved.reorder_k)
            engine.tune_result = dataclasses.replace(saved, method=f"loaded ({saved.method})")
            return
    if config.autotune == "off":
        return
    broadcast = world_size > 1
    initial = Candidate(engine.threshold_bytes, config.reorder_k)
    num_layers = len(engine.layout.layers)
    thresholds = [
        Candidate(t, config.reorder_k)
        for t in threshold_trials(
            engine.threshold_bytes, config.autotune_trials, config.autotune_growth
        )
    ]

    def every_k(best: Candidate) -> list[Candidate]:
        return [Candidate(best.threshold_bytes, k) for k in k_trials(num_layers)]

    first: list[Candidate] | Callable[[], list[Candidate]] = thresholds
    then = every_k
    rate = probe_link_bytes_per_s(world_size)
    total_bytes = sum(info.nbytes for info in engine.layout.infos)
    wire_s = 2 * (world_size - 1) / world_size * total_bytes / rate
    if config.autotune == "guided":
        ranking = SimulatedRanking(
            profile,
            engine.layout.infos,
            world_size,
            rate,
            broadcast,
            arrival_order=engine.measured_arrival_order,
        )

        def ranked_thresholds() -> list[Candidate]:  # after the warm-up: its gradient order
            return ranking.fastest(thresholds, config.guided_thresholds)

        first = ranked_thresholds

        def then(best: Candidate) -> list[Candidate]:
            return ranking.fastest(every_k(best), config.guided_reorder_points)

    def save(result: TuneResult) -> None:
        engine.tune_result = result
        if config.autotune_file is not None and (not broadcast or dist.get_rank() == 0):
            result.save(config.autotune_file)

    engine.tuner = Autotuner(
        config.autotune,
        initial,
        first,
        then,
        apply=lambda c: engine.reconfigure(c.threshold_bytes, c.reorder_k),
        waited_s=lambda: engine.waited_s,
        broadcast=broadcast,
        iterations_per_trial=config.autotune_iterations,
        on_done=save,
        hidden_fraction=config.autotune_hidden_fraction,
        cheapest=Candidate(max(1, total_bytes), None),
        wire_s=wire_s,
        cheap_wire_fraction=config.autotune_cheap_wire_fraction,
        confirm_rounds=config.autotune_confirm_rounds,
    )
