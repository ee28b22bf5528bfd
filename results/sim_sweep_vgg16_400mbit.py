"""Which cadence-dp threshold, credit and K the simulator would pick for vgg16 at 400mbit,
given the compute of the steps traced in results/timelines-7/vgg16-400mbit.json (the replay's
setup: slowest rank's compute per iteration, updates on their own processor).

Run: PYTHONPATH=src python results/sim_sweep_vgg16_400mbit.py > results/sim-sweep-vgg16-400mbit.txt
"""

import json
from pathlib import Path

from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import DPPlan
from cadence.netem import parse_bandwidth
from cadence.profile import Profile
from cadence.sim.bench_timeline import REPLAY_OPTIONS, traced_profile
from cadence.sim.command import Setup, model_params, run_strategy
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION

data = json.loads(Path("results/timelines-7/vgg16-400mbit.json").read_text())
run = data["runs"]["cadence"]
profile = Profile.load("results/vgg16-profile-b32.json")
params = model_params("vgg16")
param_bytes = sum(p.nbytes for p in params)
link = AlphaBeta.from_bandwidth(parse_bandwidth(data["config"]["cap"]) * TCP_PAYLOAD_FRACTION)
wire = param_bytes * link.beta_s_per_byte


def predict(threshold: int, credit: int, k: int | None, plan: DPPlan | None = None) -> float:
    times = []
    for ranks in run["iteration_breakdowns"]:
        slow = {x: max(b[x] for b in ranks) for x in ("forward_s", "backward_s", "updates_s")}
        setup = Setup(
            profile=traced_profile(profile, slow["forward_s"], slow["backward_s"]),
            params=params, world_size=2, link=link, description="vgg16 400mbit",
            update_s_per_byte=slow["updates_s"] / param_bytes,
        )  # fmt: skip
        result, _ = run_strategy(
            setup, "cadence-dp", threshold, credit, 25 << 20, REPLAY_OPTIONS, reorder_k=k,
            dp_plan=plan,
        )  # fmt: skip
        times.append(result.iteration_s)
    return sum(times) / len(times)


print(f"wire {wire:.3f} s; traced mean iteration {run['iteration_s']:.3f} s (pictured one)")
recorded = predict(4 << 20, 8 << 20, None, DPPlan.from_json(run["plan"]))
print(f"recorded plan (4 MB, credit 8 MB): {recorded:.3f} s")
rows = []
for mb in (1, 2, 4, 8, 16):
    for times in (1, 2, 4):
        for k in (None, 4, 8, 13, 20):
            t = predict(mb << 20, times * (mb << 20), k)
            rows.append((t, mb, times, k))
print("threshold_mb credit_x K predicted_s predicted/wire")
for t, mb, times, k in sorted(rows, key=lambda r: r[0]):
    print(f"{mb:>12} {times:>8} {str(k):>4} {t:>11.3f} {t / wire:>14.3f}")
