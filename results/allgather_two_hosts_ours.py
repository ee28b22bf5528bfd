"""gloo's all-gather against cadence's ring all-gather (`cadence.comm.collectives`, which ZeRO
uses), 16 MB on 2 emulated hosts at 400mbit, 8 blocks of 3 back-to-back calls each, blocks
alternating, each after a drained token bucket and a barrier. cadence's ring posts its receive
before its send, so its ready-to-receive notice never waits behind its own data
(`results/allgather-two-hosts-capture.txt` shows gloo's does).

    sudo python results/allgather_two_hosts_ours.py > results/allgather-two-hosts-ours.txt

Run from the repository root. Prints every call's time on the slowest rank (link 175.4 ms).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

NBYTES, BLOCKS, CALLS = 16 << 20, 8, 3


def worker(out: Path) -> None:
    import torch
    import torch.distributed as dist

    from cadence.comm import collectives, destroy, init_from_env
    from cadence.comm.calibrate import bucket_drain, slowest
    from cadence.comm.gloo_threads import gloo_io_yields
    from cadence.netem._bandwidth import link_bucket_bytes

    init_from_env(backend="gloo", device="cpu")
    full, block = torch.zeros(NBYTES // 4), torch.zeros(NBYTES // 4 // dist.get_world_size())
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    ops = {"gloo": lambda: gather(full, block),
           "cadence ring": lambda: collectives.all_gather_into_tensor(full, block)}  # fmt: skip
    drain = bucket_drain(2 * link_bucket_bytes(400e6, False))
    times: dict[str, list[float]] = {name: [] for name in ops}
    with gloo_io_yields(True):
        for _ in range(BLOCKS):
            for name, op in ops.items():
                drain()
                dist.barrier()
                for _ in range(CALLS):
                    start = time.perf_counter()
                    op()
                    times[name].append(time.perf_counter() - start)
    agreed = {name: slowest(t) for name, t in times.items()}
    if dist.get_rank() == 0:
        out.write_text(json.dumps(agreed))
    destroy()


def main() -> None:
    from cadence.bench._launch import run_workers
    from cadence.netem import EmulatedCluster, check_netem_available, cleanup_on_signals

    if not Path("results", Path(__file__).name).is_file():
        sys.exit("run from the repository root")
    check_netem_available()
    with tempfile.TemporaryDirectory() as tmp, cleanup_on_signals(), EmulatedCluster(
        2, 400e6
    ) as cluster:
        out = Path(tmp, "times.json")
        run_workers(cluster, "results.allgather_two_hosts_ours", ["--worker", str(out)],
                    Path(tmp), 1, 600, pin_hosts=True)  # fmt: skip
        agreed = json.loads(out.read_text())
    print(f"all-gather of 16 MB on 2 hosts at 400mbit, {BLOCKS} blocks of {CALLS} back-to-back "
          "calls (link time 175.4 ms)")  # fmt: skip
    for name, seconds in agreed.items():
        ms = [t * 1e3 for t in seconds]
        later = [t for i, t in enumerate(ms) if i % CALLS]
        print(f"  {name:<12} first calls median {statistics.median(ms[::CALLS]):.1f} ms, later "
              f"calls median {statistics.median(later):.1f} ms, max {max(ms):.1f} ms")  # fmt: skip
        print("    calls (ms): " + " ".join(f"{t:.1f}" for t in ms))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]))
    else:
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        main()
