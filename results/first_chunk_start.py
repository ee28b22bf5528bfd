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

from cadence.profile import Profile
from cadence.sim.bench_timeline import REPLAY_OPTIONS, replay_file

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


def simulated_delays(path: str, data: dict, by_layer: bool) -> list[float]:
    """Per measured simulated iteration of every steady traced one: first chunk issue less
    the backward's start, on worker 0."""
    options = dataclasses.replace(REPLAY_OPTIONS, layer_ready_points=by_layer)
    delays = []
    for replayed in replay_file(path, data, PROFILE, options=options):
        if replayed.strategy != "cadence-dp":
            continue
        schedule = replayed.result.schedule
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
        cells = [traced_delays(data["runs"]["cadence"]), simulated_delays(path, data, False),
                 simulated_delays(path, data, True)]  # fmt: skip
        text = [f"{statistics.median(c) * 1e3:.0f} ({min(c) * 1e3:.0f}-{max(c) * 1e3:.0f})"
                for c in cells]  # fmt: skip
        print(f"| {Path(path).name} | " + " | ".join(text) + " |")
    print("median (range) over each trace's iterations")


if __name__ == "__main__":
    main_()
