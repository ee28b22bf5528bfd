"""What pricing 1-bit Adam's codec changes in the simulator's ZeRO rows as the cluster grows.

    python results/zero_codec_at_scale.py PROFILE.json [PROFILE.json ...]

For each profile (a `cadence profile` with the codec timed), the 1-bit ZeRO variants `cadence
plan` ranks, at 2, 8 and 64 workers on 1gbit and 10gbit links, predicted with the codec free
(as before it was priced) and priced from the profile; DDP beside them. A replicated stage 2
decodes every owner's momentum from everything sent, p pieces for each of p owners, so its
codec work grows with the workers while the others' stays flat.
"""

import sys

from cadence.profile import Profile
from cadence.sim.api import DDP_BUCKET_BYTES
from cadence.sim.command import make_setup, run_strategy
from cadence.sim.compute import block_costs
from cadence.sim.options import SimOptions
from cadence.sim.zero_graph import ZeroSimPlan, simulate_zero
from cadence.zero.codec_cost import profile_codec

VARIANTS = [
    ("stage 1, onebit", ZeroSimPlan(stage=1, compression="onebit")),
    ("stage 2, onebit", ZeroSimPlan(stage=2, compression="onebit")),
    ("stage 1, onebit, replicated", ZeroSimPlan(stage=1, compression="onebit", replicated_update=True)),
    ("stage 2, onebit, replicated", ZeroSimPlan(stage=2, compression="onebit", replicated_update=True)),
]  # fmt: skip

for path in sys.argv[1:]:
    model = Profile.load(path).model
    for bandwidth in ("1gbit", "10gbit"):
        for workers in (2, 8, 64):
            setup = make_setup(
                model=model, workers=workers, bandwidth=bandwidth, profile_path=path,
                echo=lambda _: None,
            )  # fmt: skip
            codec = profile_codec(setup.profile)
            ddp, _ = run_strategy(setup, "ddp", None, None, DDP_BUCKET_BYTES, SimOptions())
            print(f"{setup.description}: DDP {ddp.iteration_s * 1e3:.1f} ms")
            for name, plan in VARIANTS:
                free = simulate_zero(
                    block_costs(setup.profile), plan, workers, setup.link, 3,
                    setup.update_s_per_byte,
                ).iteration_s  # fmt: skip
                priced = simulate_zero(
                    block_costs(setup.profile), plan, workers, setup.link, 3,
                    setup.update_s_per_byte, codec,
                ).iteration_s  # fmt: skip
                print(
                    f"  {name:<30} codec free {free * 1e3:8.1f} ms ({free / ddp.iteration_s:.2f}x"
                    f" DDP), priced {priced * 1e3:8.1f} ms ({priced / ddp.iteration_s:.2f}x DDP)"
                )
