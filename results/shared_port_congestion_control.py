"""How two TCP flows share one emulated host's download under each congestion control and port
queue: a bulk flow from host 2 to host 1 runs for 0.3 s, then a probe from host 0 to host 1
measures what it gets over 1 s and over 3 s (3 hosts at 200mbit; a fresh cluster each time),
twice each. (The per-peer port queues were added on 2026-11-26 after the FIFO rows.)

    sudo python results/shared_port_congestion_control.py \
        > results/shared-port-congestion-control.txt

Half the cap is a fair share. Run from the repository root.
"""

from __future__ import annotations

import time


def main() -> None:
    from cadence.netem import (
        EmulatedCluster,
        check_netem_available,
        cleanup_on_signals,
        probe_bandwidth,
        start_background_load,
    )

    check_netem_available()
    print("probe's share of host 1's 200mbit download beside a flow already running")
    for queue in ("fifo", "per-peer"):
        for control in ("bbr", "cubic"):
            for seconds in (1.0, 3.0):
                shares = []
                for _ in range(2):
                    with cleanup_on_signals(), EmulatedCluster(
                        3, 200e6, congestion_control=control, port_queue=queue
                    ) as cluster, start_background_load(cluster, 2, 1):
                        time.sleep(0.3)
                        shares.append(probe_bandwidth(cluster, 0, 1, seconds=seconds).ratio)
                print(f"  {queue:<8} {control:<6} over {seconds:.0f} s: "
                      + ", ".join(f"{r:.3f}" for r in shares), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
