"""How long after the backward pass starts cadence-dp's first chunk leaves, in traced vgg16
steps at 400mbit and in the simulator replaying them, with a block's gradients ready at its
end or layer by layer (`SimOptions.layer_ready_points`). Traced: rank 0's first all-reduce of
each traced iteration after its backward's start. Simulated: the same file's replay (its plan,
its traced compute), the measured iterations' first chunk issue after their backward's start.

Run from the repository root:
    python results/first_chunk_start.py > results/first-chunk-start-20261129.txt
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from cadence.dp.plan import DPPlan
from cadence.netem import parse_bandwidth
from cadence.profile import Profile
from cadence.sim.bench_dp_records import recorded_threshold
from cadence.sim.bench_timeline import REPLAY_OPTIONS, steady_iterations, traced_profile
from cadence.sim.command import Setup, model_params, run_strategy, zoo_arrival_order
from cadence.sim.compute import cap_link, emulated_options
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION

TRACES = [f"results/dp-timeline-vgg16-400mbit-20261129{s}.json" for s in "defghi"]
PROFILE = Profile.load("results/vgg16-profile-b32-forward.json")


def traced_delays(run: dict) -> list[float]:
    """Per traced iteration: first all-reduce's start less the backward's start (rank 0)."""
    delays = []
    for it in sorted({e["iteration"] for e in run["events"]}):
        events = [e for e in run["events"] if e["iteration"] == it]
        backward = [e["start"] for e in events if e["kind"] == "backward"]
        comm = [e["start"] for e in events if e["kind"] == "allreduce"]
        if backward and comm:
            delays.append(min(comm) - min(backward))
    return delays


def simulated_delays(data: dict, by_layer: bool) -> list[float]:
    cfg, run = data["config"], data["runs"]["cadence"]
    params = model_params("vgg16")
    bps = parse_bandwidth(cfg["cap"])
    options = dataclasses.replace(REPLAY_OPTIONS, layer_ready_points=by_layer)
    delays = []
    for ranks in steady_iterations(run):
        slowest = {k: max(b[k] for b in ranks) for k in ("forward_s", "backward_s", "updates_s")}
        setup = Setup(
            profile=traced_profile(PROFILE, slowest["forward_s"], slowest["backward_s"]),
            params=params, world_size=2, link=cap_link(bps, TCP_PAYLOAD_FRACTION),
            description="vgg16", update_s_per_byte=slowest["updates_s"] / sum(
                p.nbytes for p in params), arrival_order=zoo_arrival_order("vgg16"),
        )  # fmt: skip
        result, _ = run_strategy(setup, "cadence-dp", recorded_threshold(cfg), None, 25 << 20,
                                 emulated_options(options, bps, TCP_PAYLOAD_FRACTION, False),
                                 dp_plan=DPPlan.from_json(run["plan"]))  # fmt: skip
        schedule = result.schedule
        tasks = [t for t in schedule.graph.tasks if t.worker == 0 and t.iteration >= 1]
        for it in sorted({t.iteration for t in tasks}):
            mine = [t for t in tasks if t.iteration == it]
            backward = [schedule.start_s[t.id] for t in mine
                        if t.kind in ("input_grad", "weight_grad")]  # fmt: skip
            issued = [schedule.start_s[t.id] for t in mine if t.kind == "allreduce"]
            if backward and issued:
                delays.append(min(issued) - min(backward))
    return delays


def main_() -> None:
    print("| trace | traced (ms) | simulated, block's end (ms) | simulated, layer by layer (ms) |")
    print("| --- | --- | --- | --- |")
    for path in TRACES:
        data = json.loads(Path(path).read_text())
        cells = [traced_delays(data["runs"]["cadence"]),
                 simulated_delays(data, False), simulated_delays(data, True)]  # fmt: skip
        text = [f"{statistics.median(c) * 1e3:.0f} ({min(c) * 1e3:.0f}-{max(c) * 1e3:.0f})"
                for c in cells]  # fmt: skip
        print(f"| {Path(path).name} | " + " | ".join(text) + " |")
    print("median (range) over each trace's iterations")


if __name__ == "__main__":
    main_()
