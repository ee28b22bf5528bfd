"""gloo's all-gather on 2 emulated hosts at 400mbit (cubic, per-peer port queues), with the
hosts' idle restarts on and off (`EmulatedCluster(slow_start_after_idle=...)`), timed one call
per block after a drained token bucket and a barrier, as `cadence bench collectives` times
calls of 1 MB and up. 64 MB and 16 MB, 12 blocks each; the two settings alternate three times.

    sudo python results/allgather_idle_restart.py > results/allgather-idle-restart.txt

Run from the repository root (the workers start as `python -m results.allgather_idle_restart`).
Hosts are pinned to one processor each and gloo's I/O thread runs under SCHED_IDLE, as in
`cadence bench collectives`. Prints each call's time on the slowest rank against the wire time
of the call at the link's payload rate.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BANDWIDTH_BPS = 400e6
SIZES_MB = (64, 16)
BLOCKS = 12
PASSES = 3


def worker(out: Path, nbytes: int, blocks: int) -> None:
    import torch
    import torch.distributed as dist

    from cadence.comm import destroy, init_from_env
    from cadence.comm.calibrate import bucket_drain, slowest
    from cadence.comm.gloo_threads import gloo_io_yields
    from cadence.netem._bandwidth import link_bucket_bytes

    init_from_env(backend="gloo", device="cpu")
    p = dist.get_world_size()
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    full, block = torch.zeros(nbytes // 4), torch.zeros(nbytes // 4 // p)
    drain = bucket_drain(2 * link_bucket_bytes(BANDWIDTH_BPS, False))
    times: list[float] = []
    with gloo_io_yields(True):
        gather(full, block)  # warm-up
        for _ in range(blocks):
            drain()
            dist.barrier()
            start = time.perf_counter()
            gather(full, block)
            times.append(time.perf_counter() - start)
    agreed = slowest(times)
    if dist.get_rank() == 0:
        out.write_text(json.dumps(agreed))
    destroy()


def main() -> None:
    from cadence.bench._launch import run_workers
    from cadence.comm.cost import AlphaBeta
    from cadence.netem import EmulatedCluster, check_netem_available, cleanup_on_signals
    from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION

    if not Path("results", Path(__file__).name).is_file():
        sys.exit("run from the repository root")
    check_netem_available()
    wire = AlphaBeta.from_bandwidth(BANDWIDTH_BPS * TCP_PAYLOAD_FRACTION)
    for mb in SIZES_MB:
        nbytes = mb << 20
        link_ms = wire.time("allgather", "ring", nbytes, 2) * 1e3
        print(f"== all_gather of {mb} MB on 2 hosts at 400mbit, {BLOCKS} blocks of one call; "
              f"link time {link_ms:.1f} ms", flush=True)  # fmt: skip
        for n in range(PASSES):
            for restart in (True, False):
                with tempfile.TemporaryDirectory() as tmp, cleanup_on_signals(), EmulatedCluster(
                    2, BANDWIDTH_BPS, congestion_control="cubic", port_queue="per-peer",
                    slow_start_after_idle=restart,
                ) as cluster:  # fmt: skip
                    out = Path(tmp, "times.json")
                    args = ["--worker", str(out), str(nbytes), str(BLOCKS)]
                    run_workers(cluster, "results.allgather_idle_restart", args, Path(tmp), 1,
                                600, pin_hosts=True)  # fmt: skip
                    ms = [t * 1e3 for t in json.loads(out.read_text())]
                slow = sum(t > 1.1 * link_ms for t in ms)
                label = "restart on " if restart else "restart off"
                print(f"  pass {n + 1} {label}: min {min(ms):7.1f}  median "
                      f"{statistics.median(ms):7.1f}  max {max(ms):7.1f} ms  (median x link "
                      f"{statistics.median(ms) / link_ms:.3f}); {slow} of {len(ms)} calls over "
                      f"1.1x", flush=True)  # fmt: skip
                print("    calls (ms): " + " ".join(f"{t:.0f}" for t in ms), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        main()
