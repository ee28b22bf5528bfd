"""Small gloo collectives on 2 emulated hosts at 400mbit, with each host's worker pinned to
one processor or placed by the kernel (`cadence.bench._launch.run_workers(pin_hosts=...)`):
how much of their scatter comes from where the threads of the two hosts land.

    sudo python results/pinned_hosts_latency.py > results/pinned-hosts-latency.txt

Run from the repository root (the workers start as `python -m results.pinned_hosts_latency`).
Each mode runs 3 times, alternating. A run times every (collective, size) in blocks of 64
calls, one by one, 5 rounds after an untimed one, with gloo's I/O thread under SCHED_IDLE as
in `cadence bench collectives`; it prints the slowest rank's 10th, 50th and 90th percentile.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

SIZES = (1024, 4096)  # bytes
COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "barrier")
MODES = ("shared", "pinned")
CALLS, ROUNDS = 64, 5


def worker(out: Path) -> None:
    import torch
    import torch.distributed as dist

    from cadence.comm import destroy, init_from_env
    from cadence.comm.calibrate import slowest
    from cadence.comm.gloo_threads import gloo_io_yields

    init_from_env()
    p = dist.get_world_size()
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    figures: dict[str, list[float]] = {}
    with gloo_io_yields(True):
        for nbytes in SIZES:
            buf, block = torch.zeros(nbytes // 4), torch.zeros(nbytes // 4 // p)
            ops = {
                "all_reduce": lambda b=buf: dist.all_reduce(b),
                "all_gather": lambda b=buf, k=block: gather(b, k),
                "broadcast": lambda b=buf: dist.broadcast(b, 0),
                "barrier": lambda: dist.barrier(),
            }
            samples: dict[str, list[float]] = {c: [] for c in COLLECTIVES}
            for rnd in range(1 + ROUNDS):  # collectives interleaved round by round
                for name in COLLECTIVES:
                    dist.barrier()
                    for _ in range(CALLS):
                        start = time.perf_counter()
                        ops[name]()
                        if rnd:
                            samples[name].append(time.perf_counter() - start)
            for name, s in samples.items():
                deciles = statistics.quantiles(s, n=10)
                figures[f"{name} {nbytes}"] = [deciles[0], statistics.median(s), deciles[8]]
    agreed = slowest([x for v in figures.values() for x in v])
    if dist.get_rank() == 0:
        keys = list(figures)
        out.write_text(json.dumps({k: agreed[3 * i : 3 * i + 3] for i, k in enumerate(keys)}))
    destroy()


def main() -> None:
    from cadence.bench._launch import run_workers
    from cadence.netem import EmulatedCluster, check_netem_available, cleanup_on_signals

    if not Path("results", Path(__file__).name).is_file():
        sys.exit("run from the repository root")
    check_netem_available()
    print(f"{'mode':<8}{'collective':<12}{'bytes':>6}{'p10 ms':>9}{'median ms':>11}{'p90 ms':>9}")
    for _round in range(3):
        for mode in MODES:
            with tempfile.TemporaryDirectory() as tmp, cleanup_on_signals(), EmulatedCluster(
                2, 400e6
            ) as cluster:
                out = Path(tmp, "figures.json")
                run_workers(cluster, "results.pinned_hosts_latency", ["--worker", str(out)],
                            Path(tmp), 1, 300, pin_hosts=mode == "pinned")  # fmt: skip
                for key, (p10, p50, p90) in json.loads(out.read_text()).items():
                    name, nbytes = key.split()
                    print(f"{mode:<8}{name:<12}{nbytes:>6}{p10 * 1e3:>9.3f}{p50 * 1e3:>11.3f}"
                          f"{p90 * 1e3:>9.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]))
    else:
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        main()
