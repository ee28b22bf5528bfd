"""How much of each traced backward pass vgg16 spends in the blocks before DDP's first bucket
(layers 21-29: conv11-13 with their batch norms, and the classifier), per traced iteration
of `cadence bench dp-timeline` files, DDP and cadence-dp alike.

Run from the repository root:
    python results/trace_first_bucket_share.py > results/trace-first-bucket-share-DATE.txt
"""

from __future__ import annotations

import json
from pathlib import Path

FILES = ["results/dp-timeline-vgg16-400mbit-20261124.json",
         "results/dp-timeline-vgg16-400mbit-20261127.json"]  # fmt: skip
FIRST_LAYER = 21  # conv11, the first block of DDP's 25 MB bucket 0 in backward order


def main() -> None:
    print("| file | run | iteration | backward ms | layers 21-29 ms | share |")
    print("| --- | --- | --- | --- | --- | --- |")
    for path in FILES:
        for name, run in json.loads(Path(path).read_text())["runs"].items():
            for it in sorted({e["iteration"] for e in run["events"]}):
                spans = [(int(e["label"].split()[1]), e["end"] - e["start"])
                         for e in run["events"]
                         if e["iteration"] == it and e["kind"] == "backward"]  # fmt: skip
                if not spans:
                    continue
                total = sum(s for _, s in spans)
                first = sum(s for layer, s in spans if layer >= FIRST_LAYER)
                print(f"| {Path(path).name} | {name} | {it} | {total * 1e3:.0f} | "
                      f"{first * 1e3:.0f} | {first / total * 100:.1f}% |")  # fmt: skip


if __name__ == "__main__":
    main()
