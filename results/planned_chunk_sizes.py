"""Smallest and largest all-reduce chunk of cadence-dp's plan for each zoo model of the
data-parallel benchmark, at the thresholds the benchmark used (1 MB; vgg16 4 MB), 2 workers.

Run from the repository root:
    python results/planned_chunk_sizes.py > results/planned-chunk-sizes-20261126.txt
"""

from cadence.profile import Profile
from cadence.sim import plan_dp
from cadence.sim.command import zoo_layout

for model, threshold in (("cnn_lstm", 1 << 20), ("resnet32", 1 << 20), ("gpt_mini", 1 << 20),
                         ("vgg16", 4 << 20)):  # fmt: skip
    profile = Profile.load(f"results/{model}-profile-b32-forward.json")
    params, _ = zoo_layout(model)
    plan = plan_dp(profile, params, threshold, 2 * threshold, world_size=2, link=50e6)
    sizes = [chunk.nbytes for chunk in plan.chunks]
    print(f"{model}: {len(sizes)} chunks, {min(sizes)} to {max(sizes)} bytes")
