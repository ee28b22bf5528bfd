"""How far the simulator's cadence-dp plan for vgg16 at 400mbit is from the plan the runtime
really ran, and what the difference is worth in predicted iteration time.

The runtime's plan comes from a recorded dp-timeline run (its `plan`: chunks and issue order,
built from the warm-up's measured gradient ready times). The simulator plans the same
threshold and credit from the profile (`plan_dp`, with the zoo's arrival order) twice: with
one block's gradients tied (`HOOK_SPACING_S` = 0, the default, so priority breaks the tie)
and spaced 1 ns apart in arrival order. All plans are simulated on the same
profile, link and options, so only the plan differs.

Run from the repository root:
    python results/vgg16_issue_order_replay.py [TIMELINE] > results/vgg16-issue-order-DATE.txt

The optimizer step is timed anew on each call (as `cadence simulate` does without a step
given), so compare the figures inside one call.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cadence.sim.api as api
from cadence.dp.plan import DPPlan
from cadence.sim.command import make_setup, run_strategy
from cadence.sim.options import SimOptions

TIMELINE = "results/dp-timeline-vgg16-400mbit-20261124.json"
PROFILE = "results/vgg16-profile-b32-forward.json"


def describe(plan: DPPlan) -> list[str]:
    """One line per chunk in issue order: id, priority, MB, first and last parameter."""
    names = {p.index: p.name for p in plan.params}
    lines = []
    for c in plan.issue_order:
        chunk = plan.chunks[c]
        first, last = names[chunk.segments[0].param], names[chunk.segments[-1].param]
        lines.append(
            f"  chunk {c:2d}  priority {chunk.priority:2d}  {chunk.nbytes / 1e6:5.2f} MB  "
            f"{first} .. {last}"
        )
    return lines


def main_(timeline: str) -> None:
    recorded = json.loads(Path(timeline).read_text())
    run = recorded["runs"]["cadence"]
    runtime_plan = DPPlan.from_json(run["plan"])
    cap = recorded["config"]["cap"]
    setup = make_setup(
        model="vgg16", workers=2, bandwidth=cap, profile_path=PROFILE, echo=lambda _: None
    )
    options = SimOptions()
    replay, _ = run_strategy(setup, "cadence-dp", None, None, 0, options, dp_plan=runtime_plan)
    print(f"# {recorded['command']} ({recorded['date']}); profile {PROFILE}")
    print(f"# {setup.description}; plain SimOptions (no charges): only the plan differs")
    print(
        f"threshold {runtime_plan.threshold_bytes} B, credit {runtime_plan.credit_bytes} B, "
        f"{len(runtime_plan.chunks)} chunks recorded"
    )
    print(f"recorded issue order: {list(runtime_plan.issue_order)}")
    print("recorded plan, in issue order:")
    print("\n".join(describe(runtime_plan)))
    print(f"predicted iteration with the recorded plan: {replay.iteration_s * 1e3:.1f} ms")
    spacing = api.HOOK_SPACING_S  # the default: 0, tied
    for label, space in (("tied", 0.0), ("spaced", 1e-9)):
        api.HOOK_SPACING_S = space
        try:
            result, plan = run_strategy(
                setup,
                "cadence-dp",
                runtime_plan.threshold_bytes,
                runtime_plan.credit_bytes,
                0,
                options,
            )
        finally:
            api.HOOK_SPACING_S = spacing
        assert plan is not None
        same_chunks = [c.segments for c in plan.chunks] == [c.segments for c in runtime_plan.chunks]
        print()
        print(f"## simulator, a block's gradients {label} (spacing {space:g} s)")
        print(f"same chunks as recorded: {same_chunks}")
        print(f"issue order: {list(plan.issue_order)}")
        print(f"same issue order as recorded: {plan.issue_order == runtime_plan.issue_order}")
        agree = 0
        while agree < len(plan.issue_order) and (
            plan.issue_order[agree] == runtime_plan.issue_order[agree]
        ):
            agree += 1
        print(f"first {agree} chunks issued as recorded")
        print("\n".join(describe(plan)))
        print(f"predicted iteration: {result.iteration_s * 1e3:.1f} ms")
        ratio = result.iteration_s / replay.iteration_s
        print(f"with this plan / with the recorded plan: {ratio:.4f}")


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else TIMELINE)
