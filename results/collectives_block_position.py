"""Where in a timed block a small gloo all-gather's time goes, on the emulated cluster:
`python results/collectives_block_position.py HOSTS BANDWIDTH [yield|plain] > FILE` (root;
`yield`, the default, runs gloo's I/O thread under SCHED_IDLE as the benchmark does).

`cadence bench collectives` times small calls in short blocks (64 KB: 4 calls a block), each
started on a drained token bucket, and takes the median call. The 2-host 64 KB all-gather
came out at 0.76-0.77 of the calibrated prediction in three passes on 2026-11-29, under the
0.66 ms that 32 KB each way needs at 400mbit. This times every call of 16-call blocks
started the same way and prints, per position in the block, the median over the rounds of the
slowest rank's call, beside the cap's time for the bytes each rank sends, and the
median of the calls at positions 1-4 (what a 4-call block's median sees) and 5-16.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from cadence.bench._launch import run_workers_on_link
from cadence.netem._bandwidth import link_bucket_bytes, parse_bandwidth

HERE = Path(__file__).parent


def main(hosts: int, bandwidth: str, io: str) -> None:
    bps = parse_bandwidth(bandwidth)
    drain = 2 * link_bucket_bytes(bps)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p
        )
        run_workers_on_link(bps, hosts, "collectives_block_position_worker", [tmp, str(drain), io],
                            Path(tmp), threads=1, timeout_s=600, pin_hosts=True)  # fmt: skip
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(hosts)]
    print(f"{hosts} hosts at {bandwidth}, gloo I/O thread {io}: token bucket "
          f"{link_bucket_bytes(bps)} bytes, "
          f"drain {drain} bytes; barrier after the drain, median "
          f"{statistics.median(ranks[0]['barrier_s']) * 1e3:.3f} ms (rank 0)")
    for size, blocks in ranks[0]["times"].items():
        n = int(size)
        # The slowest rank's time for each call (a collective ends when its last rank does).
        slowest = [[max(r["times"][size][b][k] for r in ranks) for k in range(len(blocks[0]))]
                   for b in range(len(blocks))]  # fmt: skip
        sent = n * (hosts - 1) / hosts  # bytes each rank sends in a flat all-gather
        at_cap = sent * 8 / bps
        per_pos = [statistics.median(b[k] for b in slowest) for k in range(len(slowest[0]))]
        first4 = statistics.median(t for b in slowest for t in b[:4])
        rest = statistics.median(t for b in slowest for t in b[4:])
        print(f"  all-gather {n >> 10} KB: each rank sends {sent / 1024:.0f} KB, "
              f"{at_cap * 1e3:.3f} ms at the cap; median call by position (ms): "
              + " ".join(f"{t * 1e3:.2f}" for t in per_pos))
        print(f"    calls 1-4: median {first4 * 1e3:.3f} ms ({first4 / at_cap:.2f} of the cap's "
              f"time); calls 5-16: {rest * 1e3:.3f} ms ({rest / at_cap:.2f}); block mean "
              f"{statistics.mean(t for b in slowest for t in b) * 1e3:.3f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "yield")
