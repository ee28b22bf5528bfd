"""Does pinning each emulated host to one processor (`cadence bench dp-paired --host-cpus
pinned`) steady dp-paired's rounds? Reads two pairs of runs, each pair made back to back with
the same command but for the flag (written to /tmp and copied here under these names):

    cadence bench dp-paired --models resnet32,gpt_mini --caps 1gbit --rounds 10 \
        --ddp-buckets-mb '' --twins --host-cpus shared|pinned \
        --out results/bench-dp-paired-pin-exp-{shared,pinned}-20261129.json
    cadence bench dp-paired --models vgg16 --caps 400mbit --rounds 5 \
        --ddp-buckets-mb '' --twins --host-cpus pinned|shared \
        --out results/bench-dp-paired-vgg16-pin-exp-{pinned,shared}-20261129.json

and prints, per row, each variant's round-to-round spread (coefficient of variation), the
lockstep compute's, and the A/A twins' median distance from their originals. Run from the
repository root: python results/pin_hosts_dp_paired.py > results/pin-hosts-dp-paired-20261129.txt
"""

from __future__ import annotations

import json
import statistics


def cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values) * 100


print("| hosts | model | cv % compute (lockstep) | cv % ddp | cv % cadence | cv % ddp-twin "
      "| cv % cadence-twin | A/A median |twin/original - 1| % ddp, cadence |")  # fmt: skip
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
RUNS = [(hosts, f"results/bench-dp-paired{model}-pin-exp-{hosts}-20261129.json")
        for model in ("", "-vgg16") for hosts in ("shared", "pinned")]  # fmt: skip
for hosts, path in RUNS:
    with open(path) as f:
        data = json.load(f)
    for row in data["rows"]:
        rounds = row["rounds_s"]
        twins = row["twin_over_original_rounds"]
        dev = [statistics.median(abs(x - 1) for x in twins[v]) * 100 for v in ("ddp", "cadence")]
        print(
            f"| {hosts} | {row['model']} | {cv(row['lockstep_compute_rounds_s']):.1f} "
            + " ".join(f"| {cv(rounds[v]):.1f}" for v in ("ddp", "cadence", "ddp-twin",
                                                         "cadence-twin"))  # fmt: skip
            + f" | {dev[0]:.1f}, {dev[1]:.1f} |"
        )
