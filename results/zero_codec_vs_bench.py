"""The simulator's ZeRO predictions with and without 1-bit Adam's codec priced, next to the
iterations `cadence bench zero` measured in the same session.

    python results/zero_codec_vs_bench.py SUMMARY.json PROFILE.json BANDWIDTH

SUMMARY is `bench zero`'s summary.json (2 workers); PROFILE a `cadence profile` of the model at
the per-worker batch, made with the codec timed (`codec_s_per_element`). Each job is simulated
as `cadence simulate --strategy zero` would (`run_strategy`, which prices the codec from the
profile for onebit jobs), and again with the codec free, as before it was priced.
"""

import json
import sys

from cadence.sim.api import DDP_BUCKET_BYTES
from cadence.sim.command import make_setup, run_strategy
from cadence.sim.compute import block_costs
from cadence.sim.options import SimOptions
from cadence.sim.zero_graph import simulate_zero
from cadence.zero.bench import job_spec
from cadence.zero.bench_predict import sim_plan
from cadence.zero.bench_worker import JobSpec
from cadence.zero.codec_cost import profile_codec

summary_path, profile_path, bandwidth = sys.argv[1:4]
summary = json.loads(open(summary_path).read())
model, workers = summary["model"], int(summary["workers"])
setup = make_setup(
    model=model, workers=workers, bandwidth=bandwidth, profile_path=profile_path, echo=print
)
codec = profile_codec(setup.profile)
print(setup.description)
print(
    f"1-bit codec per million elements: encode {codec.encode_s_per_element * 1e9:.2f} ms, "
    f"decode {codec.decode_s_per_element * 1e9:.2f} ms"
)
print(f"{'job':<28}{'measured':>10}{'free codec':>12}{'error':>8}{'priced':>10}{'error':>8}")
errors: dict[str, list[float]] = {"free": [], "priced": []}
for row in summary["rows"]:
    job, measured = row["job"], float(row["median_iteration_s"])
    if job == "ddp":
        ddp, _ = run_strategy(setup, "ddp", None, None, DDP_BUCKET_BYTES, SimOptions())
        free = priced = ddp.iteration_s
    elif job.startswith("zero"):
        plan = sim_plan(job_spec(job, JobSpec(name="base", kind="zero", model=model)))
        result, _ = run_strategy(
            setup, "zero", None, None, DDP_BUCKET_BYTES, SimOptions(), zero=plan
        )
        priced = result.iteration_s
        free = simulate_zero(
            block_costs(setup.profile), plan, workers, setup.link, 3, setup.update_s_per_byte
        ).iteration_s
    else:
        continue
    e_free, e_priced = (free - measured) / measured, (priced - measured) / measured
    if job != "ddp":
        errors["free"].append(abs(e_free))
        errors["priced"].append(abs(e_priced))
    print(
        f"{job:<28}{measured:>9.4f}s{free:>11.4f}s{e_free * 100:>7.1f}%"
        f"{priced:>9.4f}s{e_priced * 100:>7.1f}%"
    )
for name, values in errors.items():
    print(f"ZeRO rows, codec {name}: mean |error| {sum(values) / len(values) * 100:.1f}%, "
          f"worst {max(values) * 100:.1f}% over {len(values)} jobs")  # fmt: skip
