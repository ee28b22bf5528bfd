"""One rank of `cadence bench contention`: `python -m cadence.bench._contention_worker
CONFIG.json RESULT.json`, started in an emulated host's namespace with torchrun's variables.

First each rank computes alone while the others idle (solo). Then, for each message size
and round: time `iterations` forward + backward passes on every rank at once, then the
same with a background thread all-reducing messages of that size back to back (the way
cadence-dp's communication thread and DDP's reducer run beside the compute). Every rank
writes its rows; rank 0 gathers them into RESULT.json.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from cadence.bench.contention import ContentionConfig
from cadence.comm import destroy, init_from_env
from cadence.launch.errors import exit_worker, worker_entry
from cadence.models import get_model_spec, loss_fn


def _compute(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        model.zero_grad(set_to_none=True)
        loss_fn(model(batch[0]), batch[1]).backward()
    return time.perf_counter() - start


class _Traffic:
    """Back-to-back all-reduces of one size on a thread and a group of its own; counts them.

    Every message carries a stop flag in its first element: the sum tells every rank at the
    same message that some rank wants to stop, so all ranks issue the same number of calls.
    """

    def __init__(self, size: int, group: Any) -> None:
        self.buf = torch.zeros(max(1, size // 4))
        self.group = group
        self.stop = threading.Event()
        self.completed = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while True:
            self.buf[0] = 1.0 if self.stop.is_set() else 0.0
            dist.all_reduce(self.buf, group=self.group, async_op=True).wait()
            self.completed += 1
            if self.buf[0].item() > 0:
                return

    def __enter__(self) -> _Traffic:
        self.thread.start()
        time.sleep(0.05)  # the first messages are under way before compute starts
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()


def run(config: ContentionConfig, result: Path) -> None:
    torch.set_num_threads(config.threads)
    ctx = init_from_env()
    try:
        torch.manual_seed(0)
        spec = get_model_spec(config.model)
        model = spec.build()
        batch = spec.synthetic_batch(config.batch_size)
        _compute(model, batch, 4)  # warm-up: allocator, first-call overheads
        traffic_group = dist.new_group(backend="gloo")
        rows: list[dict[str, Any]] = []
        solo: list[float] = []

        def measure_solo() -> None:  # each rank computing while the others idle
            for rank in range(ctx.world_size):
                dist.barrier()
                if rank == ctx.rank:
                    solo.append(_compute(model, batch, config.iterations))

        measure_solo()
        for size in config.sizes:
            for rnd in range(config.rounds):
                dist.barrier()
                alone = _compute(model, batch, config.iterations)
                dist.barrier()
                with _Traffic(size, traffic_group) as traffic:
                    before = traffic.completed
                    loaded = _compute(model, batch, config.iterations)
                    messages = traffic.completed - before
                    # Traffic goes on until every rank's compute has ended: no rank's window
                    # runs without its peer's half of the all-reduces.
                    dist.barrier()
                rows.append(
                    {
                        "rank": ctx.rank,
                        "size": size,
                        "round": rnd,
                        "alone_s": alone,
                        "with_traffic_s": loaded,
                        "messages": messages,
                    }
                )
            measure_solo()  # between sizes too: a drift in machine speed shows in both
        gathered: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(gathered, {"rows": rows, "solo_s": solo})
        if ctx.rank == 0:
            result.write_text(
                json.dumps(
                    {
                        "rows": [r for part in gathered for r in part["rows"]],
                        "solo_s": [t for part in gathered for t in part["solo_s"]],
                    }
                )
            )
    finally:
        destroy()


def main(argv: list[str]) -> int:
    def body() -> None:
        raw = json.loads(Path(argv[0]).read_text())
        raw["sizes"] = tuple(raw["sizes"])
        run(ContentionConfig(**raw), Path(argv[1]))

    return worker_entry(body)


if __name__ == "__main__":
    exit_worker(main(sys.argv[1:]))
