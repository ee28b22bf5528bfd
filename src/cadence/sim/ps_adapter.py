"""Task graph of parameter-server training (`cadence.ps`, BSP), and `simulate_ps`.

The graph is built from the runtime's own plan (`cadence.ps.plan.PSPlan`): which server owns
which slice of each block's parameters, and each slice's priority. What the runtime does, step
by step, per worker and iteration:
- block b's forward waits for block b's parameters of this iteration (its pulls);
- backward pushes each block's gradient as soon as it is ready: one message per slice, to the
  slice's server, on the worker's uplink (one transfer at a time, in the order they become
  ready; a block's slices on one server are one task of their bytes plus a latency per slice);
- a server applies its slices of a block once every worker's gradient for them is in (its
  CPU, one update at a time); the cost per byte is `SimOptions.update_s_per_byte`;
- the parameters of the next iteration come back on the worker's downlink, one transfer at a
  time, **most urgent first** among those ready (the servers' send window and priority queue):
  by the slices' priorities (`layer` / `graph`: block order on the zoo's chains of blocks), in
  arrival order for `fifo` (equal priorities); a worker asks for a slice right after pushing
  it, whatever the order, so the servers' queue decides what goes first among the answers
  ready.

Without a plan given, `simulate_ps` makes the one the runtime makes for a chain of blocks
(`cadence.ps.plan.chain_plan`: slices of at most `slice_bytes` or 1/S of the model, placed
largest first on the least-loaded server). With `colocated`, the last worker shares a host
with the servers: its transfers cost nothing (loopback), as in `cadence train --strategy ps`
with one server, which worker 0 starts. Simulated worker 0 is always a remote one, so the
figures read off it include the wire.

With `shared_hosts`, the servers run on the workers' hosts as `cadence train --strategy ps`
starts them (server s with worker s % W, the workers numbered from the last so that worker 0
hosts a server only when every worker does), and each host's resources are shared:
- a transfer between a worker and the server on its host costs nothing (loopback);
- every other transfer occupies the sender host's uplink and the receiver host's downlink
  (full duplex), each for its latency per slice plus its bytes at the link's rate, one
  transfer at a time per link direction, most urgent first (the slices' priorities); a host's
  uplink carries its worker's pushes and its server's answers, its downlink the answers its
  worker waits for and the pushes its server receives;
- a server's updates run on its host's processor, between its worker's compute tasks.
Each link carries exactly its bytes, so a server's fan-in and fan-out are priced, but the two
ends of a transfer are scheduled independently and it is done when both are: a relaxation of
a flow that holds both at once, which can misplace time when both ends are busy (it is not a
fair-sharing model of TCP flows; it keeps the cost linear in the number of transfers).
"""

from __future__ import annotations

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.ps.config import PSConfig, parse_consistency
from cadence.ps.plan import PSPlan, Transfer, chain_plan
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
DEFAULT_SLICE_BYTES: int = PSConfig.slice_bytes
"""The runtime's slice size unless told."""


def build_ps(
    profile: Profile,
    *,
    workers: int,
    plan: PSPlan,
    link: AlphaBeta,
    iterations: int,
    colocated: bool,
    options: SimOptions,
    name: str = "ps",
    shared_hosts: bool = False,
) -> Built:
    """Graph of `options.warmup_iterations + iterations` BSP iterations of `plan`."""
    if shared_hosts:
        return _build_shared(
            profile, workers=workers, plan=plan, link=link, iterations=iterations,
            options=options, name=name,
        )  # fmt: skip
    costs = block_costs(profile, options.calibrate_compute)
    nb = len(costs.forward_s)
    steps = backward_steps(nb)
    servers = plan.servers
    by_block = _by_block(plan, nb)
    blocks = sorted(by_block)
    graph = TaskGraph()
    compute = [graph.resource(f"w{w}.compute", STREAM, worker=w) for w in range(workers)]
    up = [graph.resource(f"w{w}.up", STREAM, worker=w) for w in range(workers)]
    down = [graph.resource(f"w{w}.down", STREAM, worker=w) for w in range(workers)]
    cpus = [graph.resource(f"s{s}.cpu", STREAM, worker=0) for s in range(servers)]
    graph.resource("w0.nic", LINK, bytes_per_s=1.0, worker=0)  # the metrics expect one

    def wire(w: int, t: Transfer) -> float:
        if colocated and w == workers - 1:
            return 0.0
        return t.messages * link.alpha_for("p2p") + t.nbytes * link.beta_s_per_byte

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
            for b in reversed(blocks):  # gradients in backward order
                for t in by_block[b]:
                    pushes[w, b, t.server] = graph.add(
                        f"push {b}", "push", resources=(up[w],), duration_s=wire(w, t),
                        deps=[done.weight_grad[b]], worker=w, iteration=it,
                    )  # fmt: skip
        gates = [[[] for _ in range(nb)] for _ in range(workers)]
        for b in reversed(blocks):
            for t in by_block[b]:
                update = graph.add_work(
                    f"update {b}", "update", cpus[t.server], t.nbytes * options.update_s_per_byte,
                    deps=[pushes[w, b, t.server] for w in range(workers)], iteration=it,
                )  # fmt: skip
                for w in range(workers):
                    asked = pushes[w, b, t.server]  # every order asks right after the push
                    # fifo: equal priorities, so the earliest ready goes first (arrival order)
                    gates[w][b].append(
                        graph.add(
                            f"pull {b}",
                            "pull",
                            resources=(down[w],),
                            duration_s=wire(w, t),
                            deps=[update, asked],
                            priority=t.priority,
                            worker=w,
                            iteration=it,
                        )  # fmt: skip
                    )
    taken = add_input(graph, costs, stream=compute[0], worker=0, iteration=total, after=prev[0])
    marker = graph.add(
        "next", "marker", resources=(compute[0],), deps=[taken, *gates[0][0]], iteration=total
    )
    starts.append(marker)
    return Built(graph, tuple(starts), options.warmup_iterations, name, workers)


def _by_block(plan: PSPlan, blocks: int) -> dict[int, list[Transfer]]:
    """The plan's transfers of each block that has any."""
    by_block: dict[int, list[Transfer]] = {}
    for t in plan.transfers():
        if t.block >= blocks:
            raise UserError(
                f"the parameter-server plan has blocks the profile's {blocks} do not: make the "
                "plan from the profiled model"
            )
        by_block.setdefault(t.block, []).append(t)
    return by_block


def server_hosts(servers: int, workers: int) -> list[int]:
    """The worker whose host runs each server under `shared_hosts`: the runtime's s % W,
    with the workers numbered from the last (worker 0 is remote to server 0)."""
    return [workers - 1 - s % workers for s in range(servers)]


def host_bytes(plan: PSPlan, workers: int, host: int = 0) -> tuple[int, int]:
    """Bytes one iteration sends and receives on `host`'s link under `shared_hosts`: its
    worker's pushes and pulls to and from other hosts' servers, and its server's answers to
    and pushes from the other workers."""
    where = server_hosts(plan.servers, workers)
    sent = received = 0
    for t in plan.transfers():
        if where[t.server] == host:  # its server's traffic with the W - 1 other workers
            sent += (workers - 1) * t.nbytes
            received += (workers - 1) * t.nbytes
        else:  # its worker's push out and pull back
            sent += t.nbytes
            received += t.nbytes
    return sent, received


def _build_shared(
    profile: Profile,
    *,
    workers: int,
    plan: PSPlan,
    link: AlphaBeta,
    iterations: int,
    options: SimOptions,
    name: str,
) -> Built:
    """`build_ps` with the servers on the workers' hosts (`shared_hosts`, module doc)."""
    costs = block_costs(profile, options.calibrate_compute)
    nb = len(costs.forward_s)
    steps = backward_steps(nb)
    by_block = _by_block(plan, nb)
    blocks = sorted(by_block)
    host = server_hosts(plan.servers, workers)
    graph = TaskGraph()
    compute = [graph.resource(f"w{w}.compute", STREAM, worker=w) for w in range(workers)]
    up = [graph.resource(f"w{w}.up", STREAM, worker=w) for w in range(workers)]
    down = [graph.resource(f"w{w}.down", STREAM, worker=w) for w in range(workers)]
    graph.resource("w0.nic", LINK, bytes_per_s=1.0, worker=0)  # the metrics expect one

    def transfer(w: int, t: Transfer, deps: list[int], it: int, out: bool) -> list[int]:
        """Worker `w`'s push of `t` to its server (`out`) or the server's answer back: a task
        on the sender host's uplink and one on the receiver host's downlink, each tagged with
        the host whose link it occupies (the transfer is done when both are)."""
        label, kind = (f"push {t.block}", "push") if out else (f"pull {t.block}", "pull")
        h = host[t.server]
        if h == w:  # loopback
            return [graph.add(label, kind, deps=deps, worker=w, iteration=it)]
        seconds = t.messages * link.alpha_for("p2p") + t.nbytes * link.beta_s_per_byte
        (src, dst) = (w, h) if out else (h, w)
        return [
            graph.add(
                label, kind, resources=(res[r],), duration_s=seconds, deps=deps,
                priority=t.priority, worker=r, iteration=it,
            )  # fmt: skip
            for res, r in ((up, src), (down, dst))
        ]

    total = options.warmup_iterations + iterations
    starts: list[int] = []
    prev: list[int | None] = [None] * workers
    gates: list[list[list[int]]] = [[[] for _ in range(nb)] for _ in range(workers)]
    for it in range(total):
        pushes: dict[tuple[int, int, int], list[int]] = {}
        for w in range(workers):
            done = add_compute_iteration(
                graph, costs, stream=compute[w], worker=w, iteration=it, after=prev[w],
                gates=gates[w], steps=steps,
            )  # fmt: skip
            prev[w] = done.last
            if w == 0:
                starts.append(done.forward[0])
            for b in reversed(blocks):  # gradients in backward order
                for t in by_block[b]:
                    deps = [done.weight_grad[b]]
                    pushes[w, b, t.server] = transfer(w, t, deps, it, True)
        gates = [[[] for _ in range(nb)] for _ in range(workers)]
        for b in reversed(blocks):
            for t in by_block[b]:
                h = host[t.server]
                update = graph.add_work(
                    f"update {b}", "update", compute[h], t.nbytes * options.update_s_per_byte,
                    deps=[d for w in range(workers) for d in pushes[w, b, t.server]], worker=h,
                    iteration=it,
                )  # fmt: skip
                for w in range(workers):
                    deps = [update, *pushes[w, b, t.server]]
                    gates[w][b] += transfer(w, t, deps, it, False)
    taken = add_input(graph, costs, stream=compute[0], worker=0, iteration=total, after=prev[0])
    marker = graph.add(
        "next", "marker", resources=(compute[0],), deps=[taken, *gates[0][0]], iteration=total
    )
    starts.append(marker)
    return Built(graph, tuple(starts), options.warmup_iterations, name, workers)


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
    plan: PSPlan | None = None,
    slice_bytes: int = DEFAULT_SLICE_BYTES,
    shared_hosts: bool = False,
) -> SimResult:
    """Predict BSP parameter-server training of `profile`'s model: `workers` workers and
    `servers` servers joined by `link` (an `AlphaBeta`, or bytes/s), transfers in `priority`
    order (fifo, layer or graph; `+net` is accepted and changes nothing here: one flow per
    link direction has nothing to overtake at the switch). `plan`: the runtime's `PSPlan`
    (its servers and priorities then replace `servers` and `priority`); None: the plan the
    runtime makes for the profile's chain of blocks with `slice_bytes`. `shared_hosts`: the
    servers run on the workers' hosts and share their links and processors (module doc;
    `colocated` is then implied). `iteration_s` is the mean period of `iterations` iterations
    after the warm-up ones."""
    order = priority.removesuffix("+net")
    if order not in ORDERS:
        raise UserError(f"unknown priority '{priority}': choose one of {', '.join(ORDERS)}")
    if workers < 1 or servers < 1 or iterations < 1:
        raise UserError("workers, servers and iterations must be at least 1")
    if (colocated or shared_hosts) and workers < 2:
        raise UserError("colocated servers need at least 2 workers (one remote)")
    options = options or SimOptions()
    costs = block_costs(profile, options.calibrate_compute)
    if plan is None:
        plan = chain_plan(costs.param_bytes, servers, order, slice_bytes=slice_bytes)
    if parse_consistency(plan.consistency)[0] != "bsp":
        raise UserError(
            f"the simulator models bsp parameter servers only (the plan keeps {plan.consistency})"
        )
    built = build_ps(
        profile, workers=workers, plan=plan, link=link_model(link), iterations=iterations,
        colocated=colocated, options=options, name=f"ps-{order}", shared_hosts=shared_hosts,
    )  # fmt: skip
    return analyse(built, run(built.graph), sum(costs.param_bytes))
