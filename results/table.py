"""Print the README's result tables from the JSON files beside this script."""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent


def load(name: str) -> dict:
    return json.loads((HERE / name).read_text())


default = load("train-default.json")
print("| job | test accuracy | training time | median iteration |")
print("| --- | --- | --- | --- |")
print(
    f"| `cadence train` (cnn, digits, 2 workers, 12 epochs) | "
    f"{100 * default['final_test_accuracy']:.2f}% | {default['total_seconds']:.1f} s | "
    f"{1000 * default['median_iteration_s']:.1f} ms |"
)
print()
print("| vgg16 at 400mbit, run | DDP median | cadence-dp median | cadence/DDP | DDP/bound |"
      " cadence/bound |")
print("| --- | --- | --- | --- | --- | --- |")
ratios = []
for run in (1, 2):
    ddp = load(f"vgg16-400mbit-ddp-run{run}.json")
    cad = load(f"vgg16-400mbit-cadence-dp-run{run}.json")
    bound = ddp["wire_bound_s"]
    ratio = cad["median_iteration_s"] / ddp["median_iteration_s"]
    ratios.append(ratio)
    print(
        f"| {run} | {ddp['median_iteration_s']:.3f} s | {cad['median_iteration_s']:.3f} s | "
        f"{ratio:.2f} | {ddp['median_iteration_s'] / bound:.2f} | "
        f"{cad['median_iteration_s'] / bound:.2f} |"
    )
compute = load("vgg16-profile-b32.json")["iteration_s"]
slow = load("vgg16-200mbit-ddp-steps5.json")
probe = load("probe-400mbit.json")
print()
print(
    f"bound = max(compute {compute:.3f} s, wire {bound:.3f} s) = {max(compute, bound):.3f} s; "
    f"median cadence/DDP over runs {statistics.median(ratios):.2f}"
)
print()
print(
    f"vgg16, DDP, 200mbit, 5 steps: median iteration {slow['median_iteration_s']:.3f} s, "
    f"wire bound {slow['wire_bound_s']:.3f} s ({slow['iteration_over_wire_bound']:.2f}x). "
    f"Probe at a 400mbit cap: {probe['achieved_bps'] / 1e6:.1f} Mbit/s of TCP payload "
    f"({100 * probe['ratio']:.1f}% of the cap; frames carry 1448 payload bytes per 1514)."
)
