"""What every adapter shares: per-block costs from a `Profile`, the link model, and one
worker's compute program (forward, loss, backward in a given order) as tasks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import ParamInfo
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.grad_ready import piece_name, split_backward
from cadence.sim.graph import TaskGraph


@dataclass(frozen=True)
class BlockCosts:
    """Per-block compute costs the simulator charges (index = block, forward order)."""

    names: tuple[str, ...]
    """Block names."""
    forward_s: tuple[float, ...]
    """Forward seconds."""
    input_grad_s: tuple[float, ...]
    """Input-gradient seconds."""
    weight_grad_s: tuple[float, ...]
    """Weight-gradient seconds."""
    activation_bytes: tuple[int, ...]
    """Bytes saved for backward by the forward, freed once both gradients are done."""
    param_bytes: tuple[int, ...]
    """Parameter bytes owned by the block (its gradients have the same size)."""
    loss_s: float
    """Loss and its gradient."""
    input_s: float = 0.0
    """The batch's way from host memory to the device before each forward (`Profile.input_s`)."""

    @property
    def compute_s(self) -> float:
        """Compute seconds of one iteration."""
        blocks = sum(self.forward_s) + sum(self.input_grad_s) + sum(self.weight_grad_s)
        return blocks + self.loss_s + self.input_s


def _scales(profile: Profile) -> tuple[float, float]:
    """(forward, gradient) factors that make blocks + loss add up to the measured iteration.

    The per-block gradient timings count work shared by a block's two gradients twice (an
    LSTM's whole backward, a norm's backward before a convolution's); the forward timings do
    not. Where the profile has the whole forward's time, forward blocks are scaled to it and
    gradients to the rest; older profiles get one factor for both."""
    rest = profile.iteration_s - profile.loss_s
    if profile.block_sum_s <= 0 or rest <= 0:
        return 1.0, 1.0
    forward = sum(b.forward_s for b in profile.blocks)
    grads = profile.block_sum_s - forward
    measured = profile.forward_pass_s
    if measured is not None and forward > 0 and grads > 0 and 0 < measured < rest:
        return measured / forward, (rest - measured) / grads
    scale = rest / profile.block_sum_s
    return scale, scale


def block_costs(profile: Profile, calibrate: bool = True) -> BlockCosts:
    """Costs from `profile`. With `calibrate`, block times are scaled so that blocks + loss
    add up to the measured whole iteration (see `_scales`)."""
    if not profile.blocks:
        raise UserError(f"profile of {profile.model!r} has no blocks")
    f, g = _scales(profile) if calibrate else (1.0, 1.0)
    b = profile.blocks
    return BlockCosts(
        names=tuple(x.name for x in b),
        forward_s=tuple(x.forward_s * f for x in b),
        input_grad_s=tuple(x.input_grad_s * g for x in b),
        weight_grad_s=tuple(x.weight_grad_s * g for x in b),
        activation_bytes=tuple(x.activation_bytes for x in b),
        param_bytes=tuple(x.param_bytes for x in b),
        loss_s=profile.loss_s,
        input_s=profile.input_s or 0.0,
    )


def param_blocks(costs: BlockCosts, params: Sequence[ParamInfo]) -> tuple[int, ...]:
    """Block of each parameter (indexed by `ParamInfo.index`).

    Zoo parameters are named `<block>.<...>`, which settles it. Otherwise parameters are taken
    in registration (= forward) order and dealt to blocks by the blocks' parameter bytes. A
    profile whose parameter bytes differ from the plan's is of another model: a UserError.
    """
    total = sum(p.nbytes for p in params)
    if total != sum(costs.param_bytes):
        raise UserError(
            f"profile has {sum(costs.param_bytes)} parameter bytes but the plan has {total}: "
            "the profile is of another model (profile it again with `cadence profile`)"
        )
    index = {name: i for i, name in enumerate(costs.names)}
    by_name = [index.get(p.name.split(".", 1)[0]) for p in params]
    out = [0] * len(params)
    if all(b is not None for b in by_name):
        for p, b in zip(params, by_name, strict=True):
            out[p.index] = int(b)  # type: ignore[arg-type]
        return tuple(out)
    block, room = 0, costs.param_bytes[0]
    for p in sorted(params, key=lambda p: p.index):
        while room <= 0 and block + 1 < len(costs.param_bytes):
            block += 1
            room = costs.param_bytes[block]
        out[p.index] = block
        room -= p.nbytes
    return tuple(out)


def block_params(costs: BlockCosts) -> list[ParamInfo]:
    """One pseudo-parameter per block with parameters, for when no plan names the real ones
    (fp32 assumed; only sizes and blocks matter to the simulator)."""
    return [
        ParamInfo(i, f"{name}.params", nbytes // 4, 4, i)
        for i, (name, nbytes) in enumerate(zip(costs.names, costs.param_bytes, strict=True))
        if nbytes > 0
    ]


def link_model(link: AlphaBeta | float) -> AlphaBeta:
    """`AlphaBeta` as given, or a latency-free link of `link` bytes/s."""
    if isinstance(link, AlphaBeta):
        return link
    if not (isinstance(link, int | float) and link > 0):
        raise UserError(f"link must be an AlphaBeta or a positive bytes/s figure, got {link!r}")
    return AlphaBeta(alpha_s=0.0, beta_s_per_byte=1.0 / float(link))


def cap_link(bps: float, payload_fraction: float, calibrated: AlphaBeta | None = None) -> AlphaBeta:
    """The link of an emulated cap of `bps` bits/s: beta from the share of it that carries data;
    the alphas (per collective) and gamma from `calibrated`, a `cadence calibrate` model of the
    same cluster's links, where given (its beta is that of the cap it was timed at), else
    none."""
    beta = 8.0 / (bps * payload_fraction)
    if calibrated is None:
        return AlphaBeta(alpha_s=0.0, beta_s_per_byte=beta)
    return dataclasses.replace(calibrated, beta_s_per_byte=beta)


def allreduce_flow(model: AlphaBeta, nbytes: int, world_size: int) -> tuple[float, float]:
    """(fixed latency seconds, bytes each NIC moves) of a ring all-reduce of `nbytes`: the
    bandwidth term is shared with concurrent flows, the message and reduction terms are not."""
    terms = model.terms("allreduce", "ring", nbytes, world_size)
    latency = model.alpha_for("allreduce", nbytes) * terms.messages + model.gamma_s_per_byte * (
        terms.reduce_bytes
    )
    return latency, terms.wire_bytes


def broadcast_flow(model: AlphaBeta, nbytes: int, world_size: int) -> tuple[float, float]:
    """(fixed latency seconds, bytes each NIC moves) of gloo's broadcast of `nbytes` (its
    eager binomial tree), as `allreduce_flow` splits an all-reduce."""
    terms = model.terms("broadcast", "binomial_eager", nbytes, world_size)
    return model.alpha_for("broadcast") * terms.messages, terms.wire_bytes


def backward_steps(
    num_blocks: int, weight_order: Sequence[int] | None = None
) -> list[tuple[str, int]]:
    """Order of ("I", b) input-gradient and ("W", b) weight-gradient steps in one backward.

    Ordinary order (`weight_order` None): each block's input gradient then its weight gradient,
    back to front (autograd computes both in one node; the gradients are ready at its end).
    Reordered (cadence.dp's backward reordering): every input gradient first, back to front,
    then the weight gradients in `weight_order`.
    """
    if weight_order is None:
        return [s for b in reversed(range(num_blocks)) for s in (("I", b), ("W", b))]
    if sorted(weight_order) != list(range(num_blocks)):
        raise ValueError(f"weight_order must list every block once, got {list(weight_order)}")
    return [("I", b) for b in reversed(range(num_blocks))] + [("W", b) for b in weight_order]


def reordered_blocks(
    layer_block: Sequence[int], num_blocks: int, k: int | None
) -> list[int] | None:
    """Block order of the weight gradients with backward reordering at layer K (1-based):
    layers K..1 then L..K+1, a block taking the place of its first layer in that order.
    None for ordinary order (no K, or K at least the number of layers)."""
    num_layers = len(layer_block)
    if k is None or k >= num_layers:
        return None
    if k < 1:
        raise ValueError(f"reorder_k must be in 1..{num_layers}, got {k}")
    layers = [*range(k - 1, -1, -1), *range(num_layers - 1, k - 1, -1)]
    order = list(dict.fromkeys(layer_block[layer] for layer in layers))
    return order + [b for b in range(num_blocks) if b not in set(order)]  # parameter-free blocks


@dataclass(frozen=True)
class ComputeIteration:
    """Task ids of one worker's compute in one iteration."""

    forward: tuple[int, ...]
    """Forward task of each block."""
    last: int
    """The last compute task (program order continues from it)."""
    ready: tuple[tuple[int, ...], ...]
    """Per block, the task ending at each of its ready points (`ReadyPoints.shares`)."""

    @property
    def weight_grad(self) -> tuple[int, ...]:
        """Weight-gradient task of each block: the one ending at its last point, when its
        last gradients are ready."""
        return tuple(points[-1] for points in self.ready)


def add_input(
    graph: TaskGraph,
    costs: BlockCosts,
    *,
    stream: int,
    worker: int,
    iteration: int,
    after: int | None,
) -> int | None:
    """The batch taken to the device on `stream` after task `after` (the training loop does it
    before the forward, which may still wait for its parameters); `after` where it costs
    nothing. Adapters put it before their end-of-run marker too, which stands for the next
    iteration's first forward."""
    if costs.input_s <= 0:
        return after
    return graph.add_work(
        "input", "input", stream, costs.input_s, deps=[after], worker=worker, iteration=iteration
    )


def add_accumulation(
    graph: TaskGraph,
    costs: BlockCosts,
    *,
    stream: int,
    worker: int,
    iteration: int,
    after: int | None,
    gates: Sequence[Sequence[int]],
    passes: int,
) -> tuple[int | None, int | None]:
    """Gradient accumulation's first `passes` micro-batches of an iteration on `stream`, after
    task `after`: input, forward (block b waiting for `gates[b]`, as the iteration's first
    forward does), loss and backward each, with no communication. Returns (the first
    forward, the last task); (None, `after`) for no passes. The iteration's last micro-batch
    follows with `add_compute_iteration` (no gates left). Activations are allocated and freed;
    the gradients are counted from the last micro-batch's backward, as without accumulation."""
    first: int | None = None
    prev = after
    nb = len(costs.forward_s)

    def add(name: str, kind: str, seconds: float, deps: list[int | None], mem: int) -> int:
        return graph.add_work(
            name, kind, stream, seconds, deps=deps, worker=worker, iteration=iteration,
            mem_end=mem,
        )  # fmt: skip

    for m in range(passes):
        prev = add_input(graph, costs, stream=stream, worker=worker, iteration=iteration,
                         after=prev)  # fmt: skip
        for b in range(nb):
            own = gates[b] if m == 0 else ()
            prev = add(f"F{b} m{m}", "forward", costs.forward_s[b], [prev, *own],
                       costs.activation_bytes[b])  # fmt: skip
            first = prev if first is None else first
        prev = add(f"loss m{m}", "loss", costs.loss_s, [prev], 0)
        for b in reversed(range(nb)):
            seconds = costs.input_grad_s[b] + costs.weight_grad_s[b]
            prev = add(f"B{b} m{m}", "weight_grad", seconds, [prev], -costs.activation_bytes[b])
    return first, prev


def add_compute_iteration(
    graph: TaskGraph,
    costs: BlockCosts,
    *,
    stream: int,
    worker: int,
    iteration: int,
    after: int | None,
    gates: Sequence[Sequence[int]],
    steps: Sequence[tuple[str, int]],
    shares: Sequence[Sequence[float]] | None = None,
) -> ComputeIteration:
    """Add forward, loss and backward of one iteration on `stream`, in program order after
    task `after`. Block b's forward also waits for `gates[b]` (e.g. its parameters' update).
    Each block's backward is cut at its ready points (`shares[b]`, see
    `cadence.sim.grad_ready`; None: one point per block, its end). Activations are allocated by
    the forward and freed by the block's last backward step; gradients are allocated by the
    weight-gradient step (the adapter frees them)."""

    def add(name: str, kind: str, seconds: float, deps: list[int | None], mem: int) -> int:
        return graph.add_work(
            name, kind, stream, seconds, deps=deps, worker=worker, iteration=iteration, mem_end=mem
        )

    nb = len(costs.forward_s)
    prev = add_input(graph, costs, stream=stream, worker=worker, iteration=iteration, after=after)
    forward = []
    for b in range(nb):
        prev = add(
            f"F{b}", "forward", costs.forward_s[b], [prev, *gates[b]], costs.activation_bytes[b]
        )
        forward.append(prev)
    prev = add("loss", "loss", costs.loss_s, [prev], 0)
    last_step = {b: i for i, (_, b) in enumerate(steps)}
    joined = {b for (k, b), (k2, b2) in zip(steps, steps[1:], strict=False)
              if (k, k2) == ("I", "W") and b == b2}  # fmt: skip
    pieces = {
        b: split_backward(
            costs.input_grad_s[b], costs.weight_grad_s[b], shares[b] if shares else (1.0,),
            b in joined,
        )
        for b in range(nb)
    }  # fmt: skip
    ready: list[list[int]] = [[] for _ in range(nb)]
    for i, (kind, b) in enumerate(steps):
        mine = pieces[b][0] if kind == "I" else pieces[b][1]
        for n, piece in enumerate(mine):
            final = n == len(mine) - 1
            mem = -costs.activation_bytes[b] if final and last_step[b] == i else 0
            if kind == "W" and final:
                mem += costs.param_bytes[b]
            name = piece_name(kind, b, piece.point, kind == "W" and final)
            prev = add(name, "input_grad" if kind == "I" else "weight_grad", piece.seconds,
                       [prev], mem)  # fmt: skip
            if piece.point is not None:
                ready[b].append(prev)
    return ComputeIteration(tuple(forward), prev, tuple(map(tuple, ready)))
