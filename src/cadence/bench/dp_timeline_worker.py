"""One rank of `cadence bench dp-timeline`: `python -m cadence.bench.dp_timeline_worker
CONFIG.json EVENTS.json STRATEGY`, started with torchrun-style environment variables.

Trains the model with DDP or cadence-dp as `cadence train` would (same data, optimizer and
batch share), or with no synchronisation at all (`COMPUTE_ALONE`), records the iterations
around `record_step` and, on rank 0, writes the events with times relative to the start of
that iteration.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cadence.bench.dp_timeline import COMPUTE_ALONE, DPTimelineConfig
from cadence.comm import destroy, init_from_env
from cadence.config import TrainConfig
from cadence.dp.config import mb_to_bytes
from cadence.dp.layers import model_layout
from cadence.dp.trace import Recorder, trace_ddp, trace_layers
from cadence.launch.errors import exit_worker, worker_entry
from cadence.models import get_model_spec, load_dataset, loss_fn
from cadence.train.optim import build_optimizer
from cadence.train.sharding import batch_stream


def _wrap(
    strategy: str, model: nn.Module, optimizer: torch.optim.Optimizer, config: DPTimelineConfig,
    recorder: Recorder,
) -> tuple[nn.Module, Any]:  # fmt: skip
    if strategy in COMPUTE_ALONE or not dist.is_initialized():
        return model, optimizer
    if strategy == "ddp":
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=config.ddp_bucket_mb)
        trace_ddp(ddp, recorder)
        return ddp, optimizer
    from cadence.dp import DPConfig, data_parallel

    dp_config = DPConfig(
        threshold_bytes=mb_to_bytes(config.threshold_mb), reorder_k=config.reorder_k
    )
    model, scheduled = data_parallel(model, optimizer, dp_config)
    engine: Any = getattr(model, "_cadence_dp_engine")  # noqa: B009 - set by data_parallel
    engine.trace = recorder
    return model, scheduled


def peer_events_path(events_path: Path, rank: int) -> Path:
    """Where rank `rank` (> 0) writes the record that rank 0 writes to `events_path`."""
    return events_path.with_name(f"{events_path.stem}-rank{rank}{events_path.suffix}")


def run(config: DPTimelineConfig, strategy: str, events_path: Path) -> None:
    torch.set_num_threads(config.threads)
    ctx = init_from_env()
    try:
        torch.manual_seed(0)
        spec = get_model_spec(config.model)
        data = load_dataset(spec.datasets[0], spec, seed=0)
        plain = spec.build()
        optimizer = build_optimizer(plain.parameters(), TrainConfig(model=config.model))
        recorder = Recorder()
        layout = model_layout(plain)
        model, optimizer = _wrap(strategy, plain, optimizer, config, recorder)
        # After wrapping: cadence's own pre-hooks (waiting for updates) run before ours.
        trace_layers(layout.layers, layout.params, recorder)
        model.train()
        # As many steps as asked for, on into further epochs (a small dataset has few per epoch).
        batches = batch_stream(len(data.train_x), config.batch_size, ctx.rank, ctx.world_size)
        # Steps traced: the one before the pictured one (its communication and updates run on
        # into the pictured forward) to two after it (whole iterations to average over).
        first_traced, last_traced = config.record_step - 1, config.record_step + 2
        step_times = []
        for step, idx in zip(range(config.steps), batches, strict=False):
            recorder.active = first_traced <= step <= last_traced
            recorder.iteration = step + 1
            x, y = data.train_x[idx], data.train_y[idx]
            recorder.mark(f"start {step + 1}")
            optimizer.zero_grad(set_to_none=True)
            start = recorder.clock()
            out = model(x)
            recorder.span("compute", "forward-pass", "forward", start, recorder.clock())
            loss = loss_fn(out, y)
            called = recorder.clock()
            loss.backward()
            recorder.end_backward(called, recorder.clock())
            start = recorder.clock()
            optimizer.step()  # cadence's returns at once: its updates run per layer
            if strategy != "cadence":
                recorder.span("update", "step", "optimizer.step()", start, recorder.clock())
            step_times.append(recorder.clock() - recorder.marks[f"start {step + 1}"])
        recorder.mark(f"start {config.steps + 1}")
        if hasattr(optimizer, "flush"):
            optimizer.flush()
        time.sleep(0.05)  # the last completion callbacks run on gloo's threads
        recorder.active = False
        it = config.record_step + 1
        origin = recorder.marks[f"start {it}"]
        # Where each traced iteration (step + 1) and the one after the last began: the replay
        # averages over them, since one iteration's boundaries shift between ranks.
        recorded = range(first_traced + 1, last_traced + 3)
        data_out = {
            "strategy": strategy,
            "iteration": it,
            "iteration_s": recorder.marks[f"start {it + 1}"] - origin,
            "starts_s": {str(i): recorder.marks[f"start {i}"] - origin for i in recorded},
            "step_times_s": step_times,
            "events": recorder.to_json(origin),
        }
        engine = getattr(model, "_cadence_dp_engine", None)
        if engine is not None:  # the plan it ran (rebuilt after warm-up), for the replay
            data_out["plan"] = engine.plan.to_json()
            # How many iterations ran one chunk before the default plan was chosen: the first
            # chunked one after them starts on an idle link, so the replay leaves it out.
            if engine.one_chunk_probe is not None:
                data_out["one_chunk_probe"] = engine.one_chunk_probe
        # Every rank's record: a synchronous step waits for the slowest rank's compute.
        path = events_path if ctx.rank == 0 else peer_events_path(events_path, ctx.rank)
        path.write_text(json.dumps(data_out, indent=1) + "\n")
    finally:
        destroy()


def main(argv: list[str]) -> int:
    def body() -> None:
        config = DPTimelineConfig.from_json(json.loads(Path(argv[0]).read_text()))
        if config.master_port is not None:  # loopback runs: a free port instead of 29500
            os.environ["MASTER_PORT"] = str(config.master_port)
        run(config, argv[2], Path(argv[1]))

    return worker_entry(body)


if __name__ == "__main__":
    exit_worker(main(sys.argv[1:]))
