"""Prints the event simulator's ZeRO predictions next to `cadence bench zero`'s measured vgg16
rows at 200mbit (results/zero-bench-vgg16-200mbit/summary.json).

    python results/zero_sim_vs_bench.py > results/zero-sim-vs-bench-vgg16-200mbit.txt

Compute and the Adam step come from `python -m cadence.zero.profile_step --model vgg16
--workers 2 --bandwidth 200mbit` (results/zero-bench-profile/vgg16-codec-after.json): the
profile's per-block split is scaled to its compute time, and its Adam time (one rank's half of
the parameters) is doubled for the whole model. The link is 200 Mbit/s of which TCP carries
1448/1514. The simulator has no cost for the 1-bit codec (the same file: 0.34 s per step).
"""

import json
from pathlib import Path

from cadence.comm.cost import AlphaBeta
from cadence.profile import Profile
from cadence.sim.api import simulate_ddp
from cadence.sim.bench_dp import scaled_profile
from cadence.sim.zero_graph import ZeroSimPlan, simulate_zero

here = Path(__file__).parent
step = json.loads((here / "zero-bench-profile" / "vgg16-codec-after.json").read_text())
profile = Profile.load(here / "vgg16-profile-b32.json")
profile = scaled_profile(profile, step["compute_s"] / profile.iteration_s)
link = AlphaBeta.from_bandwidth(200e6 * 1448 / 1514)
step_s_per_byte = step["adam_update_s"] * step["workers"] / profile.param_bytes
summary = json.loads((here / "zero-bench-vgg16-200mbit" / "summary.json").read_text())
measured = {r["job"]: r["median_iteration_s"] for r in summary["rows"]}
print(f"{'job':<28}{'measured':>10}{'predicted':>11}{'error':>8}")
ddp = simulate_ddp(profile, 2, link, options=None).iteration_s
rows = [("ddp", ddp)]
for stage in (1, 2, 3):
    for compression, gather, overlap in (
        ("none", 4, False),
        ("onebit", 4, False),
        ("onebit", 2, False),
        ("onebit", 2, True),
    ):
        if stage == 3 and overlap:
            continue
        plan = ZeroSimPlan(
            stage=stage, compression=compression, gather_bytes_per_param=gather,
            overlap_gather=overlap,
        )  # fmt: skip
        job = f"zero{stage}-{compression}" + "-bf16" * (gather == 2) + "-overlap" * overlap
        result = simulate_zero(profile, plan, 2, link, update_s_per_byte=step_s_per_byte)
        rows.append((job, result.iteration_s))
for job, predicted in rows:
    if job in measured:
        m = measured[job]
        print(f"{job:<28}{m:>9.3f}s{predicted:>10.3f}s{(predicted - m) / m * 100:>7.1f}%")
