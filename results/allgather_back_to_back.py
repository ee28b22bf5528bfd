"""gloo's all-gather and all-reduce (16 MB on 2 emulated hosts unless told otherwise) at
400mbit, timed call by call in blocks of 3 back-to-back calls, each block after a drained
token bucket and a barrier (as `cadence.comm.calibrate.measure_s` times them): does a call's
place in its block change it?

    sudo python results/allgather_back_to_back.py > results/allgather-back-to-back.txt
    sudo python results/allgather_back_to_back.py 4 64 > results/allgather-back-to-back-4hosts.txt

The optional arguments are the hosts (default 2) and the message size in MB (default 16).

Run from the repository root (the workers start as `python -m results.allgather_back_to_back`).
Hosts are pinned to one processor each and gloo's I/O thread runs under SCHED_IDLE, as in
`cadence bench collectives`. Prints every call's time on the slowest rank, block by block, and
the wire time of the call at the link's payload rate, once per cap on the hosts' TCP send
buffers (`net.ipv4.tcp_wmem`'s maximum, set in each host's namespace; 4 MB is Linux's default):
gloo's transport sends a "ready to receive" notice to its peer on the same socket as its
data, so on 2 ranks a notice can queue behind what the send buffer still holds of the call
before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOSTS = int(os.environ.get("AG_HOSTS", "2"))
NBYTES = int(os.environ.get("AG_MB", "16")) << 20  # the workers read both from the environment
CALLS, BLOCKS = 3, 8
BANDWIDTH_BPS = 400e6
WMEM_MAX = (4 << 20, 1 << 20, 256 << 10)  # bytes


def worker(out: Path) -> None:
    import torch
    import torch.distributed as dist

    from cadence.comm import destroy, init_from_env
    from cadence.comm.calibrate import bucket_drain, slowest
    from cadence.comm.gloo_threads import gloo_io_yields
    from cadence.netem._bandwidth import link_bucket_bytes

    init_from_env(backend="gloo", device="cpu")
    p = dist.get_world_size()
    gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    full, block = torch.zeros(NBYTES // 4), torch.zeros(NBYTES // 4 // p)
    ops = {"all_gather": lambda: gather(full, block), "all_reduce": lambda: dist.all_reduce(full)}
    drain = bucket_drain(2 * link_bucket_bytes(BANDWIDTH_BPS, False))
    times: dict[str, list[list[float]]] = {name: [] for name in ops}
    with gloo_io_yields(True):
        for _ in range(BLOCKS):  # the two collectives alternate block by block
            for name, op in ops.items():
                drain()
                dist.barrier()
                calls = []
                for _ in range(CALLS):
                    start = time.perf_counter()
                    op()
                    calls.append(time.perf_counter() - start)
                times[name].append(calls)
    flat = slowest([t for name in ops for calls in times[name] for t in calls])
    if dist.get_rank() == 0:
        per = BLOCKS * CALLS
        agreed = {name: flat[i * per : (i + 1) * per] for i, name in enumerate(ops)}
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
    model = {"all_gather": ("allgather", "ring"), "all_reduce": ("allreduce", "ring")}
    for wmem in WMEM_MAX:
        print(f"== hosts' TCP send buffer at most {wmem >> 10} KB", flush=True)
        with tempfile.TemporaryDirectory() as tmp, cleanup_on_signals(), EmulatedCluster(
            HOSTS, BANDWIDTH_BPS
        ) as cluster:
            for host in cluster.hosts:
                subprocess.run([*cluster.exec_prefix(host.index), "sysctl", "-q", "-w",
                                f"net.ipv4.tcp_wmem=4096 16384 {wmem}"], check=True)  # fmt: skip
            out = Path(tmp, "times.json")
            run_workers(cluster, "results.allgather_back_to_back", ["--worker", str(out)],
                        Path(tmp), 1, 600, pin_hosts=True)  # fmt: skip
            agreed = json.loads(out.read_text())
            # What each shaped link's token-bucket filter sent, dropped and held back over the
            # run (host egress: uploads; switch-port egress: downloads).
            links = [(h.namespace, h.iface, f"host {h.index} egress") for h in cluster.hosts]
            links += [(cluster.switch_namespace, f"h{h.index}", f"switch port to host {h.index}")
                      for h in cluster.hosts]  # fmt: skip
            stats = {label: tbf_counters(ns, dev) for ns, dev, label in links}
        for name, flat in agreed.items():
            link_ms = wire.time(*model[name], NBYTES, HOSTS) * 1e3
            print(f"{name} of {NBYTES >> 20} MB on {HOSTS} hosts at 400mbit, link time "
                  f"{link_ms:.1f} ms")  # fmt: skip
            print(f"  block  {'  '.join(f'call {i + 1:<3}' for i in range(CALLS))}  (ms)")
            for b in range(BLOCKS):
                calls = flat[b * CALLS : (b + 1) * CALLS]
                print(f"  {b + 1:>5}  " + "  ".join(f"{t * 1e3:>8.1f}" for t in calls))
            firsts = sorted(flat[b * CALLS] * 1e3 for b in range(BLOCKS))
            later = sorted(
                t * 1e3 for b in range(BLOCKS) for t in flat[b * CALLS + 1 : (b + 1) * CALLS]
            )
            print(f"  first calls {firsts[0]:.1f}-{firsts[-1]:.1f} ms, median "
                  f"{firsts[len(firsts) // 2]:.1f}; later calls {later[0]:.1f}-{later[-1]:.1f} "
                  f"ms, median {later[len(later) // 2]:.1f}", flush=True)  # fmt: skip
        print("token-bucket filters over the run (both collectives, drains included):")
        for label, line in stats.items():
            print(f"  {label}: {line}", flush=True)


def tbf_counters(namespace: str, dev: str) -> str:
    """`tc -s` counters of the root qdisc on `dev`: the "Sent ... (dropped N, overlimits M
    requeues R)" line."""
    text = subprocess.run(["tc", "-n", namespace, "-s", "qdisc", "show", "dev", dev],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    sent = [line.strip() for line in text.splitlines() if line.strip().startswith("Sent")]
    return sent[0] if sent else text.strip()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]))
    else:
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        if sys.argv[1:]:  # hosts and MB, passed on to the workers through the environment
            os.environ["AG_HOSTS"], os.environ["AG_MB"] = sys.argv[1], sys.argv[2]
            HOSTS, NBYTES = int(sys.argv[1]), int(sys.argv[2]) << 20
        main()
