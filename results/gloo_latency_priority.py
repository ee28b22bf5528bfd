"""Small gloo all-reduces between two local processes, with gloo's threads at normal or
real-time (SCHED_FIFO) priority: why small collectives scatter on this machine, and why cadence
does not raise its threads' priority to fix it.

    python results/gloo_latency_priority.py > results/gloo-latency-priority.txt

Needs root (SCHED_FIFO) and torch; each mode runs 3 times, 200 timed calls per size.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from _local_gloo_pair import run_modes

SIZES = (1024, 16384)  # bytes
MODES = ("normal", "fifo-gloo-threads", "fifo-runloop-only", "fifo-tcp-loop-only")
PREFIXES = {
    "normal": (),
    "fifo-gloo-threads": ("gloo_tcp", "pt_gloo"),
    "fifo-runloop-only": ("pt_gloo",),
    "fifo-tcp-loop-only": ("gloo_tcp",),
}


def worker() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    dist.all_reduce(torch.zeros(8))  # every gloo thread exists from here on
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
        if name.startswith(PREFIXES[os.environ["MODE"]]):
            os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(1))
    for nbytes in SIZES:
        buf = torch.zeros(nbytes // 4)
        for _ in range(20):
            dist.all_reduce(buf)
        times = []
        for _ in range(200):
            start = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - start)
        times.sort()
        if dist.get_rank() == 0:
            print(
                f"{os.environ['MODE']:<20}{nbytes:>7}{statistics.median(times) * 1e3:>10.3f}"
                f"{times[180] * 1e3:>10.3f}{times[-1] * 1e3:>10.3f}",
                flush=True,
            )
    dist.destroy_process_group()


def main() -> None:
    print(f"{'mode':<20}{'bytes':>7}{'median ms':>10}{'p90 ms':>10}{'max ms':>10}")
    run_modes(__file__, MODES, first_port=29800)


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["--worker"] else main()
