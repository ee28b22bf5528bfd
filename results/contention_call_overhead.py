"""Per-call overhead of the all-reduces `cadence bench contention` runs beside the compute:
`python results/contention_call_overhead.py > results/contention-call-overhead-20261126.txt`.

Each raw row counts the all-reduces a rank completed during one compute window; window /
count is one call's time, less the message's bytes at the cap's TCP payload rate. Windows
hold few calls of 4 MB and more, so only 64 KB and 1 MB are meaningful.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parent
FILES = (
    "costs-20261126/contention.json",
    "contention-gpt_mini-400mbit-defaults-20261126.json",
    "contention-cnn_lstm-1gbit-20261126.json",
)
BITS_PER_S = {"400mbit": 400e6, "1gbit": 1e9}
PAYLOAD = 1448 / 1514


def main() -> None:
    for name in FILES:
        data = json.loads((RESULTS / name).read_text())
        cap = data["config"]["bandwidth"]
        bytes_per_s = BITS_PER_S[cap] * PAYLOAD / 8
        print(f"{name} ({cap})")
        rows = data["raw"]["rows"]
        for size in sorted({r["size"] for r in rows}):
            calls = [r["with_traffic_s"] / r["messages"] for r in rows
                     if r["size"] == size and r["messages"] > 0]  # fmt: skip
            call_s, wire_s = statistics.median(calls), size / bytes_per_s
            print(f"  {size:>9} B: call {call_s * 1e3:.2f} ms, wire {wire_s * 1e3:.2f} ms, "
                  f"over {(call_s - wire_s) * 1e3:.2f} ms ({(call_s - wire_s) / 2 * 1e3:.2f} ms "
                  f"per message of a 2-rank ring)")  # fmt: skip


if __name__ == "__main__":
    main()
