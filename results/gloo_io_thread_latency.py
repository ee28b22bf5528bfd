"""Small gloo all-reduces between two local processes, with gloo's polling I/O thread at
normal priority or under SCHED_IDLE (`cadence.comm.gloo_threads.gloo_io_yields`): the 4 ms
tail of small collectives on this machine, and what demoting that one thread does to it.

    python results/gloo_io_thread_latency.py > results/gloo-io-thread-latency.txt

Each mode runs 3 times, alternating, 300 calls per size timed one by one after 20 untimed.
Also prints, per mode, the CPU seconds each process's I/O thread used per 1000 calls of 1 KB.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from _local_gloo_pair import run_modes

SIZES = (1024, 16384, 262144)  # bytes
MODES = ("normal", "io-thread-idle")
CALLS = 300


def _thread_cpu_s(tid: int) -> float:
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker() -> None:
    import torch
    import torch.distributed as dist

    from cadence.comm.gloo_threads import gloo_io_yields, io_thread_ids

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    dist.all_reduce(torch.zeros(8))
    mode = os.environ["MODE"]
    (io_tid,) = io_thread_ids()
    with gloo_io_yields(mode == "io-thread-idle"):
        for nbytes in SIZES:
            buf = torch.zeros(nbytes // 4)
            for _ in range(20):
                dist.all_reduce(buf)
            cpu0 = _thread_cpu_s(io_tid)
            times = []
            for _ in range(CALLS):
                start = time.perf_counter()
                dist.all_reduce(buf)
                times.append(time.perf_counter() - start)
            io_cpu_ms = (_thread_cpu_s(io_tid) - cpu0) / CALLS * 1e3
            times.sort()
            if dist.get_rank() == 0:
                print(
                    f"{mode:<16}{nbytes:>7}{statistics.median(times) * 1e3:>10.3f}"
                    f"{times[int(0.9 * CALLS)] * 1e3:>10.3f}{times[-1] * 1e3:>10.3f}"
                    f"{io_cpu_ms:>16.3f}",
                    flush=True,
                )
    dist.destroy_process_group()


def main() -> None:
    print(f"{'mode':<16}{'bytes':>7}{'median ms':>10}{'p90 ms':>10}{'max ms':>10}"
          f"{'io cpu ms/call':>16}")  # fmt: skip
    run_modes(__file__, MODES, first_port=29850)


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["--worker"] else main()
