"""gloo's all-gather on emulated hosts at 400mbit under each TCP congestion control: 16 MB on 2
hosts (8 blocks of 3 back-to-back calls) and 64 MB on 4 hosts (40 calls, one per block), each
block after a drained token bucket and a barrier, as `cadence.comm.calibrate.measure_s` times
them. Shows what BBR, the hosts' default (`EmulatedCluster(congestion_control=...)`), costs
the all-gather against cubic: PROBE_RTT stalls.

    sudo python results/allgather_congestion_control.py > results/allgather-congestion-control.txt

Run from the repository root (the workers start as `python -m
results.allgather_congestion_control`). Hosts are pinned to one processor each and gloo's I/O
thread runs under SCHED_IDLE, as in `cadence bench collectives`. Prints each call's time on
the slowest rank against the wire time of the call at the link's payload rate.
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
# (hosts, MB, calls per block, blocks)
CASES = ((2, 16, 3, 8), (4, 64, 1, 40))
CONTROLS = ("bbr", "cubic")


def worker(out: Path, nbytes: int, calls: int, blocks: int) -> None:
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
        for _ in range(blocks):
            drain()
            dist.barrier()
            for _ in range(calls):
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
    from cadence.netem._congestion import congestion_control_of
    from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION

    if not Path("results", Path(__file__).name).is_file():
        sys.exit("run from the repository root")
    check_netem_available()
    wire = AlphaBeta.from_bandwidth(BANDWIDTH_BPS * TCP_PAYLOAD_FRACTION)
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    for hosts, mb, calls, blocks in CASES:
        nbytes = mb << 20
        link_ms = wire.time("allgather", "ring", nbytes, hosts) * 1e3
        print(f"== all_gather of {mb} MB on {hosts} hosts at 400mbit, {blocks} blocks of "
              f"{calls} call(s); link time {link_ms:.1f} ms", flush=True)  # fmt: skip
        for control in (c for c in CONTROLS if c in available):
            with tempfile.TemporaryDirectory() as tmp, cleanup_on_signals(), EmulatedCluster(
                hosts, BANDWIDTH_BPS, congestion_control=control
            ) as cluster:
                running = congestion_control_of(cluster.hosts[0].namespace)
                out = Path(tmp, "times.json")
                args = ["--worker", str(out), str(nbytes), str(calls), str(blocks)]
                run_workers(cluster, "results.allgather_congestion_control", args, Path(tmp), 1,
                            600, pin_hosts=True)  # fmt: skip
                ms = [t * 1e3 for t in json.loads(out.read_text())]
            slow = sum(t > 1.1 * link_ms for t in ms)
            print(f"  {running:<6} min {min(ms):7.1f}  median {statistics.median(ms):7.1f}  "
                  f"max {max(ms):7.1f} ms  (x link: {min(ms) / link_ms:.3f} / "
                  f"{statistics.median(ms) / link_ms:.3f} / {max(ms) / link_ms:.3f}); "
                  f"{slow} of {len(ms)} calls over 1.1x", flush=True)  # fmt: skip
            print("    calls (ms): " + " ".join(f"{t:.0f}" for t in ms), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        main()
