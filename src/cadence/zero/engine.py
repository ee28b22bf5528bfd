"""The ZeRO runtime: flat buffers per bucket, gradient reduction, parameter gathers, the step.

Every collective runs on a communication thread with a process group of its own, in the
order the main thread submits them (forward/backward order, then bucket order at the step),
which is the same on every rank. Under 1-bit Adam (stages 1-2) the parameter all-gathers get
a second thread and group (`ZeroConfig.gather_lane`): a bucket's momentum exchange and update
then run while the previous bucket's gather is on the wire instead of after it. Stages 2 and 3
reduce a bucket from a post-accumulate-grad hook as soon as all of its gradients exist, so
reduction overlaps the rest of the backward pass; stage 3's gather/release hooks live in
`params3.py`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cadence.comm import collectives
from cadence.comm.ops import broadcast_by_dtype
from cadence.comm.process_group import leave_groups
from cadence.errors import UserError
from cadence.zero.compress import decode, encode
from cadence.zero.layout import Bucket, ZeroLayout, bucket_params
from cadence.zero.onebit import (
    gather_wires,
    mean_of_received,
    momentum_all_gather_sent,
    momentum_all_reduce,
    momentum_reduce_scatter,
)
from cadence.zero.plan import ZeroPlan
from cadence.zero.shard_optim import Segment, group_index, rebuild, segments, single_group
from cadence.zero.update import (
    FrozenAdamArgs,
    frozen_adam_update,
    frozen_denominator,
    replicated_update,
    step_size,
)


@dataclass(eq=False)
class BucketState:
    """Run-time state of one bucket on this rank."""

    spec: Bucket
    block: nn.Module
    params: list[nn.Parameter]
    flat: torch.Tensor
    """Full padded parameters; the model's parameters are views into it."""
    shard: nn.Parameter
    """This rank's master piece, the parameter the optimizer updates."""
    grad: torch.Tensor | None = None
    """Reduced gradient of the piece since zero_grad (unused by 1-bit Adam after warm-up)."""
    ready: set[int] = field(default_factory=set)
    """Indices of the parameters whose gradient this backward pass has accumulated."""
    complete: bool = False
    """Every parameter's gradient of this backward is in; the reduction waits its turn."""
    used: torch.Tensor | None = None
    """Per parameter, 1 where it got a gradient since the last step (on this rank, then, after
    `ZeroEngine.finish_reductions`, on any rank)."""
    segments: list[tuple[Segment, nn.Parameter]] = field(default_factory=list)
    """Without onebit: the optimizer's parameters, views into `shard`, one per overlap of the
    piece with a parameter that the user's optimizer trains."""
    reduced: bool = False
    gathered: bool = True
    pending: Future[None] | None = None
    sender_error: torch.Tensor | None = None
    reducer_error: torch.Tensor | None = None
    momentum_wire: torch.Tensor | None = None
    """With onebit, (p, wire bytes): stage 1, every rank's piece of the momentum as last
    all-gathered; stages 2-3, what this rank sent each rank last step."""
    updated: bool = False
    """Early update (see `ZeroEngine.early_update`): this step's update and gather are queued."""
    forward_gather: bool = False
    """Early update with overlap: this bucket's gather waits for `step()` and then goes in
    forward order (a front block, see `ZeroConfig.forward_gather_share`)."""
    replicated: bool = False
    """1-bit Adam after warm-up with `ZeroConfig.replicated_update`: every rank updates every
    piece of this bucket itself (a front block within `ZeroConfig.replicated_share`)."""
    denominator: torch.Tensor | None = None
    """1-bit Adam after warm-up with `ZeroConfig.replicated_update`: Adam's denominator for
    the whole bucket from the owners' frozen variances, gathered once."""
    denominator_key: tuple[float, float] | None = None
    """The (bias2, eps) `denominator` was made with."""
    everyone_sent: torch.Tensor | None = None
    """Stage 2 with `replicated_update`: this step's (p senders, p pieces, wire bytes)."""
    in_flight: list[Future[None]] = field(default_factory=list)


def beta1_of(engine: ZeroEngine) -> float:
    """Adam's momentum decay, read when used (a scheduler may change it)."""
    return float(engine.inner.param_groups[0]["betas"][0])


class ZeroEngine:
    """Shards one model's training state over the ranks of the current process group."""

    def __init__(
        self,
        model: nn.Module,
        plan: ZeroPlan,
        user_optimizer: torch.optim.Optimizer,
        group: dist.ProcessGroup | None,
        rank: int,
        gather_group: dist.ProcessGroup | None = None,
        broadcast_buffers: bool = True,
    ) -> None:
        world_size = plan.world_size
        self.plan = plan
        config = plan.config
        self.config, self.group, self.p, self.rank = config, group, world_size, rank
        self.model = model
        self.broadcast_buffers = broadcast_buffers
        self.syncing = True
        """False inside `no_sync()`: backward passes accumulate gradients without reducing."""
        self.reductions_done = False
        """Every bucket of this step is reduced (by `finish_reductions`, or a clip before)."""
        self._next_reduce = -1
        """The bucket whose reduction goes next during a backward (see `_reduce_in_order`)."""
        self.gather_group = gather_group if gather_group is not None else group
        entries = bucket_params(model)  # the units `plan` was made from, in the same order
        self.layout: ZeroLayout = plan.layout
        self.states = [
            self._make_state(unit.bucket, entries[unit.module][1],
                             [p for _, p in entries[unit.module][2]])
            for unit in plan.units
        ]  # fmt: skip
        self._restart_order()
        self.inner = self._shard_optimizer(user_optimizer)
        for st in self.states:
            for p in st.params:  # how torch's clip_grad_norm_ finds the engine (`grad_norm`)
                p._cadence_zero = weakref.ref(self)  # type: ignore[attr-defined]
        self.steps_done = 0
        self._lock = threading.Lock()
        self._bytes = {"gradients": 0, "parameters": 0}
        self.bytes_sent_last_step = {"gradients": 0, "parameters": 0, "total": 0}
        self.peak = {"parameters": 0, "gradients": 0, "optimizer_state": 0, "total": 0}
        self._pool = ThreadPoolExecutor(1, "cadence-zero") if world_size > 1 else None
        self._gather_pool = (
            ThreadPoolExecutor(1, "cadence-zero-gather")
            if gather_group is not None  # made only for a world of 2 or more
            else None
        )
        # 1-bit Adam after warm-up (stages 1-2): a bucket's update needs only its own
        # reduced momentum and the frozen variance, so it and the bucket's parameter
        # all-gather are queued right behind its reduction, during the backward, and the
        # gathers travel while the rest of the backward computes. `step()` still returns
        # with every parameter current (unless overlap_gather), but parameters change
        # during the backward; with several backwards per step the update uses the first
        # one's momentum.
        self.early_update = plan.early_update and world_size > 1
        # Every rank updates every piece of these buckets itself after warm-up: no gathers.
        if world_size > 1:
            for st, unit in zip(self.states, plan.units, strict=True):
                st.replicated = unit.replicated
        # Stage 1 reduces early too once 1-bit Adam is compressing: its momentum all-reduce
        # needs only this backward's gradient, so it can overlap the rest of the backward.
        if plan.reduces_in_backward:
            for st in self.states:
                for i, p in enumerate(st.params):
                    p.register_post_accumulate_grad_hook(self._grad_hook(st, i))
        if config.overlap_gather and config.stage < 3:
            for st in self.states:
                st.block.register_forward_pre_hook(self._wait_gather_hook(st))
            # The same front blocks on every rank (same plan): collective order agrees.
            for st, unit in zip(self.states, plan.units, strict=True):
                st.forward_gather = unit.forward_gather
            model.register_state_dict_pre_hook(lambda *_a, **_k: self.wait_gathers())
        self._buffers_due = True
        model.register_forward_pre_hook(self._sync_buffers)
        model.register_forward_hook(self._after_forward)
        model.register_load_state_dict_post_hook(lambda *_a: self.params_loaded())

    def _shard_optimizer(self, user: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The user's optimizer over this rank's pieces: 1-bit Adam steps whole pieces (its
        own update after warm-up); otherwise one segment per parameter in the piece."""
        if self.config.compression == "onebit":
            hyper = single_group(user, "onebit compression")
            return torch.optim.Adam([st.shard for st in self.states], **hyper)
        index = group_index(user, [p for st in self.states for p in st.params])
        groups: list[list[nn.Parameter]] = [[] for _ in user.param_groups]
        for st in self.states:
            for seg in segments(st.spec, self.rank):
                gi = index.get(id(st.params[seg.slot]))
                if gi is None:  # the user's optimizer does not train it
                    continue
                piece = nn.Parameter(st.shard.detach()[seg.lo : seg.hi])
                st.segments.append((seg, piece))
                groups[gi].append(piece)
        return rebuild(user, groups)

    def _make_state(
        self, spec: Bucket, block: nn.Module, params: list[nn.Parameter]
    ) -> BucketState:
        dtypes = {p.dtype for p in params}
        if dtypes != {torch.float32}:
            raise UserError(
                f"cadence.zero trains float32 parameters; block {spec.name} has {dtypes}"
            )
        flat = torch.zeros(spec.padded, dtype=torch.float32, device=params[0].device)
        with torch.no_grad():
            for slot, p in zip(spec.slots, params, strict=True):
                view = flat[slot.offset : slot.offset + slot.numel]
                view.copy_(p.detach().reshape(-1))
                p.data = view.view(slot.shape)
        lo, hi = spec.piece_range(self.rank)
        # Stages 1-2 in fp32 update the model's own piece in place: no second copy.
        own = self.config.stage < 3 and self.config.gather_dtype == "fp32"
        shard = nn.Parameter(flat[lo:hi] if own else flat[lo:hi].clone())
        used = torch.zeros(len(params), dtype=torch.float32, device=flat.device)
        return BucketState(spec, block, params, flat, shard, used=used)

    # ----------------------------------------------------------------- communication thread
    def submit(
        self, fn: Callable[[], None], kind: str | None, gather_lane: bool = False
    ) -> Future[None]:
        """Run `fn` on the communication thread (`gather_lane`: the gathers' thread, where there
        is one), counting the bytes it sends under `kind` (None: buffers and used-parameter
        flags, which `comm_bytes_per_step` leaves out)."""

        def task() -> None:
            if kind is None:
                fn()
                return
            with collectives.count_bytes() as counter:
                fn()
            with self._lock:
                self._bytes[kind] += counter.bytes_sent

        pool = self._gather_pool if gather_lane and self._gather_pool is not None else self._pool
        if pool is None:
            done: Future[None] = Future()
            task()
            done.set_result(None)
            return done
        return pool.submit(task)

    def submit_gather(self, st: BucketState, after: Future[None] | None = None) -> Future[None]:
        """All-gather the bucket's parameters (on the gather lane where there is one) once
        `after`, its update on the other lane, is done."""

        def gather() -> None:
            if after is not None:
                after.result()
            self.gather_task(st)

        return self.submit(gather, "parameters", gather_lane=True)

    def close(self) -> None:
        self.wait_gathers()
        for pool in (self._pool, self._gather_pool):
            if pool is not None:
                pool.shutdown(wait=True)
        # zero_from_config made both for this engine alone: their connections and I/O threads.
        leave_groups(self.group, self.gather_group)
        self.group = self.gather_group = None

    @property
    def compressed_phase(self) -> bool:
        """1-bit Adam after warm-up: variance frozen, momentum travels as signs."""
        return self.config.compression == "onebit" and self.steps_done >= self.config.freeze_steps

    # ----------------------------------------------------------------- gradients
    def _grad_hook(self, st: BucketState, index: int) -> Callable[[torch.Tensor], None]:
        def hook(_param: torch.Tensor) -> None:
            st.ready.add(index)
            if len(st.ready) == len(st.params):
                st.ready.clear()
                if not self.syncing:  # no_sync: gradients stay in p.grad and accumulate
                    self.on_bucket_backward_done(st)
                elif self.config.stage >= 2 or self.compressed_phase:
                    st.complete = True
                    self._reduce_in_order()

        return hook

    def _reduce_in_order(self) -> None:
        """Reduce the completed buckets strictly from the last to the first: a bucket whose
        parameter went unused on this rank only (no hook completes it) holds back the ones
        before it until `step()`, so every rank issues the reductions in the same order."""
        while self._next_reduce >= 0 and self.states[self._next_reduce].complete:
            st = self.states[self._next_reduce]
            st.complete = False
            self._next_reduce -= 1
            self.reduce_bucket(st)

    def _restart_order(self) -> None:
        self._next_reduce = len(self.states) - 1
        for st in self.states:
            st.complete = False

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """DDP's `no_sync`: backward passes inside accumulate gradients locally (full-size, in
        the parameters' .grad); the first backward after it reduces their sum."""
        previous, self.syncing = self.syncing, False
        try:
            yield
        finally:
            self.syncing = previous

    def _sync_buffers(self, module: nn.Module, _args: Any) -> None:
        """Forward pre-hook: rank 0's buffers to every rank when DDP sends them: when the
        previous forward recorded gradients outside `no_sync` (and at the first forward)."""
        if not (self.broadcast_buffers and self.p > 1 and self._buffers_due):
            return
        buffers = [b for b in module.buffers() if b.numel()]
        if buffers:
            # One message per dtype, as DDP sends them: resnet32's 93 BatchNorm buffers took
            # 67 ms a step one by one at 50 mbit, the forward waiting.
            def send(flat: torch.Tensor) -> None:
                collectives.broadcast(flat, src=0, group=self.group)

            self.submit(lambda: broadcast_by_dtype(buffers, send), None).result()

    def _after_forward(self, _module: nn.Module, _args: Any, _output: Any) -> None:
        self._buffers_due = torch.is_grad_enabled() and self.syncing
        self._restart_order()  # a backward follows: its buckets complete anew

    def params_loaded(self) -> None:
        """After `model.load_state_dict`: the loaded full parameters become the master pieces."""
        with torch.no_grad():
            for st in self.states:
                if st.flat.untyped_storage().nbytes():
                    lo, hi = st.spec.piece_range(self.rank)
                    st.shard.copy_(st.flat[lo:hi])

    def _flat_grad(self, st: BucketState, keep: bool) -> torch.Tensor:
        g = torch.zeros(st.spec.padded, dtype=torch.float32, device=st.shard.device)
        for i, (slot, p) in enumerate(zip(st.spec.slots, st.params, strict=True)):
            if p.grad is not None:
                assert st.used is not None
                st.used[i] = 1.0
                g[slot.offset : slot.offset + slot.numel].copy_(p.grad.reshape(-1))
                if not keep:
                    p.grad = None
        return g

    def reduce_bucket(self, st: BucketState) -> None:
        """Hand this bucket's local gradients to the communication thread (main thread)."""
        self.sample_memory()
        st.ready.clear()
        compressed = self.compressed_phase
        # Stage 1 keeps full gradients, except under 1-bit Adam's compression, which reduces
        # each backward's gradient into the momentum as soon as it exists (as stage 2 does).
        flat_grad = self._flat_grad(st, keep=self.config.stage == 1 and not compressed)
        st.reduced = True
        wd = self.inner.param_groups[0]["weight_decay"] if compressed else 0.0  # Adam's, then
        if wd and st.gathered:  # 1-bit Adam's momentum includes the decay term
            flat_grad.add_(st.flat.detach(), alpha=wd)
        if self.config.stage == 3:
            self.on_bucket_backward_done(st)
        st.in_flight.append(
            self.submit(lambda: self._reduce(st, flat_grad, compressed), "gradients")
        )
        if compressed and self.early_update and not st.updated:
            self._wait_gather(st)  # the last step's gather: its forward has waited for it
            args = FrozenAdamArgs.of(self.inner.param_groups[0], self.config.freeze_steps)
            st.updated = True
            # Right behind the bucket's momentum reduction; a front block's gather waits for
            # `step()` (`gather_all`).
            update = self.submit(lambda: self.frozen_update(st, args), "parameters")
            gathered_later = st.forward_gather or st.replicated
            st.pending = update if gathered_later else self.submit_gather(st, update)

    def on_bucket_backward_done(self, st: BucketState) -> None:
        """Stage 3 overrides this to release the bucket's parameters."""

    def _accumulate(self, st: BucketState, piece: torch.Tensor) -> None:
        if st.grad is None:
            st.grad = piece.clone()
        else:
            st.grad.add_(piece)

    def _reduce(self, st: BucketState, flat_grad: torch.Tensor, compressed: bool) -> None:
        """Communication thread: reduce one bucket's gradients into this rank's piece, with
        the collectives its plan unit names for this phase."""
        lo, hi = st.spec.piece_range(self.rank)
        unit = self.plan.units[st.spec.index]
        if compressed:
            if unit.reduce[-1].name == "ag1":  # stage 1: the 1-bit all-reduce
                self._onebit_all_reduce(st, flat_grad)
            else:  # an all-to-all, or (replicated stage 2) an all-gather of what was sent
                self._onebit_reduce_scatter(st, flat_grad)
            return
        plain = unit.warmup_reduce[0]
        op = "avg"
        wire = flat_grad
        if plain.wire == "fp16":  # divided first, as torch's fp16 hook: no overflow
            wire, op = flat_grad.half().div_(self.p), "sum"
        if self.p > 1 and plain.collective == "allreduce":
            collectives.all_reduce(wire, op=op, group=self.group)
            out = wire[lo:hi]
        elif self.p > 1:
            out = torch.empty(st.spec.piece, dtype=wire.dtype, device=wire.device)
            collectives.reduce_scatter_tensor(out, wire, op=op, group=self.group)
        else:
            out = wire
        self._accumulate(st, out.float())

    def _publish_momentum(self, st: BucketState, flat_grad: torch.Tensor) -> torch.Tensor:
        """1-bit switch-over: every rank's fp32 momentum piece goes out once, encoded, and is
        the last momentum every rank holds; returns what the encoding lost (owner's piece)."""
        momentum = self.inner.state[st.shard]["exp_avg"]
        wire, decoded = encode(momentum)
        lost = momentum - decoded
        momentum.copy_(decoded)  # from now on the owner's piece is what the wire says
        st.sender_error = torch.zeros_like(flat_grad)
        st.momentum_wire = gather_wires(wire, self.p, self.group)
        return lost

    def _onebit_reduce_scatter(self, st: BucketState, flat_grad: torch.Tensor) -> None:
        """1-bit Adam, stages 2-3: the local momenta, 1-bit reduce-scattered onto the owners.

        Every rank keeps what it sent last (1/28 of fp32) to form its next local momentum and
        a sender error; the owner's piece of the momentum is the mean of what it received.
        """
        beta1 = beta1_of(self)
        if st.momentum_wire is None:  # switch-over: every rank's last sent is the published one
            lost = self._publish_momentum(st, flat_grad)
            assert st.sender_error is not None
            # What the encoding lost goes into the owner's error for its own piece (x p: the
            # owner's momentum is the mean over p senders; x beta1: it enters as last momentum).
            st.sender_error.view(self.p, -1)[self.rank].add_(lost, alpha=self.p * beta1)
        assert st.sender_error is not None and st.momentum_wire is not None
        momentum = self.inner.state[st.shard]["exp_avg"]
        if st.replicated:  # every rank forms every owner's momentum: it gets all that was sent
            st.momentum_wire, st.everyone_sent = momentum_all_gather_sent(
                flat_grad, st.momentum_wire, momentum, st.sender_error, beta1, self.rank,
                self.group,
            )  # fmt: skip
            return
        st.momentum_wire = momentum_reduce_scatter(
            flat_grad, st.momentum_wire, momentum, st.sender_error, beta1, self.group
        )

    def _onebit_all_reduce(self, st: BucketState, flat_grad: torch.Tensor) -> None:
        """1-bit Adam, stage 1: every rank's local momentum, 1-bit all-reduced.

        Every rank keeps the last all-reduced momentum as its encoded wire bytes (1/28 of fp32)
        to form its next local momentum; the fp32 momentum lives only in the owner's shard.
        """
        if st.momentum_wire is None:  # switch-over: the reducer keeps what the encoding lost
            st.reducer_error = self._publish_momentum(st, flat_grad)
        assert st.sender_error is not None and st.reducer_error is not None
        assert st.momentum_wire is not None
        st.momentum_wire = momentum_all_reduce(
            flat_grad, st.momentum_wire, self.inner.state[st.shard]["exp_avg"], st.sender_error,
            st.reducer_error, beta1_of(self), self.rank, self.group,
        )  # fmt: skip

    # ----------------------------------------------------------------- 1-bit Adam's update
    def frozen_update(self, st: BucketState, args: FrozenAdamArgs) -> None:
        """1-bit Adam's update of one bucket after warm-up (any thread): this rank's piece,
        for the gather to spread; in a replicated bucket, every piece, here."""
        state = self.inner.state[st.shard]
        denominator = self._denominator(st, args)
        if not st.replicated:
            frozen_adam_update(st.shard, state, args, denominator)
            return
        pieces = [st.spec.piece_range(j) for j in range(self.p)]
        replicated_update(
            st.flat, pieces, lambda j: self._piece_momentum(st, j), denominator,
            step_size(state, args),
        )  # fmt: skip
        st.everyone_sent = None

    def _denominator(self, st: BucketState, args: FrozenAdamArgs) -> torch.Tensor:
        """The frozen denominator: of this rank's piece, made for each update (kept, it would
        cost 4/p bytes per parameter for well under 2% of a step's processor time); with
        a replicated bucket, of the whole bucket, all-gathered once and kept."""
        variance = self.inner.state[st.shard]["exp_avg_sq"]
        if not st.replicated:
            return frozen_denominator(variance, args)
        if st.denominator is None or st.denominator_key != args.denominator_key:
            full = torch.empty(st.spec.padded, dtype=torch.float32, device=variance.device)
            own = frozen_denominator(variance, args)
            collectives.all_gather_into_tensor(full, own, group=self.group)
            st.denominator, st.denominator_key = full, args.denominator_key
        return st.denominator

    def _piece_momentum(self, st: BucketState, j: int) -> torch.Tensor:
        """Owner j's momentum for its piece, formed here exactly as owner j forms it."""
        if j == self.rank:
            return self.inner.state[st.shard]["exp_avg"]
        assert st.momentum_wire is not None
        if self.config.stage == 1:  # the all-reduced momentum, as every rank gathered it
            return decode(st.momentum_wire[j])
        assert st.everyone_sent is not None
        out = torch.empty(st.spec.piece, dtype=torch.float32, device=st.shard.device)
        return mean_of_received(out, st.everyone_sent[:, j])

    def finish_reductions(self) -> None:
        """Reduce buckets no hook reduced (stage 1: all of them), then wait for every one;
        then the plan's `used_flags`: which parameters got a gradient on any rank. Once per
        step."""
        if self.reductions_done:
            return
        for st in reversed(self.states):  # the order the hooks follow (`_reduce_in_order`)
            if not st.reduced:
                self.reduce_bucket(st)
        self._restart_order()
        for st in self.states:
            for fut in st.in_flight:
                fut.result()
            st.in_flight.clear()
            st.reduced = False
        if self.plan.used_flags is not None:
            self._exchange_used()
        self.reductions_done = True

    def _exchange_used(self) -> None:
        """OR every rank's used-parameter flags (one float per parameter, uncounted)."""
        flags = torch.cat([st.used for st in self.states if st.used is not None])
        if self.p > 1:
            self.submit(lambda: collectives.all_reduce(flags, op="max", group=self.group),
                        None).result()  # fmt: skip
        offset = 0
        for st in self.states:
            assert st.used is not None
            st.used.copy_(flags[offset : offset + len(st.params)])
            offset += len(st.params)

    def set_segment_grads(self) -> None:
        """Hand the reduced gradient pieces to the optimizer's segments; a parameter that got
        no gradient on any rank keeps grad None, so the optimizer leaves it alone."""
        for st in self.states:
            assert st.used is not None
            used = st.used.tolist()  # one copy to the host per bucket, not one per segment
            for seg, piece in st.segments:
                has = bool(used[seg.slot]) and st.grad is not None
                piece.grad = st.grad[seg.lo : seg.hi] if has else None  # type: ignore[index]

    def clear_step(self) -> None:
        """After the update: segment gradients and used flags go, the next step starts."""
        for st in self.states:
            for _, piece in st.segments:
                piece.grad = None
            if st.used is not None:
                st.used.zero_()
            st.ready.clear()
        self.reductions_done = False

    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
    ) -> torch.Tensor:
        """torch's `clip_grad_norm_` over the whole model's reduced gradients: every rank
        adds up its pieces, one all-reduce makes the total norm, every piece is scaled."""
        if self.config.compression == "onebit":
            raise UserError(
                "clip_grad_norm_ is not available with onebit compression (after warm-up the "
                "gradients are folded into the 1-bit momentum): use compression none or fp16"
            )
        self.finish_reductions()
        norm_type = float(norm_type)
        grads = [st.grad for st in self.states if st.grad is not None]
        device = self.states[0].shard.device
        inf = norm_type == float("inf")
        total = torch.zeros(1, dtype=torch.float32, device=device)
        for g in grads:  # padding and unused entries are zero: they add nothing
            if inf:
                torch.maximum(total, g.abs().max().reshape(1), out=total)
            else:
                total += g.abs().pow(norm_type).sum()
        if self.p > 1:
            op = "max" if inf else "sum"
            self.submit(lambda: collectives.all_reduce(total, op=op, group=self.group),
                        "gradients").result()  # fmt: skip
        norm = total[0] if inf else total[0].pow(1.0 / norm_type)
        if error_if_nonfinite and not torch.isfinite(norm):
            raise UserError(
                f"the total gradient norm of order {norm_type} is non-finite: gradients "
                "hold inf or NaN; set error_if_nonfinite=False to clip anyway"
            )
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)
        return norm

    def unscale_grads_(self, inv_scale: torch.Tensor, found_inf: torch.Tensor) -> None:
        """`GradScaler`'s unscale on the reduced gradient pieces the optimizer steps (see
        `cadence.amp`): multiplied by `inv_scale`, then found_inf all-reduced (MAX) over the
        group, so every rank skips the same steps, as under DDP."""
        if self.config.compression == "onebit":
            raise UserError(
                "torch.amp.GradScaler is not supported with onebit compression (1-bit Adam "
                "folds gradients into its momentum during backward): use bf16 autocast without "
                "a scaler, or compression none or fp16"
            )
        from cadence.amp import unscale_local

        self.finish_reductions()
        grads = [
            st.grad[seg.lo : seg.hi]
            for st in self.states if st.grad is not None for seg, _ in st.segments
        ]  # fmt: skip
        unscale_local(inv_scale, found_inf, grads)
        if self.p > 1:
            flag = found_inf.detach().to(self.states[0].shard.device, torch.float32).reshape(1)
            self.submit(lambda: collectives.all_reduce(flag, op="max", group=self.group),
                        None).result()  # fmt: skip
            found_inf.copy_(flag.reshape(found_inf.shape))

    # ----------------------------------------------------------------- parameters
    def gather_task(self, st: BucketState) -> None:
        """Communication thread: fill the bucket's full buffer from every rank's piece."""
        if st.flat.untyped_storage().nbytes() == 0:
            st.flat.untyped_storage().resize_(st.spec.padded * st.flat.element_size())
        src = st.shard.detach()
        if self.p == 1:
            st.flat.copy_(src.to(torch.bfloat16) if self.config.gather_dtype == "bf16" else src)
        elif self.config.gather_dtype == "bf16":
            out = torch.empty(st.spec.padded, dtype=torch.bfloat16, device=src.device)
            collectives.all_gather_into_tensor(
                out, src.to(torch.bfloat16), group=self.gather_group
            )
            st.flat.copy_(out)
        else:
            collectives.all_gather_into_tensor(st.flat, src, group=self.gather_group)

    def gather_all(self) -> None:
        """Start every bucket's parameter all-gather, except those the early update started."""
        for st in self.states:  # forward order: the first block's parameters arrive first
            # An updated bucket's gather is queued behind its update, except a front block's
            # (now); in a replicated bucket every rank updated every piece: no gather at all.
            if not st.updated or (st.forward_gather and not st.replicated):
                st.pending = self.submit_gather(st, st.pending)  # after an early update
            st.updated = False
        if not (self.config.overlap_gather and self.p > 1):
            self.wait_gathers()

    def wait_gathers(self, earlier_only: bool = False) -> None:
        """Block until every started parameter all-gather has landed (`earlier_only`: those
        started before this step's backward; the early update's stay in flight)."""
        for st in self.states:
            if not (earlier_only and st.updated):
                self._wait_gather(st)

    def _wait_gather(self, st: BucketState) -> None:
        if st.pending is not None:
            st.pending.result()
            st.pending = None
            st.gathered = True

    def _wait_gather_hook(self, st: BucketState) -> Callable[[nn.Module, Any], None]:
        return lambda _module, _args: self._wait_gather(st)

    # ----------------------------------------------------------------- memory
    def sample_memory(self) -> None:
        """Record the bytes this rank holds in parameters, gradients and optimizer state."""
        params = sum(st.flat.untyped_storage().nbytes() for st in self.states)
        params += sum(
            st.shard.untyped_storage().nbytes()
            for st in self.states
            if st.shard.untyped_storage().data_ptr() != st.flat.untyped_storage().data_ptr()
        )
        grads = sum(
            p.grad.numel() * p.grad.element_size()
            for st in self.states
            for p in st.params
            if p.grad is not None
        )
        grads += sum(
            st.grad.numel() * st.grad.element_size() for st in self.states if st.grad is not None
        )
        opt = sum(
            t.numel() * t.element_size()
            for s in self.inner.state.values()
            for t in s.values()
            if isinstance(t, torch.Tensor) and t.dim() > 0
        )
        for st in self.states:
            for t in (st.sender_error, st.reducer_error, st.momentum_wire, st.denominator):
                if t is not None:
                    opt += t.numel() * t.element_size()
        now = {"parameters": params, "gradients": grads, "optimizer_state": opt}
        now["total"] = params + grads + opt
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

    def after_update(self) -> None:
        """Bring every rank's full parameters up to date (stage 3 defers this to the hooks)."""
        self.gather_all()

    def zero_grad(self) -> None:
        # Also after a step GradScaler skipped (inf/NaN): the next backward starts a new step.
        self.clear_step()
        for st in self.states:
            st.grad = None
            st.ready.clear()
            if st.used is not None:
                st.used.zero_()
            for p in st.params:
                p.grad = None

    def end_step_bytes(self) -> None:
        with self._lock:
            total = sum(self._bytes.values())
            self.bytes_sent_last_step = {**self._bytes, "total": total}
            self._bytes = {"gradients": 0, "parameters": 0}
