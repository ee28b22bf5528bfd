"""Task graph of parameter-server training (`cadence.ps`, BSP), and `simulate_ps`.

The graph is built from the runtime's own plan (`cadence.ps.plan.PSPlan`): which server owns
which slice of each block's parameters, and each slice's priority. What the runtime does, step
by step, per worker and iteration:
- block b's forward waits for block b's parameters of this iteration (its pulls);
- backward pushes each block's gradient as soon as it is ready: one message per slice, to the
  slice's server, on the worker's uplink (one transfer at a time, in the order they become
  ready: a block's parameters in the order their gradients arrive, `PSPlan.slice_transfers`);
- a server applies a slice once every worker's gradient for it is in (its CPU, one update at
  a time), so a block's first slices come back while its last are still being pushed; the
  cost of a slice is what the runtime's server measured (`serving`: its messages, their
  bytes and the update, `cadence.ps.serving_cost`), or without it the optimizer's arithmetic
  (`SimOptions.update_s_per_byte` per byte);
- the parameters of the next iteration come back on the worker's downlink, one transfer at a
  time, **most urgent first** among those ready (the servers' send window and priority queue):
  by the slices' priorities (`layer` / `graph`: block order on the zoo's chains of blocks), in
  arrival order for `fifo` (equal priorities); a worker asks for a slice right after pushing
  it, whatever the order, so the servers' queue decides what goes first among the answers
  ready.

Without a plan given, `simulate_ps` makes the one the runtime makes for the model's
parameters (`cadence.ps.plan.layout_plan`: slices of at most `slice_bytes` or 1/S of the
model, placed largest first on the least-loaded server), or, without the model's layout, for
one parameter per block (`chain_plan`), which sends each block in one message per server.
With `colocated`, the last worker shares a host with the servers: its transfers cost nothing
(loopback), as in `cadence train --strategy ps` with one server, which worker 0 starts.
Simulated worker 0 is always a remote one, so the figures read off it include the wire.

The runtime's messages travel over ZeroMQ, not gloo: a `cadence calibrate` link prices them at
its rate without its alphas, which are gloo's calls' fixed costs (`AlphaBeta.outside_gloo`);
what a message costs the server to handle is the serving cost measured on the runtime.

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

Folded (`fold`, shared hosts with one server per worker): W hosts cost about W x S transfers
per iteration, so a large cluster is simulated by a smaller one standing for it. Servers that
own the same blocks in the same number of slices (`alike_servers`; the slices of one parameter
differ by at most an element) are grouped, the largest groups halved until there are at least
`FOLD_HOSTS` (or W, and then every group is one server and the graph is the full one), and
each group becomes one host whose server owns the group's mean share (a block's slices on
one server are then one transfer). Each host's links carry
the bytes and messages, and its processor the updates, of a host of the full cluster whose
server is in its group: a worker's transfer to a host moves all its group's bytes on the
worker's link, and the host's end of it (W - 1) / (H - 1) times one server's share, H hosts
standing for W workers. What is lost is the order of the transfers within a group and the
spread of the W workers' timings, so it is an estimate of the iteration time: on the zoo's
vgg16 and resnet32 from 64 to 256 workers at 1 and 10 Gbit/s it is within 2% of the full
simulation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import ParamInfo
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.ps import plan as ps_plan
from cadence.ps.config import PSConfig, parse_consistency
from cadence.ps.plan import PSPlan, Transfer, chain_plan
from cadence.ps.serving_cost import ServingCost
from cadence.sim.compute import (
    BlockCosts,
    add_compute_iteration,
    add_input,
    backward_steps,
    block_costs,
    link_model,
    param_blocks,
)
from cadence.sim.dp_adapter import Built
from cadence.sim.engine import run
from cadence.sim.graph import LINK, STREAM, TaskGraph
from cadence.sim.metrics import SimResult, analyse
from cadence.sim.options import SimOptions

ORDERS = ("fifo", "layer", "graph")
DEFAULT_SLICE_BYTES: int = PSConfig.slice_bytes
"""The runtime's slice size unless told."""
FOLD_HOSTS = 32
"""The folded cluster's least number of hosts (module doc): groups of alike servers are
halved until there are as many (or one per worker)."""


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
    fold: bool = False,
    arrival_order: Sequence[int] | None = None,
    serving: ServingCost | None = None,
) -> Built:
    """Graph of `options.warmup_iterations + iterations` BSP iterations of `plan` (its
    parameters pushed in `arrival_order`, `PSPlan.slice_transfers`); with `shared_hosts` and
    `fold`, of the folded cluster (module doc). Each slice's update costs its server what
    `serving` measured (`serving_s`)."""
    serve_s = serving_s(serving, options.update_s_per_byte, workers)
    if shared_hosts:
        return _build_shared(
            profile, workers=workers, plan=plan, link=link, iterations=iterations,
            options=options, name=name, fold=fold, arrival_order=arrival_order,
            serve_s=serve_s,
        )  # fmt: skip
    costs = block_costs(profile, options.calibrate_compute)
    nb = len(costs.forward_s)
    steps = backward_steps(nb)
    servers = plan.servers
    by_block = _by_block(plan.slice_transfers(arrival_order), nb)
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
                for i, t in enumerate(by_block[b]):
                    pushes[w, b, i] = graph.add(
                        f"push {b}", "push", resources=(up[w],), duration_s=wire(w, t),
                        deps=[done.weight_grad[b]], worker=w, iteration=it,
                    )  # fmt: skip
        gates = [[[] for _ in range(nb)] for _ in range(workers)]
        for b in reversed(blocks):
            for i, t in enumerate(by_block[b]):
                update = graph.add_work(
                    f"update {b}", "update", cpus[t.server], serve_s(t.nbytes),
                    deps=[pushes[w, b, i] for w in range(workers)], iteration=it,
                )  # fmt: skip
                for w in range(workers):
                    asked = pushes[w, b, i]  # every order asks right after the push
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


def _by_block(transfers: Sequence[Transfer], blocks: int) -> dict[int, list[Transfer]]:
    """`transfers` (a plan's) of each block that has any, in their order."""
    by_block: dict[int, list[Transfer]] = {}
    for t in transfers:
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


@dataclass(frozen=True)
class Leg:
    """One block's traffic between a worker and one simulated host's server, each way, under
    `shared_hosts`: a `Transfer` of the plan, or (folded) those of a group of alike servers."""

    block: int
    host: int
    """The simulated host whose server owns it."""
    priority: int
    worker_s: float
    """Seconds on the worker's link (uplink for the push, downlink for the answer)."""
    server_s: float
    """Seconds on the server host's link per simulated worker (downlink for the push,
    uplink for the answer)."""
    own_s: float
    """Seconds on the link of a worker on the server's own host (0: loopback)."""
    update_s: float
    """The server's update of it."""


def serving_s(
    serving: ServingCost | None, update_s_per_byte: float, workers: int
) -> Callable[[float], float]:
    """Seconds a server's processor spends on a slice of `nbytes` per step of `workers`
    workers: what `serving` measured on the runtime (its messages, their bytes and the
    update, `cadence.ps.serving_cost`), or without it the optimizer's arithmetic alone."""
    if serving is None:
        return lambda nbytes: nbytes * update_s_per_byte
    return lambda nbytes: serving.slice_s(nbytes, workers)


def plan_legs(
    plan: PSPlan,
    workers: int,
    link: AlphaBeta,
    serve_s: Callable[[float], float],
    arrival_order: Sequence[int] | None = None,
) -> dict[int, list[Leg]]:
    """Per block, the plan's slices (`PSPlan.slice_transfers`) with the servers on the
    workers' hosts."""
    host = server_hosts(plan.servers, workers)
    legs: dict[int, list[Leg]] = {}
    for t in plan.slice_transfers(arrival_order):
        seconds = t.messages * link.alpha_for("p2p") + t.nbytes * link.beta_s_per_byte
        leg = Leg(t.block, host[t.server], t.priority, seconds, seconds, 0.0, serve_s(t.nbytes))
        legs.setdefault(t.block, []).append(leg)
    return legs


def alike_servers(plan: PSPlan) -> list[list[int]]:
    """`plan`'s servers in groups owning the same blocks in the same number of slices at the
    same priorities (their bytes then differ by at most a few elements per slice), the
    groups in order of their highest server."""
    owned: dict[int, list[tuple[int, int, int]]] = {s: [] for s in range(plan.servers)}
    for t in plan.transfers():
        owned[t.server].append((t.block, t.messages, t.priority))
    groups: dict[tuple[tuple[int, int, int], ...], list[int]] = {}
    for server, what in owned.items():
        groups.setdefault(tuple(what), []).append(server)
    return sorted(groups.values(), key=lambda g: -g[-1])


def folded_legs(
    plan: PSPlan,
    workers: int,
    link: AlphaBeta,
    serve_s: Callable[[float], float],
    arrival_order: Sequence[int] | None = None,
) -> tuple[int, dict[int, list[Leg]]]:
    """The hosts of the folded cluster (`folded`, module doc) and, per block, their legs.

    Host h stands for the hosts of the h-th group of `alike_servers`, its server for one of
    the group's: its j-th slice of a block stands for the j-th of each of the group's servers
    (in push order, `PSPlan.slice_transfers`) and owns their mean bytes (its update); a
    worker's leg to it moves all of them on the worker's link (one slice to each of the
    group's servers), and the host's link takes (workers - 1) / (hosts - 1) workers' share of
    one server per simulated worker, so that every host's link carries the bytes and messages
    of a host of the full cluster whose server is in its group. A worker on the host itself
    sends and receives the shares of the group's other servers on its own link only. Groups
    of one server give the full simulation's legs."""
    groups = alike_servers(plan)
    while len(groups) < min(workers, FOLD_HOSTS):  # the largest group in two
        big = max(groups, key=len)
        groups.remove(big)
        groups += [big[: len(big) // 2], big[len(big) // 2 :]]
    groups.sort(key=lambda g: -g[-1])  # the host of server W - 1 first, as `server_hosts`
    hosts = len(groups)
    fan = (workers - 1) / (hosts - 1)
    where = {s: h for h, group in enumerate(groups) for s in group}
    # (block, host, j) -> [bytes, messages, priority], in the order the first is pushed
    sums: dict[tuple[int, int, int], list[int]] = {}
    nth: dict[tuple[int, int], int] = {}  # (block, server) -> slices of it seen
    for t in plan.slice_transfers(arrival_order):
        j = nth.get((t.block, t.server), 0)
        nth[t.block, t.server] = j + 1
        got = sums.setdefault((t.block, where[t.server], j), [0, 0, t.priority])
        got[0] += t.nbytes
        got[1] += t.messages
    legs: dict[int, list[Leg]] = {}
    for (block, h, _), (nbytes, messages, priority) in sums.items():
        size = len(groups[h])
        seconds = messages * link.alpha_for("p2p") + nbytes * link.beta_s_per_byte
        one = seconds / size
        leg = Leg(
            block, h, priority, seconds, fan * one, (size - 1) * one,
            serve_s(nbytes / size),
        )  # fmt: skip
        legs.setdefault(block, []).append(leg)
    return hosts, legs


def _build_shared(
    profile: Profile,
    *,
    workers: int,
    plan: PSPlan,
    link: AlphaBeta,
    iterations: int,
    options: SimOptions,
    name: str,
    fold: bool = False,
    arrival_order: Sequence[int] | None = None,
    serve_s: Callable[[float], float],
) -> Built:
    """`build_ps` with the servers on the workers' hosts (`shared_hosts`, module doc); with
    `fold`, the folded cluster standing for them."""
    costs = block_costs(profile, options.calibrate_compute)
    nb = len(costs.forward_s)
    steps = backward_steps(nb)
    _by_block(plan.transfers(), nb)  # checks the plan's blocks
    if fold:
        workers, by_block = folded_legs(plan, workers, link, serve_s, arrival_order)
    else:
        by_block = plan_legs(plan, workers, link, serve_s, arrival_order)
    blocks = sorted(by_block)
    graph = TaskGraph()
    compute = [graph.resource(f"w{w}.compute", STREAM, worker=w) for w in range(workers)]
    up = [graph.resource(f"w{w}.up", STREAM, worker=w) for w in range(workers)]
    down = [graph.resource(f"w{w}.down", STREAM, worker=w) for w in range(workers)]
    graph.resource("w0.nic", LINK, bytes_per_s=1.0, worker=0)  # the metrics expect one

    def transfer(w: int, t: Leg, deps: list[int], it: int, out: bool) -> list[int]:
        """Worker `w`'s push of `t` to its server (`out`) or the server's answer back: a task
        on the sender host's uplink and one on the receiver host's downlink, each tagged with
        the host whose link it occupies (the transfer is done when both are)."""
        label, kind = (f"push {t.block}", "push") if out else (f"pull {t.block}", "pull")
        h = t.host
        if h == w:
            if t.own_s == 0.0:  # loopback
                return [graph.add(label, kind, deps=deps, worker=w, iteration=it)]
            ends = [((up if out else down)[w], t.own_s, w)]
        elif out:
            ends = [(up[w], t.worker_s, w), (down[h], t.server_s, h)]
        else:
            ends = [(up[h], t.server_s, h), (down[w], t.worker_s, w)]
        return [
            graph.add(
                label,
                kind,
                resources=(res,),
                duration_s=seconds,
                deps=deps,
                priority=t.priority,
                worker=r,
                iteration=it,
            )  # fmt: skip
            for res, seconds, r in ends
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
                for i, t in enumerate(by_block[b]):
                    deps = [done.weight_grad[b]]
                    pushes[w, b, i] = transfer(w, t, deps, it, True)
        gates = [[[] for _ in range(nb)] for _ in range(workers)]
        for b in reversed(blocks):
            for i, t in enumerate(by_block[b]):
                update = graph.add_work(
                    f"update {b}", "update", compute[t.host], t.update_s,
                    deps=[d for w in range(workers) for d in pushes[w, b, i]], worker=t.host,
                    iteration=it,
                )  # fmt: skip
                for w in range(workers):
                    deps = [update, *pushes[w, b, i]]
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
    fold: bool = False,
    params: Sequence[ParamInfo] | None = None,
    arrival_order: Sequence[int] | None = None,
    serving: ServingCost | None = None,
) -> SimResult:
    """Predict BSP parameter-server training of `profile`'s model: `workers` workers and
    `servers` servers joined by `link` (an `AlphaBeta`, or bytes/s), transfers in `priority`
    order (fifo, layer or graph; `+net` is accepted and changes nothing here: one flow per
    link direction has nothing to overtake at the switch). `plan`: the runtime's `PSPlan`
    (its servers and priorities then replace `servers` and `priority`); None: the plan the
    runtime makes for the model's parameters `params` (its layout, `ModelFacts.params`; None:
    one per block) with `slice_bytes`. `arrival_order`: the order the plan's parameters'
    gradients arrive in backward, which is the order they are pushed
    (`ModelFacts.arrival_order`; None: last registered first). `shared_hosts`: the
    servers run on the workers' hosts and share their links and processors (module doc;
    `colocated` is then implied). `iteration_s` is the mean period of `iterations` iterations
    after the warm-up ones. `fold` (with `shared_hosts`): simulate one host per group of
    alike servers, standing for all (folded, module doc): an estimate of `iteration_s`; the
    other figures are the folded cluster's. `serving`: what a server's processor spends per
    message and byte (`cadence.ps.serving_cost`, `Profile.ps_serving_s`), charged per slice
    and step on its host; None: the optimizer's arithmetic alone (`options.update_s_per_byte`)."""
    order = priority.removesuffix("+net")
    if order not in ORDERS:
        raise UserError(f"unknown priority '{priority}': choose one of {', '.join(ORDERS)}")
    if workers < 1 or servers < 1 or iterations < 1:
        raise UserError("workers, servers and iterations must be at least 1")
    if (colocated or shared_hosts) and workers < 2:
        raise UserError("colocated servers need at least 2 workers (one remote)")
    if fold and not shared_hosts:
        raise UserError("fold needs shared_hosts (the servers on the workers' hosts)")
    options = options or SimOptions()
    costs = block_costs(profile, options.calibrate_compute)
    if plan is None:
        plan = runtime_plan(costs, servers, order, slice_bytes, params)
        if params is None:  # one parameter per block: the model's order means nothing here
            arrival_order = None
    if fold and plan.servers != workers:
        raise UserError("fold needs one server per worker host (servers = workers)")
    if parse_consistency(plan.consistency)[0] != "bsp":
        raise UserError(
            f"the simulator models bsp parameter servers only (the plan keeps {plan.consistency})"
        )
    built = build_ps(
        # ZeroMQ messages: a calibration's alphas are gloo's calls' (the serving cost measured
        # on the runtime prices each message's processing).
        profile, workers=workers, plan=plan, link=link_model(link).outside_gloo(),
        iterations=iterations, colocated=colocated, options=options, name=f"ps-{order}",
        shared_hosts=shared_hosts, fold=fold, arrival_order=arrival_order, serving=serving,
    )  # fmt: skip
    return analyse(built, run(built.graph), sum(costs.param_bytes))


def runtime_plan(
    costs: BlockCosts,
    servers: int,
    order: str,
    slice_bytes: int = DEFAULT_SLICE_BYTES,
    params: Sequence[ParamInfo] | None = None,
) -> PSPlan:
    """The plan `cadence train --strategy ps` makes for the profiled model: of its
    parameters `params` (each in its block, `param_blocks`), or without them of one
    parameter per block."""
    if params is None:
        return chain_plan(costs.param_bytes, servers, order, slice_bytes=slice_bytes)
    blocks = param_blocks(costs, params)
    layout = [
        ps_plan.ParamInfo(p.index, p.name, p.numel, blocks[p.index])
        for p in sorted(params, key=lambda p: p.index)
    ]
    return ps_plan.layout_plan(layout, servers, order, slice_bytes=slice_bytes)
