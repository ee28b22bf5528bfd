"""How much of each traced backward pass vgg16 spends in the blocks before DDP's first bucket
(layers 21-29: conv11-13 with their batch norms, and the classifier) and in the blocks after
its second (layers 1-10: conv1-5 with their batch norms, the last 2.1 MB bucket), per traced
iteration of `cadence bench dp-timeline` files, DDP and cadence-dp alike; then the same two
shares of the gradient time in each vgg16 profile given.

Run from the repository root:
    python results/trace_first_bucket_share.py > results/trace-first-bucket-share-DATE.txt
"""

from __future__ import annotations

import glob
import json
import statistics
from pathlib import Path

FILES = sorted(glob.glob("results/dp-timeline-vgg16-*.json")) + sorted(
    glob.glob("results/timelines*/vgg16-*.json")
)
FIRST_LAYER = 21  # conv11, the first block of DDP's 25 MB bucket 0 in backward order
LAST_LAYER = 10  # conv5's batch norm: layers 1-10 fill DDP's last bucket
PROFILES = sorted(glob.glob("results/vgg16-profile-b32*.json"))
FIRST_BLOCKS = ("conv11", "conv12", "conv13", "fc1", "fc2", "head")
LAST_BLOCKS = ("conv1", "conv2", "conv3", "conv4", "conv5")


def main() -> None:
    print("| file | run | iteration | backward ms | layers 21-29 | layers 1-10 |")
    print("| --- | --- | --- | --- | --- | --- |")
    firsts, lasts = [], []
    for path in FILES:
        for name, run in json.loads(Path(path).read_text())["runs"].items():
            for it in sorted({e["iteration"] for e in run["events"]}):
                spans = [(int(e["label"].split()[1]), e["end"] - e["start"])
                         for e in run["events"]
                         if e["iteration"] == it and e["kind"] == "backward"]  # fmt: skip
                if not spans:
                    continue
                total = sum(s for _, s in spans)
                first = sum(s for layer, s in spans if layer >= FIRST_LAYER) / total
                last = sum(s for layer, s in spans if layer <= LAST_LAYER) / total
                firsts.append(first)
                lasts.append(last)
                print(f"| {path.removeprefix('results/')} | {name} | {it} | {total * 1e3:.0f} | "
                      f"{first * 100:.1f}% | {last * 100:.1f}% |")  # fmt: skip
    print(f"\n{len(firsts)} traced iterations: layers 21-29 median {statistics.median(firsts) * 100:.1f}% "
          f"(quartiles {statistics.quantiles(firsts)[0] * 100:.1f}-{statistics.quantiles(firsts)[2] * 100:.1f}%), "
          f"layers 1-10 median {statistics.median(lasts) * 100:.1f}% "
          f"(quartiles {statistics.quantiles(lasts)[0] * 100:.1f}-{statistics.quantiles(lasts)[2] * 100:.1f}%)")  # fmt: skip
    print("\n| profile | block timing | conv11-head | conv1-5 |")
    print("| --- | --- | --- | --- |")
    for path in PROFILES:
        data = json.loads(Path(path).read_text())
        grads = {b["name"]: b["input_grad_s"] + b["weight_grad_s"] for b in data["blocks"]}
        total = sum(grads.values())
        first = sum(grads[b] for b in FIRST_BLOCKS) / total
        last = sum(grads[b] for b in LAST_BLOCKS) / total
        print(f"| {Path(path).name} | {data.get('block_timing', 'separate')} | "
              f"{first * 100:.1f}% | {last * 100:.1f}% |")  # fmt: skip


if __name__ == "__main__":
    main()
