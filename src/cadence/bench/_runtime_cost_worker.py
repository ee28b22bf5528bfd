"""One process of `cadence bench runtime-cost`: `python -m cadence.bench._runtime_cost_worker
CASE.json RESULT_PREFIX`, started beside the others with torchrun-style variables that only
number it. It joins a gloo group of its own (world of one: DDP's reducer and cadence-dp's
engine run, nothing is sent) and runs the dp-paired worker's turns of compute alone, DDP and
cadence-dp, writing RESULT_PREFIX.<number>.json. The processes start every turn together (a
barrier on a store at the case's port), so each variant is timed while the others run the
same.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from cadence.bench._dp_paired_worker import run
from cadence.bench.dp_paired import PairedCase
from cadence.launch.errors import exit_worker, worker_entry


def main(argv: list[str]) -> int:
    def body() -> None:
        number = int(os.environ.get("RANK", "0"))
        case = PairedCase.from_json(json.loads(Path(argv[0]).read_text()))
        procs = int(os.environ["WORLD_SIZE"])
        assert case.master_port is not None  # the launcher picks a free one
        store = dist.TCPStore(
            "127.0.0.1", case.master_port, procs, is_master=number == 0,
            timeout=timedelta(seconds=600),
        )  # fmt: skip
        turns = itertools.count()

        def barrier() -> None:
            key = f"turn{next(turns)}"
            if store.add(key, 1) == procs:
                store.set(f"{key}-go", "1")
            store.wait([f"{key}-go"])

        # A world of one for this process alone: a store in memory, no rendezvous.
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        run(case, Path(f"{argv[1]}.{number}.json"), barrier)

    return worker_entry(body)


if __name__ == "__main__":
    exit_worker(main(sys.argv[1:]))
