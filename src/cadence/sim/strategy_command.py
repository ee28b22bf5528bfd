"""`cadence plan strategies` (rank every strategy for one cluster) and `cadence plan map`
(the best strategy over a grid of cluster sizes and bandwidths, drawn as a picture)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.sim.command import accumulation_note, setup_from, sim_options
from cadence.sim.metrics import write_text
from cadence.sim.strategies import Candidate, best_fitting, rank_strategies, why


def table_lines(rows: Sequence[Candidate], memory_limit: int | None) -> list[str]:
    width = max([38, *(len(c.setting) + 2 for c in rows)])
    lines = [
        f"{'strategy':<14}{'setting':<{width}}{'iter ms':>9}{'x ddp':>7}{'MiB/worker':>12}"
        f"{'MB wire':>9}  method"
    ]
    ddp = next(c for c in rows if c.strategy == "ddp").iteration_s
    for c in rows:
        mark = "" if c.row(memory_limit)["fits"] else "  (exceeds memory limit)"
        lines.append(
            f"{c.strategy:<14}{c.setting:<{width}}{c.iteration_s * 1e3:>9.1f}"
            f"{c.iteration_s / ddp:>7.2f}{c.memory_bytes / 2**20:>12.1f}"
            f"{c.wire_bytes / 1e6:>9.1f}  {c.method}{mark}"
        )
    return lines


def plan_strategies_command(args: Any) -> int:
    """Rank every strategy for one model, cluster size and bandwidth; print and save."""
    limit = args.memory_limit
    options = sim_options(args)
    setup = setup_from(args)
    rows = rank_strategies(setup, args.model, options, limit)
    print(setup.description + accumulation_note(options))
    for line in table_lines(rows, limit):
        print(line)
    print(why(rows, limit))
    if args.json:
        data = {
            "model": args.model,
            "setup": setup.description,
            "memory_limit_bytes": limit,
            "rows": [c.row(limit) for c in rows],
            "why": why(rows, limit),
        }
        write_text(args.json, json.dumps(data, indent=2) + "\n")
    return 0


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"{what} takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 2:
        raise UserError(f"{what} needs worker counts >= 2, got {text!r}")
    return values


def plan_map_command(args: Any) -> int:
    """Best strategy for every (workers, bandwidth) cell: a table, a JSON file and a picture."""
    from cadence.netem import format_bandwidth, parse_bandwidth
    from cadence.sim.parallelism_map import draw_map

    limit = args.memory_limit
    options = sim_options(args)
    workers = _int_list(args.workers, "--workers")
    bandwidths = [b.strip() for b in args.bandwidths.split(",") if b.strip()]
    bps = [parse_bandwidth(b) for b in bandwidths]  # bad units: a one-line UserError
    base = setup_from(args, workers[0], bandwidths[0])
    cells: list[dict[str, Any]] = []
    print(f"{args.model}: best strategy per cell (x ddp = its time / ddp's)")
    for n in workers:
        for text, rate in zip(bandwidths, bps, strict=True):
            link = AlphaBeta.from_bandwidth(rate * args.payload_fraction, alpha_s=args.latency)
            setup = dataclasses.replace(base, world_size=n, link=link)
            rows = rank_strategies(setup, args.model, options, limit)
            best = best_fitting(rows, limit)
            ddp = next(c for c in rows if c.strategy == "ddp")
            cell = {
                "workers": n,
                "bandwidth": format_bandwidth(rate),
                "best": None if best is None else best.row(limit),
                "ddp_iteration_s": ddp.iteration_s,
                "rows": [c.row(limit) for c in rows],
            }
            cells.append(cell)
            name = "nothing fits" if best is None else f"{best.strategy} ({best.setting})"
            ratio = "" if best is None else f" {best.iteration_s / ddp.iteration_s:.2f}x ddp"
            print(f"  {n:>4} workers, {text:>8}: {name}{ratio}")
    data = {
        "model": args.model,
        "setup": base.description,
        "batch_per_worker": base.profile.batch_size,
        "grad_accum": options.grad_accum,
        "memory_limit_bytes": limit,
        "cells": cells,
    }
    if args.json:
        write_text(args.json, json.dumps(data, indent=2) + "\n")
        print(f"table: {args.json}")
    if args.png:
        draw_map(data, args.png)
        print(f"picture: {args.png}")
    return 0
