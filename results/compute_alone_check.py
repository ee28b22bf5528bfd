"""Is what the benchmarks' predictions get wrong the compute they are priced from?

For `cadence bench dp-timeline --compute-alone` files (at a cap; the model's
`results/MODEL-profile-b32-forward.json` splits the compute over blocks): in one recording,
DDP, cadence-dp and the same steps with no synchronisation (every rank training alone, all at
once, as `dp-paired`'s compute-only turns), before and after them; "alone" below is the mean
of the two (files from before the second run have only the first). Per file and strategy:

- alone after / before: the compute-alone runs' forward + backward (slowest rank, mean of
  the traced iterations), the one after the strategies over the one before (the machine's
  drift over one recording);
- traced: forward + backward on the slowest rank, mean of the steady traced iterations, over
  the same figure of the compute-alone runs; forward: the forward passes alone, likewise;
- charged: the simulator's compute busy time less its updates, over the forward + backward
  it was given, when it prices the strategy as `bench sim --from-bench-dp` prices a
  `dp-paired` round (runtime cost and contention) from the compute-alone run's lockstep step
  (slowest rank's forward + backward + optimizer step, less that step);
- updates: the updates the simulator runs on that compute besides (cadence-dp's per-layer
  updates, DDP's step after the backward), over the same forward + backward;
- the iteration predicted two ways against the one measured: from the strategy's own traced
  compute (`--from-timeline`, the replay) and from the compute-alone run (a `dp-paired` row
  built from the file, one round), both with `results/costs-20261126`.

Run from the repository root:
    python results/compute_alone_check.py FILE... > results/compute-alone-check-DATE.txt
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import cadence.sim.bench_dp as bench_dp
from cadence.bench.dp_timeline import COMPUTE_ALONE, PASSES, alone_mean_s, slowest_mean_s
from cadence.cli import main as cadence_main
from cadence.sim.bench_timeline import steady_iterations

PROFILE = "results/{model}-profile-b32-forward.json"
COSTS = "results/costs-20261126"
RUN_OF = {"ddp": "ddp", "cadence-dp": "cadence"}


def bench_sim(args: list[str], model: str, json_path: Path) -> list[dict[str, Any]]:
    """`cadence bench sim ARGS --json JSON_PATH` on `model`'s profile: its rows (its table
    goes to stderr)."""
    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        profile = PROFILE.format(model=model)
        cadence_main(["bench", "sim", *args, "--profile", profile, "--costs", COSTS,
                      "--json", str(json_path)])  # fmt: skip
    finally:
        sys.stdout = stdout
    return list(json.loads(json_path.read_text())["rows"])


def paired_file(data: dict[str, Any], measured: dict[str, float], out: Path) -> float:
    """A one-round `dp-paired` file whose compute-only turn is the compute-alone run; its
    forward + backward (the compute less the optimizer step) returned."""
    compute = alone_mean_s(data["runs"], (*PASSES, "updates_s"))
    step = alone_mean_s(data["runs"], ("updates_s",))
    cadence = data["runs"]["cadence"]
    row = {
        "model": data["config"]["model"],
        "cap": data["config"]["cap"],
        "compute_s": compute,
        "iteration_s": {"compute": compute, **{RUN_OF[s]: m for s, m in measured.items()}},
        "rounds_s": {"compute": [compute], **{RUN_OF[s]: [m] for s, m in measured.items()}},
        "lockstep_compute_rounds_s": [compute],
        "compute_step_rounds_s": [step],
        "cadence_credit_bytes": cadence["plan"]["credit_bytes"],
        "cadence_plan": {"one_chunk_probe": cadence.get("one_chunk_probe")},
    }
    config = {"workers": data["config"]["workers"], "threshold_mb": data["config"]["threshold_mb"]}
    out.write_text(json.dumps({"config": config, "rows": [row]}))
    return compute - step


def main(paths: list[str]) -> None:
    charged: dict[str, tuple[float, float]] = {}  # strategy -> (busy less updates, updates)
    original = bench_dp.run_strategy

    def capture(setup: Any, strategy: str, *args: Any, **kwargs: Any) -> Any:
        result, rest = original(setup, strategy, *args, **kwargs)
        busy = result.busy_s["w0.compute"]
        charged[strategy] = (busy - result.update_s, result.update_s)
        return result, rest

    bench_dp.run_strategy = capture
    print("| file | alone after / before | strategy | traced / alone | forward | charged "
          "| updates | measured (s) | replay | from alone |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    gaps: dict[str, list[float]] = {s: [] for s in RUN_OF}
    errors: dict[tuple[str, str], list[float]] = {}  # (basis, strategy) -> errors in %
    forwards: dict[str, list[float]] = {s: [] for s in RUN_OF}  # traced over alone
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            data = json.loads(Path(path).read_text())
            model = data["config"]["model"]
            replay = {r["strategy"]: r for r in bench_sim(["--from-timeline", path], model,
                                                         Path(tmp) / "replay.json")}  # fmt: skip
            measured = {s: float(r["measured_s"]) for s, r in replay.items()}
            paired = Path(tmp) / f"{Path(path).stem}-paired.json"
            given = paired_file(data, measured, paired)
            charged.clear()
            priced = {r["strategy"]: r for r in bench_sim(["--from-bench-dp", str(paired)], model,
                                                         Path(tmp) / "priced.json")}  # fmt: skip
            passes_alone = alone_mean_s(data["runs"])
            forward_alone = alone_mean_s(data["runs"], ("forward_s",))
            drift = "-"
            if all(name in data["runs"] for name in COMPUTE_ALONE):
                before, after = (slowest_mean_s(data["runs"][n]["iteration_breakdowns"])
                                 for n in COMPUTE_ALONE)  # fmt: skip
                drift = f"{after / before:.3f}"
            for strategy, run in RUN_OF.items():
                steady = steady_iterations(data["runs"][run])
                traced = slowest_mean_s(steady)
                forward = slowest_mean_s(steady, ("forward_s",))
                forwards[strategy].append(forward / forward_alone)
                busy, updates = (value / given for value in charged[strategy])
                for basis, rows in (("replay", replay), ("from alone", priced)):
                    errors.setdefault((basis, strategy), []).append(rows[strategy]["error"] * 100)
                ratio = traced / passes_alone
                gaps[strategy].append(ratio - busy)
                print(
                    f"| {Path(path).name} | {drift} | {strategy} | {ratio:.3f} | "
                    f"{forward / forward_alone:.3f} | {busy:.3f} | "
                    f"{updates:.3f} | {measured[strategy]:.3f} | "
                    f"{replay[strategy]['error'] * 100:+.1f}% | "
                    f"{priced[strategy]['error'] * 100:+.1f}% |"
                )
    print()
    for (basis, strategy), values in errors.items():
        print(f"{basis}, {strategy}: mean |error| {statistics.mean(map(abs, values)):.1f}%, "
              f"worst {max(map(abs, values)):.1f}%, mean signed {statistics.mean(values):+.1f}%, "
              f"low in {sum(v < 0 for v in values)} of {len(values)}")  # fmt: skip
    for strategy, values in forwards.items():
        above = sum(v > 1 for v in values)
        print(f"{strategy}: forward traced / alone, mean over {len(values)} files "
              f"{statistics.mean(values):.3f}, above 1 in {above}")  # fmt: skip
    for strategy, values in gaps.items():
        print(f"{strategy}: traced / alone less charged, mean over {len(values)} files: "
              f"{statistics.mean(values):+.3f} (each: "
              + ", ".join(f"{v:+.3f}" for v in values) + ")")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
