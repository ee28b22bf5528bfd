"""One rank of results/forward_beside_check.py (2026-11-29): in one process, compute alone
(free-running, as dp-paired's compute turns), compute alone with every rank starting each step
together (a barrier before it, not timed), the same with its optimizer step started together too,
DDP, and DDP without its buffer broadcast take turns
in blocks, round after round; each step's forward and backward seconds are kept.

`python results/forward_beside_worker.py MODEL ROUNDS BLOCK_STEPS OUT.json`, started with
torchrun-style environment variables (run by forward_beside_check.py).
"""

from __future__ import annotations

import copy
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from cadence.comm import destroy, init_from_env
from cadence.config import TrainConfig
from cadence.models import get_model_spec, load_dataset, loss_fn
from cadence.train.optim import build_optimizer
from cadence.train.sharding import batch_stream

VARIANTS = ("free", "synced", "aligned", "ddp", "ddp-nobuf")
BATCH = 64


def _faults() -> int:
    """Minor page faults of this process so far (fresh pages the kernel zeroed for it)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    model_name, rounds, block_steps, out = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
    )
    torch.set_num_threads(1)
    ctx = init_from_env()
    try:
        if os.environ.get("FORWARD_BESIDE_KEEP_HEAP") == "1":  # as cadence-dp does
            from cadence.dp.heap import keep_heap

            keep_heap()
        torch.manual_seed(0)
        spec = get_model_spec(model_name)
        data = load_dataset(spec.datasets[0], spec, seed=0)
        base = spec.build()
        models: dict[str, nn.Module] = {}
        optims = {}
        for name in VARIANTS:
            m = copy.deepcopy(base)
            optims[name] = build_optimizer(m.parameters(), TrainConfig(model=model_name))
            if name == "ddp":
                m = nn.parallel.DistributedDataParallel(m)
            elif name == "ddp-nobuf":
                m = nn.parallel.DistributedDataParallel(m, broadcast_buffers=False)
            m.train()
            models[name] = m
        stream = batch_stream(len(data.train_x), BATCH, ctx.rank, ctx.world_size)
        times: dict[str, list[list[list[float]]]] = {n: [] for n in VARIANTS}
        for r in range(rounds + 1):
            order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
            for name in order:
                dist.barrier()
                steps = []
                for _ in range(block_steps):
                    idx = next(stream)
                    x, y = data.train_x[idx], data.train_y[idx]
                    if name in ("synced", "aligned"):
                        dist.barrier()
                    optims[name].zero_grad(set_to_none=True)
                    ta, pa = time.thread_time(), time.process_time()
                    fa, a = _faults(), time.perf_counter()
                    o = models[name](x)
                    fb, b = _faults(), time.perf_counter()
                    tb, pb = time.thread_time(), time.process_time()
                    loss = loss_fn(o, y)
                    loss.backward()
                    if name == "aligned":  # the step starts together too, as after DDP's sync
                        dist.barrier()
                    fc, c = _faults(), time.perf_counter()
                    optims[name].step()
                    fd, d = _faults(), time.perf_counter()
                    # seconds of forward, backward, step; start; minor page faults of each
                    # then the forward's processor seconds: this thread's, the whole process's
                    steps.append(
                        [b - a, c - b, d - c, a, fb - fa, fc - fb, fd - fc, tb - ta, pb - pa]
                    )
                if r > 0:
                    times[name].append(steps)
            if ctx.rank == 0:
                print(f"round {r}/{rounds}", flush=True)
        Path(f"{out}.rank{ctx.rank}").write_text(json.dumps(times))
        dist.barrier()
    finally:
        destroy()


if __name__ == "__main__":
    main()
