"""Task graph of parameter-server training (`cadence.ps`, BSP), and `simulate_ps`.

What the runtime does, step by step, per worker and iteration:
- block b's forward waits for block b's parameters of this iteration (its pulls);
- backward pushes each block's gradient as soon as it is ready: a transfer on the worker's
  uplink (one at a time, in the order they become ready);
- a server applies a slice's update once every worker's gradient for it is in (its CPU, one
  update at a time); the cost per byte is `SimOptions.update_s_per_byte`;
- the parameters of the next iteration come back on the worker's downlink, one transfer at a
  time, **most urgent first** among those ready (the servers' send window and priority queue):
  by block order for `layer` / `graph` (on the zoo's chains of blocks they are equal), in
  arrival order for `fifo`; a worker asks for a block right after pushing it, whatever the
  order, so the servers' queue decides what goes first among the answers ready.

Each block's bytes are split evenly over the servers (the plan balances servers by bytes).
With `colocated`, the last worker shares a host with the servers: its transfers cost nothing
(loopback), as in `cadence train --strategy ps`, where worker 0 starts the server. Simulated
worker 0 is always a remote one, so the figures read off it include the wire.
"""

from __future__ import annotations

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.compute import (
    add_compute_iteration,
    add_input,
    backward_steps,
    block_costs,
    link_model,
)
from cadence.sim.dp_adapter import Built
from cadence.sim.engine import run
from cadence.sim.graph import LINK, STREAM, TaskGraph
from cadence.sim.metrics import SimResult, analyse
from cadence.sim.options import SimOptions

ORDERS = ("fifo", "layer", "graph")


def build_ps(
    profile: Profile,
    *,
    workers: int,
    servers: int,
    link: AlphaBeta,
    priority: str,
    iterations: int,
    colocated: bool,
    options: SimOptions,
) -> Built:
    """Graph of `options.warmup_iterations + iterations` BSP iterations."""
    costs = block_costs(profile, options.calibrate_compute)
    nb = len(costs.forward_s)
    steps = backward_steps(nb)
    blocks = [b for b in range(nb) if costs.param_bytes[b] > 0]
    graph = TaskGraph()
    compute = [graph.resource(f"w{w}.compute", STREAM, worker=w) for w in range(workers)]
    up = [graph.resource(f"w{w}.up", STREAM, worker=w) for w in range(workers)]
    down = [graph.resource(f"w{w}.down", STREAM, worker=w) for w in range(workers)]
    cpus = [graph.resource(f"s{s}.cpu", STREAM, worker=0) for s in range(servers)]
    graph.resource("w0.nic", LINK, bytes_per_s=1.0, worker=0)  # the metrics expect one

    def wire(w: int, nbytes: float) -> float:
        if colocated and w == workers - 1:
            return 0.0
        return link.alpha_for("p2p") + nbytes * link.beta_s_per_byte

    total = options.warmup_iterations + iterations
    starts: list[int] = []
    prev: list[int | None] = [None] * workers
    gates: list[list[list[int]]] = [[[] for _ in range(nb)] for _ in range(workers)]
    for it in range(total):
        pushes: dict[tuple[int, int, int], int] = {}
        for w in range(workers):
            done = add_compute_iteration(
                graph, costs, stream=compute[w], worker=w, iteration=it, after=prev[w],
                gates=gates[w], steps=steps,
            )  # fmt: skip
            prev[w] = done.last
            if w == 0:
                starts.append(done.forward[0])
            for b in sorted(blocks, key=lambda b: -b):  # gradients in backward order
                part = costs.param_bytes[b] / servers
                for s in range(servers):
                    pushes[w, b, s] = graph.add(
                        f"push {b}", "push", resources=(up[w],), duration_s=wire(w, part),
                        deps=[done.weight_grad[b]], worker=w, iteration=it,
                    )  # fmt: skip
        gates = [[[] for _ in range(nb)] for _ in range(workers)]
        for b in sorted(blocks, key=lambda b: -b):
            part = costs.param_bytes[b] / servers
            for s in range(servers):
                update = graph.add_work(
                    f"update {b}", "update", cpus[s], part * options.update_s_per_byte,
                    deps=[pushes[w, b, s] for w in range(workers)], iteration=it,
                )  # fmt: skip
                for w in range(workers):
                    asked = pushes[w, b, s]  # every order asks right after the push
                    # fifo: equal priorities, so the earliest ready goes first (arrival order)
                    rank = 0 if priority == "fifo" else b
                    gates[w][b].append(
                        graph.add(
                            f"pull {b}",
                            "pull",
                            resources=(down[w],),
                            duration_s=wire(w, part),
                            deps=[update, asked],
                            priority=rank,
                            worker=w,
                            iteration=it,
                        )  # fmt: skip
                    )
    taken = add_input(graph, costs, stream=compute[0], worker=0, iteration=total, after=prev[0])
    marker = graph.add(
        "next", "marker", resources=(compute[0],), deps=[taken, *gates[0][0]], iteration=total
    )
    starts.append(marker)
    return Built(graph, tuple(starts), options.warmup_iterations, f"ps-{priority}", workers)


def simulate_ps(
    profile: Profile,
    *,
    workers: int,
    servers: int = 1,
    link: AlphaBeta | float,
    priority: str = "graph",
    iterations: int = 2,
    colocated: bool = True,
    options: SimOptions | None = None,
) -> SimResult:
    """Predict BSP parameter-server training of `profile`'s model: `workers` workers and
    `servers` servers joined by `link` (an `AlphaBeta`, or bytes/s), transfers in `priority`
    order (fifo, layer or graph; `+net` is accepted and changes nothing here: one flow per
    link direction has nothing to overtake at the switch). `iteration_s` is the mean period
    of `iterations` iterations after the warm-up ones."""
    order = priority.removesuffix("+net")
    if order not in ORDERS:
        raise UserError(f"unknown priority '{priority}': choose one of {', '.join(ORDERS)}")
    if workers < 1 or servers < 1 or iterations < 1:
        raise UserError("workers, servers and iterations must be at least 1")
    if colocated and workers < 2:
        raise UserError("colocated servers need at least 2 workers (one remote)")
    options = options or SimOptions()
    built = build_ps(
        profile, workers=workers, servers=servers, link=link_model(link), priority=order,
        iterations=iterations, colocated=colocated, options=options,
    )  # fmt: skip
    costs = block_costs(profile, options.calibrate_compute)
    return analyse(built, run(built.graph), sum(costs.param_bytes))
