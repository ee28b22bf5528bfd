"""One rank of `cadence bench dp-paired`: `python -m cadence.bench._dp_paired_worker
CONFIG.json RESULT.json`, started with torchrun-style environment variables.

Every variant lives in this one process, each on its own copy of the model (same initial
weights): compute alone (no synchronisation), DDP with each bucket size, and cadence-dp. They
take turns in blocks of steps, round after round, so a variant and its peer are timed seconds
apart instead of minutes: this machine's speed drifts by 15-35% over minutes, and a drift that
lands on one whole run of a variant moves its median more than the scheduling does.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cadence.bench.dp_paired import (
    ALIGNED,
    COMPUTE,
    TWINS,
    PairedCase,
    cadence_settings,
    variant_names,
)
from cadence.comm import destroy, init_from_env
from cadence.comm.calibrate import measure_s, slowest
from cadence.config import TrainConfig
from cadence.launch.errors import exit_worker, worker_entry
from cadence.models import get_model_spec, load_dataset, loss_fn
from cadence.train.optim import build_optimizer
from cadence.train.sharding import batch_stream


@dataclass
class _Variant:
    name: str
    model: nn.Module
    optimizer: Any
    flush: Callable[[], None]
    engine: Any = None
    """cadence-dp's engine (None for the other variants)."""

    def tuning(self) -> bool:
        """Whether cadence-dp's warm-up autotuning is still trying settings, on any rank."""
        if self.engine is None:  # the same variants on every rank: no need to ask the others
            return False
        busy = self.engine.tuner is not None and not self.engine.tuner.done
        flag = torch.tensor([1.0 if busy else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def _build(name: str, base: nn.Module, config: PairedCase, profile: Any) -> _Variant:
    model = copy.deepcopy(base)
    optimizer = build_optimizer(model.parameters(), TrainConfig(model=config.model))
    if name in (COMPUTE, ALIGNED):  # each rank trains alone: what every schedule computes
        return _Variant(name, model, optimizer, lambda: None)
    copied = {twin: original for original, twin in TWINS.items()}.get(name)
    if copied is not None:  # an A/A twin: built exactly as what it copies
        return dataclasses.replace(_build(copied, base, config, profile), name=name)
    if name.startswith("ddp"):
        bucket_mb = 25.0 if name == "ddp" else float(name[len("ddp-") : -len("mb")])
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
        return _Variant(name, ddp, optimizer, lambda: None)
    from cadence.dp import DPConfig, data_parallel
    from cadence.dp.config import mb_to_bytes

    settings = cadence_settings(config)[name]  # beyond the case's own settings
    credit_mb = settings.get("credit_mb")
    dp_config = DPConfig(
        threshold_bytes=mb_to_bytes(settings.get("threshold_mb", config.threshold_mb)),
        credit_bytes=mb_to_bytes(credit_mb),
        reorder_k=int(settings.get("reorder_k", config.reorder_k or 0)) or None,
        warmup_iterations=int(settings.get("warmup_iterations", 1)),
        autotune=config.autotune,
    )
    hooked, scheduled = data_parallel(model, optimizer, dp_config, profile)
    engine = getattr(hooked, "_cadence_dp_engine")  # noqa: B009 - set by data_parallel
    return _Variant(name, hooked, scheduled, scheduled.flush, engine)


def _block(
    variant: _Variant,
    steps: int,
    next_batch: Callable[[], tuple[Any, Any]],
    barrier: Callable[[], object],
) -> tuple[list[float], list[float]]:
    """Each step's seconds over one block, in steady state: the steps from the block's second
    to the one before its last, each from its start to the next one's, so neither the first
    step (nothing of the previous iteration to overlap with) nor the final flush is counted.
    Beside them, the same steps' `optimizer.step()` calls (what a simulation prices as the
    update of compute alone)."""
    barrier()  # every rank starts the block together
    starts = []
    optimizer_steps = []
    for _ in range(steps):
        starts.append(time.perf_counter())
        x, y = next_batch()
        variant.optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(variant.model(x), y)
        loss.backward()
        before_step = time.perf_counter()
        variant.optimizer.step()
        optimizer_steps.append(time.perf_counter() - before_step)
    variant.flush()
    return [b - a for a, b in zip(starts[1:-1], starts[2:], strict=True)], optimizer_steps[1:-1]


def _aligned_block(
    variant: _Variant,
    steps: int,
    next_batch: Callable[[], tuple[Any, Any]],
    barrier: Callable[[], object],
) -> tuple[list[float], list[float]]:
    """Compute alone with every rank starting each step's forward pass, and each optimizer
    step, together (a barrier before each, not timed), as a synchronous strategy's ranks
    start them after the collective that ends their backward pass: ranks in step contend for
    the same memory at once. Each step's forward + backward seconds and optimizer-step
    seconds, the first and last step of the block left out."""
    passes: list[float] = []
    optimizer_steps: list[float] = []
    for _ in range(steps):
        x, y = next_batch()
        variant.optimizer.zero_grad(set_to_none=True)
        barrier()
        start = time.perf_counter()
        loss_fn(variant.model(x), y).backward()
        passes.append(time.perf_counter() - start)
        barrier()
        start = time.perf_counter()
        variant.optimizer.step()
        optimizer_steps.append(time.perf_counter() - start)
    return passes[1:-1], optimizer_steps[1:-1]


def _wire_while_computing(
    variant: Any, gradient_bytes: int, next_batch: Callable[[], tuple[Any, Any]]
) -> float:
    """Seconds of one all-reduce of all gradients as a single message while every rank
    computes forward + backward passes beside it (no optimizer step) until it ends: set
    against the wire measured alone, how much of the link's rate transfers keep while their
    worker computes (its processor work shares the cores the compute keeps busy). An untimed
    all-reduce goes first: after the idle barrier an emulated link's token bucket would pass
    its first bytes at once, faster than the cap (mlp's 0.3 MB beat the line rate so)."""
    buf = torch.zeros(max(dist.get_world_size(), gradient_bytes // 4))
    took: list[float] = []

    def transfer() -> None:
        dist.all_reduce(buf)  # drains the link's token bucket, beside the compute too
        start = time.perf_counter()
        dist.all_reduce(buf)
        took.append(time.perf_counter() - start)

    dist.barrier()  # every rank starts transfer and compute together
    thread = threading.Thread(target=transfer, daemon=True)
    thread.start()
    while thread.is_alive():
        x, y = next_batch()
        variant.optimizer.zero_grad(set_to_none=True)
        loss_fn(variant.model(x), y).backward()
    thread.join()
    (seconds,) = slowest(took)
    return seconds


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def subnormals_flushed() -> bool:
    """Whether this thread's float math turns a subnormal float32 into zero (as after
    `torch.set_flush_denormal(True)` on x86): one is made from a normal one and scaled."""
    tiny = torch.tensor([torch.finfo(torch.float32).tiny])
    return (tiny / 4).item() == 0.0


def run(config: PairedCase, result: Path, barrier: Callable[[], object] = dist.barrier) -> None:
    """Every round's turns; `barrier` starts each turn on every process at once (the process
    group's, unless the processes are not one group)."""
    torch.set_num_threads(config.threads)
    torch.set_flush_denormal(not config.keep_subnormals)
    ctx = init_from_env()
    try:
        torch.manual_seed(0)
        spec = get_model_spec(config.model)
        data = load_dataset("synthetic", spec, seed=0)
        base = spec.build()
        gradient_bytes = sum(p.numel() * p.element_size() for p in base.parameters())
        names = variant_names(config)
        profile = None
        if config.autotune == "guided":  # as `cadence train` does: this rank's batch share
            from cadence.profile import profile_zoo_model

            share = max(1, config.batch_size // ctx.world_size)
            profile = profile_zoo_model(config.model, batch_size=share, optimizer_steps=False)
        variants = {name: _build(name, base, config, profile) for name in names}
        for variant in variants.values():
            variant.model.train()
        # Every variant reads the same stream of this rank's batch shares.
        stream = batch_stream(len(data.train_x), config.batch_size, ctx.rank, ctx.world_size)

        def next_batch() -> tuple[Any, Any]:
            idx = next(stream)
            return data.train_x[idx], data.train_y[idx]

        rounds: dict[str, list[float]] = {name: [] for name in names}
        # Compute alone as a synchronous step would see it: each step's slowest rank.
        lockstep: list[float] = []
        # And its optimizer step: each round's slowest rank's mean.
        compute_steps: list[float] = []
        # With `aligned_compute`: the aligned turns' optimizer steps (each round's slowest
        # rank's mean); their whole steps are the variant's own rounds.
        aligned_steps: list[float] = []
        wire: list[float] = []
        wire_computing: list[float] = []
        # Round 0 warms every variant up (cadence-dp builds its plan from its first iteration)
        # and is not kept; its times set the timed blocks' length.
        steps = config.block_steps
        for round_index in range(config.rounds + 1):
            order = names if round_index % 2 == 0 else list(reversed(names))
            if config.measure_wire:  # one all-reduce of all gradients as a single message
                (seconds,) = measure_s("all_reduce", [gradient_bytes], repeats=1, warmup=0)
                if round_index > 0:
                    wire.append(seconds)
                    wire_computing.append(
                        _wire_while_computing(variants[COMPUTE], gradient_bytes, next_batch)
                    )
            for name in order:
                if name == ALIGNED:
                    passes, optimizer_steps = _aligned_block(
                        variants[name], steps, next_batch, barrier
                    )
                    n = len(passes)
                    slow = slowest([*passes, *optimizer_steps])
                    rounds[name].append(_mean(slow[:n]) + _mean(slow[n:]))
                    if round_index > 0:
                        aligned_steps.append(_mean(slow[n:]))
                    continue
                durations, optimizer_steps = _block(variants[name], steps, next_batch, barrier)
                # Autotuning finishes in the warm-up round: its trials are never timed.
                while round_index == 0 and variants[name].tuning():
                    durations, optimizer_steps = _block(variants[name], steps, next_batch, barrier)
                (seconds,) = slowest([_mean(durations)])
                rounds[name].append(seconds)
                if name == COMPUTE and round_index > 0:
                    # The ranks started the block together, so step i ran at about the same
                    # time on each: their maximum is what a step that waits for all costs.
                    *per_step, step_s = slowest([*durations, _mean(optimizer_steps)])
                    lockstep.append(_mean(per_step))
                    compute_steps.append(step_s)
            if round_index == 0:
                fastest = min(times.pop() for times in rounds.values())
                # Agreed on every rank: the times are the slowest rank's.
                steps = max(config.block_steps, 2 + math.ceil(config.block_seconds / fastest))
            if ctx.rank == 0:
                print(f"round {round_index}/{config.rounds} done", flush=True)
        if ctx.rank == 0:
            tuned = {
                name: dataclasses.asdict(v.engine.tune_result)
                for name, v in variants.items()
                if v.engine is not None and v.engine.tune_result is not None
            }
            out = {
                "gradient_bytes": gradient_bytes,
                "tuned": tuned,
                "credit_bytes": {
                    name: v.engine.plan.credit_bytes
                    for name, v in variants.items()
                    if v.engine is not None
                },
                # The plan each cadence-dp variant ended with, and what chose it.
                "plans": {
                    name: {
                        "chunks": len(v.engine.plan.chunks),
                        "threshold_bytes": v.engine.threshold_bytes,
                        "one_chunk_probe": v.engine.one_chunk_probe,
                    }
                    for name, v in variants.items()
                    if v.engine is not None
                },
                "block_steps": steps,
                "rounds_s": rounds,
                "lockstep_compute_rounds_s": lockstep,
                "compute_step_rounds_s": compute_steps,
                **(
                    {
                        "aligned_compute_rounds_s": rounds[ALIGNED],
                        "aligned_compute_step_rounds_s": aligned_steps,
                    }
                    if ALIGNED in rounds
                    else {}
                ),
                "wire_runs_s": wire,
                "wire_computing_runs_s": wire_computing,
                "subnormals_flushed": subnormals_flushed(),
            }
            result.write_text(json.dumps(out, indent=1) + "\n")
        dist.barrier()  # leave together: no rank tears down while rank 0 still writes
    finally:
        destroy()


def main(argv: list[str]) -> int:
    def body() -> None:
        config = PairedCase.from_json(json.loads(Path(argv[0]).read_text()))
        if config.master_port is not None:  # loopback runs: a free port instead of 29500
            os.environ["MASTER_PORT"] = str(config.master_port)
        run(config, Path(argv[1]))

    return worker_entry(body)


if __name__ == "__main__":
    # Without the interpreter's teardown: with several DDP models and cadence-dp engines still
    # holding process groups, it aborted now and then inside gloo after the result was written.
    exit_worker(main(sys.argv[1:]))
