"""`cadence plan tta`: methods ranked by predicted time to a target loss on one cluster."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cadence.errors import UserError
from cadence.sim.command import accumulation_note, setup_from, sim_options
from cadence.sim.methods import (
    DEFAULT_METHODS,
    Method,
    method_step_s,
    parse_method,
    parse_methods,
    zoo_param_shapes,
)
from cadence.sim.metrics import write_text
from cadence.sim.tta import (
    Row,
    Steps,
    convergence,
    goal,
    load_pilot,
    parse_steps,
    rank,
    table_lines,
    why,
)


def _methods(args: Any, data: dict[str, Steps], user: dict[str, int]) -> list[Method]:
    """The methods asked for (--methods), else the defaults and any other one the pilot has
    figures for; and any the user gave steps for."""
    methods = list(parse_methods(args.methods or ",".join(DEFAULT_METHODS)))
    named = {m.name for m in methods}
    for name in [*([] if args.methods else data), *user]:
        if name not in named:
            methods.append(parse_method(name))
            named.add(name)
    return methods


@dataclass(frozen=True)
class TTAPlan:
    """`cadence plan tta`'s answer."""

    target: float | None
    """The loss the steps are counted to; None where it is DDP's after --target-steps steps,
    beyond the pilot."""
    goal: str
    """The target in words."""
    rows: list[Row]
    """Methods, fastest predicted time to the target first; unranked ones last."""
    why: str
    """One line: why the pick wins."""
    setup: Any
    """The simulated cluster (`cadence.sim.command.Setup`)."""
    options: Any
    """The simulator's options (`SimOptions`)."""
    pilot_batch: int | None
    """The global batch the pilot ran, if it said."""


def plan_tta(args: Any) -> TTAPlan:
    """Rank the methods by steps to the target x predicted seconds per step."""
    target_steps = getattr(args, "target_steps", None)
    if target_steps is not None and target_steps < 1:
        raise UserError(f"--target-steps must be at least 1, got {target_steps}")
    if target_steps is not None and args.pilot is None:
        raise UserError("--target-steps reads ddp's curve from a pilot: give --pilot FILE")
    if args.pilot is None and args.steps_to_target is None:
        raise UserError(
            "plan tta needs convergence data: --pilot FILE (`cadence bench tta` writes one) "
            "or --steps-to-target METHOD=N,..."
        )
    user = parse_steps(args.steps_to_target) if args.steps_to_target else {}
    target, pilot, batch = (
        load_pilot(args.pilot, args.target_loss, target_steps)
        if args.pilot
        else (args.target_loss, {}, None)
    )
    if target is None and target_steps is None:
        raise UserError("give --target-loss: the loss the steps to target are counted to")
    methods = _methods(args, pilot, user)
    options = sim_options(args)
    setup = setup_from(args)
    shapes = None
    if any(m.compression == "powersgd" for m in methods):
        shapes = zoo_param_shapes(args.model)
    overlap = 1 if args.overlap_steps is None else args.overlap_steps  # the runtime's default
    costs = None
    if getattr(args, "loop_costs", None):
        from cadence.sim.loop_costs import loop_costs_for

        batch_size = setup.profile.batch_size * setup.world_size * options.grad_accum
        costs = loop_costs_for(
            args.loop_costs, args.model, methods, setup.world_size, batch_size,
            args.powersgd_start_step,
        )  # fmt: skip
    estimates = [
        method_step_s(
            setup, m, options, shapes=shapes, powersgd_rank=args.powersgd_rank,
            powersgd_start=args.powersgd_start_step, freeze_steps=args.freeze_steps,
            outer_dtype=args.outer_dtype, overlap_steps=overlap,
            loop_overhead_s=costs.overhead_s(m) if costs else None,
        )
        for m in methods
    ]  # fmt: skip
    if costs is not None:  # no step faster than its loop on the loopback, in like conditions
        from cadence.sim.loop_costs import with_floor

        per_host = setup.profile.neighbours + 1
        pairs = zip(estimates, methods, strict=True)
        estimates = [with_floor(e, m, costs, per_host) for e, m in pairs]
    rows = rank(estimates, convergence([m.name for m in methods], pilot, user))
    words = goal(target, target_steps)
    return TTAPlan(target, words, rows, why(rows, words), setup, options, batch)


def plan_tta_command(args: Any) -> int:
    """`plan_tta`, printed (and saved with --json)."""
    plan = plan_tta(args)
    setup, options, target, batch = plan.setup, plan.options, plan.target, plan.pilot_batch
    print(setup.description + accumulation_note(options))
    print(f"assumed: {setup.assumed}")
    planned = setup.profile.batch_size * setup.world_size * options.grad_accum
    print(f"target: {plan.goal}; steps at the pilot's / user's global batch")
    if batch is not None and batch != planned:
        print(
            f"note: the pilot ran a global batch of {batch}, this prediction is for {planned} "
            "(workers x micro-batch x accumulation): its steps may not carry over"
        )
    for line in table_lines(plan.rows):
        print(line)
    print(plan.why)
    if args.json:
        data = {
            "model": args.model,
            "setup": setup.description,
            "target_loss": target,
            "rows": [r.to_json() for r in plan.rows],
            "why": plan.why,
        }
        write_text(args.json, json.dumps(data, indent=2) + "\n")
    return 0
