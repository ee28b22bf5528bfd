"""Task graphs of ZeRO training (`cadence.zero`), for the event simulator.

The graph is built from the executor's own plan (`cadence.zero.plan.ZeroPlan`: units, which
are replicated or gathered in forward order, each unit's collectives and their sizes, the
lanes they run on) and follows `cadence/zero/engine.py` step by step, on worker 0 (every rank
runs the same program; collectives are priced for `world_size` ranks):

- one bucket per block (`zero.layout`), each rank owning 1/p of every bucket;
- one communication thread runs every collective in submission order (a FIFO chain);
- before each step's first forward, rank 0's buffers are broadcast, one message per dtype,
  and the forward waits for them (as under DDP);
- stage 1 all-reduces the buckets after backward; stages 2 and 3 reduce-scatter a bucket as
  soon as its block's backward ends; with `onebit` after warm-up the momentum travels as sign
  bits plus a scale per chunk (an all-to-all, and in stage 1 an all-gather of the
  re-compressed result);
- without onebit, once every bucket is reduced, an all-reduce of one flag per parameter
  (`ZeroPlan.used_flags`), which the step waits for;
- each rank steps its shard (`update_s_per_byte` x the bucket bytes / p);
- stages 1 and 2 all-gather every bucket after the step; the next forward waits for all of
  them, or with `overlap_gather` each block waits for its own;
- with `onebit` and a `CodecCost`, the communication thread encodes before each exchange and
  decodes after it (`cadence.zero.codec_cost.codec_work`): the bucket's collectives wait for
  it, on a processor of its own (the compute does not);
- with `onebit` at stages 1-2 (the executor's early update) a block's update runs on the
  communication thread right behind its reduction, during the backward (its processor time
  is charged to the compute stream as the step, since the ranks' threads share the cores),
  and its gather follows on a second thread and group (the gather lane, sharing the link;
  without `gather_lane`, behind the reductions on the one thread),
  except the front blocks within `forward_gather_share` under `overlap_gather`, gathered
  after the step in forward order; with `replicated_update` (onebit) every rank steps every
  piece of the front blocks within `replicated_share` of the parameters (all of them by
  default) instead, and those are not gathered, and stage 2's momentum exchange of those
  blocks is an all-gather of what every rank sent;
- with a `host_cpu_share` (`cadence.sim.host_cpu`: the host has no spare core), each
  collective's measured processor time (`AlphaBeta.host_s`, cadence's own collectives') runs
  on the compute beside the transfer, time-sliced with forward and backward;
- stage 3 gathers a block before its forward (the next one is submitted as a forward starts)
  and again before its backward (submitted as the block after it starts its backward), except
  the last block, which stays gathered; a block's gathered parameters are freed after use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.compute import BlockCosts, block_costs, link_model
from cadence.sim.dp_adapter import Built
from cadence.sim.engine import run
from cadence.sim.estimates import state_bytes
from cadence.sim.graph import LINK, STREAM, TaskGraph
from cadence.sim.metrics import SimResult, analyse
from cadence.sim.options import CLIP_SHARE_OF_STEP
from cadence.zero.codec_cost import CodecCost, codec_work
from cadence.zero.config import DEFAULT_FORWARD_GATHER_SHARE, ZeroConfig
from cadence.zero.layout import front_blocks
from cadence.zero.plan import ZeroPlan, ZeroUnit, block_units, build_zero_plan

COMPRESSIONS = ("none", "fp16", "onebit")


@dataclass(frozen=True, kw_only=True)
class ZeroSimPlan:
    """What the ZeRO executor is configured to do (the fields of `ZeroConfig` that matter)."""

    stage: int
    """1, 2 or 3."""
    compression: str = "none"
    """"none", "fp16" or "onebit" (simulated after warm-up: the compressed phase)."""
    gather_bytes_per_param: int = 4
    """4 for fp32 parameter all-gathers, 2 for the bf16 option."""
    overlap_gather: bool = False
    """Stages 1-2: each block's next forward waits only for its own gather."""
    replicated_update: bool = False
    """Stages 1-2 with onebit: every rank steps every piece; no parameter gathers."""
    replicated_share: float = 1.0
    """With `replicated_update`: only the front blocks within this share of the parameter
    bytes are replicated (`ZeroConfig.replicated_share`); the others are gathered."""
    forward_gather_share: float = DEFAULT_FORWARD_GATHER_SHARE
    """With `overlap_gather` and onebit: the front blocks within this share are gathered
    after the step in forward order (`ZeroConfig.forward_gather_share`)."""
    gather_lane: bool = True
    """Onebit at stages 1-2: the parameter gathers run on a thread and group of their own
    (`ZeroConfig.gather_lane`); False queues them behind the reductions on one thread."""

    @classmethod
    def from_config(cls, config: ZeroConfig) -> ZeroSimPlan:
        """The plan of what the executor does with `config`: the one mapping from a job's
        `ZeroConfig` to its simulation (the benchmarks' predictions and `bench sim` use it)."""
        return cls(
            stage=config.stage,
            compression=config.compression,
            gather_bytes_per_param=2 if config.gather_dtype == "bf16" else 4,
            overlap_gather=config.overlap_gather,
            replicated_update=config.replicated_update,
            replicated_share=config.replicated_share,
            forward_gather_share=config.forward_gather_share,
            gather_lane=config.gather_lane,
        )

    @property
    def updates_early(self) -> bool:
        """Onebit at stages 1-2: each block is updated and gathered during the backward."""
        return self.stage < 3 and self.compression == "onebit"

    def config(self) -> ZeroConfig:
        """The `ZeroConfig` that makes the executor do this."""
        return ZeroConfig(
            stage=self.stage,
            compression=self.compression,
            gather_dtype="bf16" if self.gather_bytes_per_param == 2 else "fp32",
            overlap_gather=self.overlap_gather,
            replicated_update=self.replicated_update,
            replicated_share=self.replicated_share,
            forward_gather_share=self.forward_gather_share,
            gather_lane=self.gather_lane,
        )

    def zero_plan(self, costs: BlockCosts, world_size: int) -> ZeroPlan:
        """The executor's plan for a model of `costs`' blocks (one unit each) on
        `world_size` ranks: what the task graph is built from."""
        return build_zero_plan(
            block_units(costs.param_bytes, costs.names), self.config(), world_size
        )

    def __post_init__(self) -> None:
        if self.stage not in (1, 2, 3):
            raise UserError(f"ZeRO stage must be 1, 2 or 3, got {self.stage}")
        if self.compression not in COMPRESSIONS:
            raise UserError(f"compression must be one of {COMPRESSIONS}, got {self.compression!r}")
        if self.gather_bytes_per_param not in (2, 4):
            raise UserError("parameter gathers are fp32 (4 bytes) or bf16 (2 bytes)")
        if self.replicated_update and (self.stage == 3 or self.compression != "onebit"):
            raise UserError("replicated_update needs stage 1 or 2 with onebit compression")
        for name in ("replicated_share", "forward_gather_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise UserError(f"{name} must be within [0, 1], got {getattr(self, name)}")

    def replicated_blocks(self, param_bytes: Sequence[int]) -> list[bool]:
        """Which blocks every rank steps in full (none without `replicated_update`)."""
        share = self.replicated_share if self.replicated_update else 0.0
        return front_blocks(param_bytes, share)


class _Worker:
    """Worker 0's compute stream, communication threads (FIFO chains: "comm", and "gather"
    for 1-bit Adam's parameter gathers) and link."""

    def __init__(
        self,
        graph: TaskGraph,
        link: AlphaBeta,
        world_size: int,
        codec: CodecCost | None,
        host_cpu_share: float = 0.0,
    ) -> None:
        rate = 1.0 / link.beta_s_per_byte if link.beta_s_per_byte > 0 else float("inf")
        # The executor runs cadence's own collectives: their calibrated fixed costs, if any.
        self.graph, self.link, self.p, self.codec_cost = graph, link.p2p(), world_size, codec
        self.thread: int | None = None  # the communication thread, made for its first codec
        self.host_share = host_cpu_share if self.link.host_s_per_call and world_size > 1 else 0.0
        if self.host_share:  # time-sliced with the collectives' processor time
            self.compute = graph.resource("w0.compute", LINK, bytes_per_s=1.0)
        else:
            self.compute = graph.resource("w0.compute", STREAM)
        self.nic = graph.resource("w0.nic", LINK, bytes_per_s=min(rate, 1e30))
        self.last: dict[str, int | None] = {"comm": None, "gather": None}
        self.last_compute: int | None = None

    def collective(
        self,
        name: str,
        collective: str,
        nbytes: int,
        deps: Sequence[int | None],
        it: int,
        lane: str = "comm",
    ) -> int | None:
        """A collective submitted after `deps`, behind every earlier one on its thread (none
        for 0 bytes: the executor skips blocks without parameters)."""
        if nbytes == 0:
            return None
        algorithm = {"all_to_all": "pairwise", "broadcast": "binomial"}.get(collective, "ring")
        terms = self.link.terms(collective, algorithm, nbytes, self.p)
        latency = self.link.alpha_for(collective, nbytes) * terms.messages + (
            self.link.gamma_s_per_byte * terms.reduce_bytes
        )
        wire = terms.wire_bytes if self.link.beta_s_per_byte > 0 else 0.0
        if self.host_share:  # its processor time, taken from the compute as it starts
            seconds = self.host_share * self.link.host_s_sending(collective, terms.wire_bytes)
            self.graph.add_work(
                f"cpu {name}", "comm-cpu", self.compute, seconds, deps=[self.last[lane], *deps],
                iteration=it,
            )  # fmt: skip
        self.last[lane] = self.graph.add(
            name,
            "collective",
            resources=(self.nic,),
            duration_s=latency,
            nbytes=wire,
            deps=[self.last[lane], *deps],
            iteration=it,
        )
        return self.last[lane]

    def buffers(self, nbytes: int, messages: int, it: int) -> list[int | None]:
        """The broadcast of the model's buffers (`nbytes` in `messages`, one per dtype) after
        the compute so far, on the communication thread (none without buffers)."""
        if nbytes <= 0:
            return []
        messages = max(messages, 1)
        return [
            self.collective(f"buffers{i}", "broadcast", nbytes // messages, [self.last_compute], it)
            for i in range(messages)
        ]

    def codec(
        self, name: str, elements: tuple[float, float], deps: Sequence[int | None], it: int
    ) -> None:
        """1-bit codec work (encoded, decoded elements) on the communication thread, in its
        chain after `deps` (nothing without a codec cost or elements)."""
        if self.codec_cost is None or not any(elements):
            return
        if self.thread is None:
            self.thread = self.graph.resource("w0.comm", STREAM)
        self.last["comm"] = self.graph.add(
            name,
            "codec",
            resources=(self.thread,),
            duration_s=self.codec_cost.seconds(*elements),
            deps=[self.last["comm"], *deps],
            iteration=it,
        )

    def work(
        self,
        name: str,
        kind: str,
        seconds: float,
        deps: Sequence[int | None],
        it: int,
        mem: int = 0,
    ) -> int:
        """Compute in program order after the previous compute task."""
        self.last_compute = self.graph.add_work(
            name,
            kind,
            self.compute,
            seconds,
            deps=[self.last_compute, *deps],
            iteration=it,
            mem_end=mem,
        )
        return self.last_compute


def _reduce(w: _Worker, plan: ZeroPlan, unit: ZeroUnit, b: int, deps: list[int | None],
            it: int) -> int:  # fmt: skip
    """The unit's steady-state gradient collectives (`ZeroUnit.reduce`), in plan order; with
    onebit the codec work around them on the communication thread."""
    ops = unit.reduce
    if plan.config.compression != "onebit":
        op = ops[0]
        return _done(w.collective(f"{op.name} {b}", op.collective, op.nbytes, deps, it))
    work = codec_work(plan.stage, unit.replicated, unit.nbytes / 4, w.p)
    w.codec(f"encode {b}", work.before, deps, it)
    first = ops[0]
    done = w.collective(f"{first.name} {b}", first.collective, first.nbytes, deps, it)
    for op in ops[1:]:  # stage 1: the re-compressed result (stages 2-3 reduce-scatter only)
        w.codec(f"re-encode {b}", work.between, [], it)
        done = w.collective(f"{op.name} {b}", op.collective, op.nbytes, [], it)
    w.codec(f"decode {b}", work.after, [], it)
    return _done(w.last["comm"] if w.codec_cost else done)


def _block_units(plan: ZeroPlan, blocks: int) -> list[ZeroUnit | None]:
    """Block b's unit (None: a block without parameters); the plan's units are the model
    itself (first, holding none) and its blocks (`block_units`)."""
    by_module = plan.by_module()
    if any(not 1 <= m <= blocks for m in by_module):
        raise UserError(
            f"the ZeRO plan's units do not map onto the profile's {blocks} blocks: make the "
            "plan from the profile's blocks (`ZeroSimPlan.zero_plan`)"
        )
    return [by_module.get(b + 1) for b in range(blocks)]


def _done(task: int | None) -> int:
    assert task is not None  # nbytes > 0
    return task


def build_zero(
    costs: BlockCosts,
    plan: ZeroPlan,
    world_size: int,
    link: AlphaBeta,
    iterations: int,
    update_s_per_byte: float = 0.0,
    warmup_iterations: int = 1,
    codec: CodecCost | None = None,
    grad_accum: int = 1,
    clip: bool = False,
    buffer_bytes: int = 0,
    buffer_broadcasts: int = 1,
    host_cpu_share: float = 0.0,
) -> Built:
    """Graph of `warmup_iterations + iterations` ZeRO iterations on worker 0; `codec` prices
    1-bit Adam's encoding and decoding (None: free); `grad_accum` micro-batches per
    iteration, the gradients reduced in the last one's backward (stage 3 still gathers every
    block's parameters for every micro-batch). `clip`: a global-norm clip before the step, as
    sharded optimizers do it: each rank's norm over its shard of the gradients (a memory-bound
    pass, `CLIP_SHARE_OF_STEP` of its step), one scalar all-reduce of the squared norms, then
    the step (early updates, onebit at stages 1-2, are not held back for it). The model's
    `buffer_bytes` travel in `buffer_broadcasts` messages (one per dtype) before each step;
    `host_cpu_share` of each collective's processor time is taken from the compute
    (`SimOptions.host_cpu_share`)."""
    graph = TaskGraph()
    w = _Worker(graph, link, world_size, codec, host_cpu_share)
    nb = len(costs.forward_s)
    units = _block_units(plan, nb)
    pb = [u.nbytes if u is not None else 0 for u in units]
    gather = [u.gather.nbytes if u is not None and u.gather else 0 for u in units]
    lane = [u.gather.lane if u is not None and u.gather else "comm" for u in units]
    replicated = [u is not None and u.replicated for u in units]
    early = plan.early_update
    later = [early and u is not None and u.forward_gather for u in units]  # after the step
    starts: list[int] = []
    gates: list[list[int]] = [[] for _ in range(nb)]  # what each block's forward waits for
    for it in range(warmup_iterations + iterations):
        reductions: list[int] = []
        updated: list[int | None] = [None] * nb  # early updates (onebit, stages 1-2)
        gathered: list[int | None] = [None] * nb
        for micro in range(grad_accum):  # all but the last accumulate locally (no_sync)
            sync = micro == grad_accum - 1
            holds = gates if micro == 0 else [[] for _ in range(nb)]
            fwd_gather: list[int | None] = [None] * nb
            # The step's first forward waits for the buffers.
            buffers = w.buffers(buffer_bytes, buffer_broadcasts, it) if micro == 0 else []
            if plan.stage == 3:
                fwd_gather[0] = w.collective("g0", "allgather", gather[0], holds[0], it)
            if costs.input_s > 0:
                w.work("input", "input", costs.input_s, [], it)
            for b in range(nb):
                before = w.last_compute  # block b starts once this and its gather are done
                if plan.stage == 3 and b + 1 < nb:
                    nxt = gather[b + 1]
                    fwd_gather[b + 1] = w.collective(f"g{b + 1}", "allgather", nxt, [before], it)
                deps = [fwd_gather[b], *holds[b], *(buffers if b == 0 else [])]
                mem = costs.activation_bytes[b]
                task = w.work(f"F{b}", "forward", costs.forward_s[b], deps, it, mem)
                if b == 0 and micro == 0:
                    starts.append(task)
            w.work("loss", "loss", costs.loss_s, [], it)
            bwd_gather: int | None = None
            for b in reversed(range(nb)):
                after, bwd_gather_next = bwd_gather, None
                if plan.stage == 3 and b > 0:  # prefetch the next block's parameters
                    prev = [w.last_compute]
                    bwd_gather_next = w.collective(
                        f"gb{b - 1}", "allgather", gather[b - 1], prev, it
                    )
                seconds = costs.input_grad_s[b] + costs.weight_grad_s[b]
                freed = -costs.activation_bytes[b]
                done = w.work(f"B{b}", "weight_grad", seconds, [after], it, freed)
                bwd_gather = bwd_gather_next
                unit = units[b]
                if sync and plan.reduces_in_backward and unit is not None:
                    reductions.append(_reduce(w, plan, unit, b, [done], it))
                    if early:  # updated right behind it (processor time: charged to the step)
                        updated[b] = u = reductions[-1]
                        if not (replicated[b] or later[b]):
                            gathered[b] = w.collective(
                                f"g{b}", "allgather", gather[b], [u], it, lane=lane[b]
                            )
        if not plan.reduces_in_backward:
            backward = [w.last_compute]  # stage 1 reduces at the step, after backward
            reductions += [
                _reduce(w, plan, unit, b, backward, it)
                for b, unit in reversed(list(enumerate(units)))
                if unit is not None
            ]
        flags = plan.used_flags  # which parameters got a gradient, once all are reduced
        if flags is not None:
            op = w.collective(flags.name, flags.collective, flags.nbytes, reductions, it)
            reductions = [t for t in (op,) if t is not None]
        stepped = sum(n if r else n / world_size for n, r in zip(pb, replicated, strict=True))
        # With early updates the step waits for the reductions and the updates are done or
        # under way on the communication thread; their processor time is charged here all
        # the same (two ranks' threads share the cores).
        if clip:
            norm = w.work(
                "clip", "update", CLIP_SHARE_OF_STEP * update_s_per_byte * stepped, reductions, it
            )
            summed = w.collective("ar norm", "allreduce", 8, [norm], it)
            reductions = [t for t in (summed,) if t is not None]
        step = w.work("step", "update", update_s_per_byte * stepped, reductions, it)
        if early:
            for b in range(nb):  # the front blocks' gathers, in forward order
                if later[b] and not replicated[b] and pb[b]:
                    deps = [updated[b], step]
                    gathered[b] = w.collective(f"g{b}", "allgather", gather[b], deps, it, lane[b])
            # A replicated block waits only for its update.
            waits = [g if g is not None else u for g, u in zip(gathered, updated, strict=True)]
        elif plan.stage < 3:  # (a replicated update is always early: onebit at stages 1-2)
            waits = [w.collective(f"g{b}", "allgather", gather[b], [step], it) for b in range(nb)]
        else:
            waits = [None] * nb
        every = [t for t in waits if t is not None]
        own = [[t] if t is not None else [] for t in waits]
        gates = own if plan.config.overlap_gather else [every] * nb
    total = warmup_iterations + iterations
    buffers = w.buffers(buffer_bytes, buffer_broadcasts, total)  # so does the next step's
    if plan.stage == 3:  # the next step's first forward waits for its block's gather
        gates[0] = [g for g in [w.collective("g0", "allgather", gather[0], [], total)] if g]
    if costs.input_s > 0:
        w.work("input", "input", costs.input_s, [], total)
    ends = [w.last_compute, *w.last.values(), *(g for gate in gates for g in gate), *buffers]
    starts.append(graph.add("next", "marker", resources=(w.compute,), deps=ends, iteration=total))
    return Built(graph, tuple(starts), warmup_iterations, f"zero{plan.stage}", world_size)


def simulate_zero(
    costs: BlockCosts | Profile,
    plan: ZeroSimPlan | ZeroPlan,
    world_size: int,
    link: AlphaBeta | float,
    iterations: int = 3,
    update_s_per_byte: float = 0.0,
    codec: CodecCost | None = None,
    grad_accum: int = 1,
    clip: bool = False,
    buffer_bytes: int = 0,
    buffer_broadcasts: int = 1,
    host_cpu_share: float = 0.0,
) -> SimResult:
    """Predict ZeRO `plan` (the executor's `ZeroPlan` over the profile's blocks, or the
    `ZeroSimPlan` to make it from) on `world_size` ranks joined by `link` (an `AlphaBeta`, or
    bytes/s), from a profile or its block costs; `update_s_per_byte` prices the step,
    `codec` 1-bit Adam's encoding and decoding (None: free), `grad_accum` the micro-batches
    of gradient accumulation per step, `clip` a global-norm clip before the step,
    `buffer_bytes` the model's buffers broadcast before each step in `buffer_broadcasts`
    messages, `host_cpu_share` the share of each collective's processor time taken from
    the compute (`SimOptions.host_cpu_share`)."""
    if world_size < 1:
        raise UserError(f"workers must be >= 1, got {world_size}")
    if isinstance(costs, Profile):
        costs = block_costs(costs)
    if grad_accum < 1:
        raise UserError(f"grad_accum must be >= 1, got {grad_accum}")
    if isinstance(plan, ZeroSimPlan):
        plan = plan.zero_plan(costs, world_size)
    elif plan.world_size != world_size:
        raise UserError(f"the ZeRO plan is for {plan.world_size} ranks, not {world_size}")
    built = build_zero(
        costs, plan, world_size, link_model(link), iterations, update_s_per_byte, codec=codec,
        grad_accum=grad_accum, clip=clip, buffer_bytes=buffer_bytes,
        buffer_broadcasts=buffer_broadcasts, host_cpu_share=host_cpu_share,
    )  # fmt: skip
    base = state_bytes(sum(costs.param_bytes), 2, f"zero{plan.stage}", world_size)
    return analyse(built, run(built.graph), base)


def codec_lines(result: SimResult) -> list[str]:
    """With 1-bit Adam's codec priced: what it costs the communication thread per iteration,
    as a line for `cadence simulate` (none otherwise)."""
    codec = [t for t in result.schedule.graph.tasks if t.kind == "codec"]
    if not codec:
        return []
    per_iteration = sum(t.duration_s for t in codec) / len({t.iteration for t in codec})
    return [f"1-bit codec {per_iteration * 1e3:.1f} ms per iteration on the communication thread"]
