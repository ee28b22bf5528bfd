"""The scheduled data-parallel engine: gradient hooks, a communication thread, ready flags.

- Wait-free: a gradient hook marks each parameter ready the moment its gradient is accumulated.
- The communication thread walks the plan's issue order (identical on every rank), waits until
  a chunk's gradients are ready, and all-reduces it asynchronously with at most `credit` bytes
  in flight, on a process group of its own (so it never interleaves with the main thread's).
- An iteration's updates are released by `optimizer.step()` with the hyper-parameters of that
  moment (or dropped by `zero_grad()`); then each layer is updated as soon as all chunks of its
  parameters are reduced, while the next forward pass runs.
- A forward pre-hook on the module that first reads a parameter (`usemap`) waits only until
  that parameter is updated, so the next forward pass overlaps the updates still to come.
- As in DDP with `find_unused_parameters=True`: a parameter no rank got a gradient for keeps
  grad None and is not updated; one unused on some ranks only contributes zeros. A per-param
  "used" flag is reduced once per iteration, after the last chunk.
- With `DPConfig.compression`, a codec (`dp.compress`) reduces each chunk in place of its
  all-reduce, at the same point of the schedule, and leaves the average in the buffer.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd import Variable

from cadence.comm import ops as comm
from cadence.comm.ops import wire_device
from cadence.comm.process_group import leave_groups
from cadence.dp import clip
from cadence.dp.autotune import Autotuner, TuneResult
from cadence.dp.compress import Codec, make_codec
from cadence.dp.config import DPConfig
from cadence.dp.forward import ForwardSide
from cadence.dp.layers import ModelLayout
from cadence.dp.optimizer import LayerwiseUpdater
from cadence.dp.plan import (
    Chunk,
    DPPlan,
    build_plan,
    default_credit,
    hideable_share,
    one_chunk_suffices,
)
from cadence.dp.reorder import BackwardReorder, deferrable
from cadence.inject import injected_fault

WAIT_POLL_S = 1.0
ONE_CHUNK_PROBE_ITERATIONS = 3
"""One-chunk iterations timed after warm-up before the default plan is chosen (medians): one
all-reduce on the loopback of this machine took 3.8 ms alone and 11 ms inside training."""


class SyncEngine:
    """Runs the plan for one model; one per `cadence.data_parallel` call."""

    def __init__(
        self,
        layout: ModelLayout,
        optimizer: torch.optim.Optimizer,
        config: DPConfig,
        group: Any | None,
        world_size: int,
        root: nn.Module,
    ):
        self.layout = layout
        self.root = root
        self.config = config
        self.group = group
        self.world_size = world_size
        # Threshold and K change under autotuning; the rest of the config does not.
        self._gradient_bytes = sum(info.nbytes for info in layout.infos)
        self._threshold = config.threshold_for(self._gradient_bytes)
        self._k = config.reorder_k
        self.plan: DPPlan = build_plan(
            layout.infos, self._threshold, self._credit(), reorder_k=self._k
        )
        self._replan_at = config.warmup_iterations  # rebuild the plan from this iteration
        # Whether the default plan is worth its chunks is decided from timed one-chunk
        # iterations (`_choose_plan`): until then the whole model is one chunk.
        self._probe_at: int | None = None
        if config.chooses_default_plan(world_size) and len(self.plan.chunks) > 1:
            self._probe_at = config.warmup_iterations + ONE_CHUNK_PROBE_ITERATIONS
            self.plan = build_plan(layout.infos, max(1, self._gradient_bytes), self._credit())
        self._inline_end_s: float | None = None  # when the last one-chunk sync ended
        self._probe_samples: list[tuple[float, float]] = []  # (all-reduce, iteration) seconds
        self.one_chunk_probe: dict[str, Any] | None = None  # what `_choose_plan` measured
        self._synced = 0  # iterations the communication thread has fully finished
        self._snapshot_iter = 0  # backward pass whose ready times `_last_ready_s` holds
        self.waited_s = 0.0  # main-thread seconds forward passes spent waiting for updates
        self.tuner: Autotuner | None = None
        self.tune_result: TuneResult | None = None  # what tuning chose (or loaded)
        num_params = len(layout.params)
        # Parameters are updated together with the others of their front-most layer.
        self._update_params: list[list[int]] = [[] for _ in layout.layers]
        for info in layout.infos:
            self._update_params[info.layer].append(info.index)
        self.updater = LayerwiseUpdater(
            optimizer, [[layout.params[i] for i in group] for group in self._update_params]
        )
        self._cv = threading.Condition()
        self._backward_count = 0  # synchronised backward passes started
        self._reduced = 0  # backward passes whose gradients are reduced, "used" flags resolved
        self._released = 0  # backward passes released by step(), dropped or absorbed
        self._settled = 0  # released backward passes whose updates are all applied
        self._release_kind = "step"  # of the last release: step, drop or absorb
        self._hparams: list[dict[str, Any]] = []  # param_groups' values when step() was called
        self._inline_iter = 0  # the last backward pass the main thread synchronised itself
        self._held = False  # gradients kept past their iteration (absorbed, or under no_sync)
        self.no_sync_depth = 0  # inside `no_sync()`: forwards there start local backward passes
        self._grad_sync = True  # whether the next backward pass synchronises (set by forwards)
        self._local_backward = False  # a no_sync backward pass queued its end callback
        self._closed = False
        self._set_to_none = True  # as the last `zero_grad()` asked
        # Zeros given as gradients this rank did not compute, for the last backward pass.
        self._side: dict[int, torch.Tensor] = {}
        self._in_backward = False
        self._backward_start = 0.0
        self._ready_iter = [0] * num_params  # backward pass in which the grad last became ready
        self._ready_s = [0.0] * num_params
        self._last_ready_s = [0.0] * num_params  # snapshot of the last complete backward
        self._applied = [0] * num_params  # backward passes whose update is applied
        self._error: BaseException | None = None
        rank = dist.get_rank() if dist.is_initialized() else 0
        self._fault = injected_fault(rank, "allreduce")  # tests only (cadence.inject)
        # Compression of each chunk's reduction (None: the fp32 all-reduce, in place).
        self.codec: Codec | None = None
        if group is not None:
            self.codec = make_codec(
                config.compression,
                layout.params,
                world_size,
                rank=config.powersgd_rank,
                start_step=config.powersgd_start_step,
            )
        self.wire_bytes = 0  # gradient bytes this rank handed to collectives, last iteration
        self.wire_bytes_total = 0  # ... over all iterations
        self._iteration_bytes = 0
        # The chunk the communication thread waits for: a gradient hook wakes it only when it
        # completes that chunk, not once per parameter (each wake-up costs a context switch
        # on the cores the backward pass computes on).
        self._awaited: frozenset[int] | None = None
        self._awaited_iter = 0
        self._awaited_missing = 0
        self._hooks = [
            p.register_post_accumulate_grad_hook(self._grad_hook(i))
            for i, p in enumerate(layout.params)
        ]
        self.reorder = self._make_reorder(config.reorder_k)
        self._deferred_params = self.reorder.deferred_params() if self.reorder else set()
        self._local_used = [True] * num_params  # which gradients the last backward pass made
        self.param_ids = frozenset(id(p) for p in layout.params)
        self.forward_side = ForwardSide(self, root, config.broadcast_buffers)
        self._thread = threading.Thread(target=self._comm_loop, name="cadence-dp-comm", daemon=True)
        self._thread.start()
        clip.register(self)

    def _make_reorder(self, k: int | None) -> BackwardReorder | None:
        """Defer weight gradients of Linear/Conv layers when K is before the last layer.

        Layers sharing a parameter with another layer keep autograd's order: their shared
        gradient is complete only when both contributions are in.
        """
        layout = self.layout
        num_layers = len(layout.layers)
        if k is None or k >= num_layers:
            return None
        owners: dict[int, int] = {}
        for params in layout.layer_params:
            for index in params:
                owners[index] = owners.get(index, 0) + 1
        chosen = [
            layer
            for layer, module in enumerate(layout.layers)
            if deferrable(module)
            and module is not self.root  # its forward is already chosen when tuning switches K
            and all(owners[i] == 1 for i in layout.layer_params[layer])
        ]
        return BackwardReorder(
            layout.layers,
            layout.layer_params,
            layout.params,
            chosen,
            k,
            on_grad=self._mark_ready,
            on_activity=self._notice_backward,
        )

    # ----- main-thread side -------------------------------------------------------------
    def _grad_hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:
            # Autograd still visits a deferred weight (with no gradient); the reorder
            # announces it once its gradient is really computed.
            if self.reorder is None or index not in self._deferred_params:
                self._mark_ready(index)

        return hook

    def _mark_ready(self, index: int) -> None:
        if not self._grad_sync:  # under no_sync: the gradient stays local until the next sync
            self._held = True
            return
        with self._cv:
            started = not self._in_backward
            if started:
                self._start_backward()  # the communication thread waits for this
            fresh = self._ready_iter[index] != self._backward_count
            self._ready_iter[index] = self._backward_count
            self._ready_s[index] = time.perf_counter() - self._backward_start
            # A one-chunk plan is synchronised by this thread: nobody waits for a gradient.
            if started or (not self._inline() and self._completes_awaited(index, fresh)):
                self._cv.notify_all()

    def _completes_awaited(self, index: int, fresh: bool) -> bool:
        if self._awaited is None:  # not waiting for a chunk: waking it costs nothing
            return True
        if fresh and self._awaited_iter == self._backward_count and index in self._awaited:
            self._awaited_missing -= 1
        return self._awaited_missing <= 0

    def _notice_backward(self) -> None:
        if not self._grad_sync:
            if not self._local_backward:  # deferred weight gradients still run at its end
                self._local_backward = True
                Variable._execution_engine.queue_callback(self._end_local_backward)
            return
        with self._cv:
            if not self._in_backward:
                self._start_backward()

    def _end_local_backward(self) -> None:
        self._local_backward = False
        if self.reorder is not None:
            self.reorder.run()

    def _start_backward(self) -> None:
        # The gradients of no_sync passes (and of an absorbed iteration) are part of this one.
        self._held = False
        self._in_backward = True
        self._backward_count += 1
        self._backward_start = time.perf_counter()
        # Runs when autograd finishes this backward: parameters that got no gradient (unused
        # this iteration) are declared ready so no rank waits for them forever.
        Variable._execution_engine.queue_callback(self._end_backward)

    def _end_backward(self) -> None:
        if self.reorder is not None:
            self.reorder.run()  # deferred weight gradients, front layers first
        params = self.layout.params
        self._local_used = [p.grad is not None for p in params]
        # A gradient this rank did not compute contributes zeros; they are its gradient from
        # now on, so whatever collects gradients after backward() (a clip) holds the tensor
        # the reduction lands in. Where no rank computed one, `_resolve_unused` takes it away.
        side = {i: torch.zeros_like(p) for i, p in enumerate(params) if not self._local_used[i]}
        for index, zeros in side.items():
            params[index].grad = zeros
        self._side = side  # replaced, never cleared: the other thread may still read the last
        with self._cv:
            for i, it in enumerate(self._ready_iter):
                if it != self._backward_count:
                    self._ready_iter[i] = self._backward_count
                    self._ready_s[i] = time.perf_counter() - self._backward_start
            self._last_ready_s = list(self._ready_s)
            self._snapshot_iter = self._backward_count
            self._in_backward = False
            self._cv.notify_all()
        if self._inline():
            self._sync_inline(self._backward_count)

    def _inline(self) -> bool:
        """Whether the plan is one chunk, synchronised by the main thread at the end of the
        backward pass. The chunk count changes only in `reconfigure`, between iterations with
        the communication thread idle, so both threads read the same answer for an iteration."""
        return len(self.plan.chunks) == 1

    def _sync_inline(self, iteration: int) -> None:
        """A one-chunk plan has nothing to overlap: its chunk is ready only when the backward
        ends, and its one update gates the first forward read. So the main thread reduces here,
        inside the backward's end, and updates in `step()`, with no hand-off to the
        communication thread: on busy cores every hand-off waits for a core's turn."""
        (chunk,) = self.plan.chunks
        start = time.perf_counter()
        num_params = len(self.layout.params)
        if self.codec is not None:
            # Compressed on its own; the "used" flags follow in an all-reduce of their own.
            buffer = self._pack(chunk)
            reduce_start = time.perf_counter()
            work = self._reduce(chunk, buffer, iteration)
            flags = self._flags(self._pack_dtype(chunk))
            comm.all_reduce(flags, group=self.group)
            work.wait()
            wire_s = time.perf_counter() - reduce_start
            self._unpack(chunk, buffer, averaged=True)
            self._resolve_unused(flags)
        else:
            # The "used" flags travel in the same all-reduce, after the gradients.
            buffer = self._pack(chunk, tail=self._flags(self._pack_dtype(chunk)))
            reduce_start = time.perf_counter()
            if self.group is not None:
                self._count_bytes((buffer.numel() - num_params) * buffer.element_size())
                comm.all_reduce(buffer, group=self.group)
            wire_s = time.perf_counter() - reduce_start
            self._unpack(chunk, buffer[:-num_params], copied=True)
            self._resolve_unused(buffer[-num_params:])
        self._end_bytes()
        with self._cv:
            self._inline_iter = iteration
            self._reduced = iteration
            self._cv.notify_all()
        end, previous_end = time.perf_counter(), self._inline_end_s
        self._inline_end_s = end
        if self._probe_at is not None:
            # Warm-up iterations carry set-up costs (connections, first allocations).
            if iteration > self.config.warmup_iterations and previous_end is not None:
                self._probe_samples.append((wire_s, end - previous_end))
            if iteration == self._probe_at:
                self._choose_plan(iteration)
        elif iteration == self._replan_at:
            self._replan(iteration, end - start)

    def _choose_plan(self, iteration: int) -> None:
        """Build the default chunked plan from the last probe iteration's ready times and the
        median reduction rate, and switch to it unless the most it could hide is a small share
        of the iteration (`plan.one_chunk_suffices`). Rank 0's timings decide, so every rank
        keeps or switches plans at the same point."""
        self._probe_at = None
        # The communication thread must have passed this iteration (it skips a one-chunk
        # plan) before the plan changes under it.
        self._wait(lambda: self._synced >= iteration)
        wire_s = statistics.median(w for w, _ in self._probe_samples)
        iteration_s = statistics.median(t for _, t in self._probe_samples)
        *ready, wire_s, iteration_s = self._rank0([*self._last_ready_s, wire_s, iteration_s])
        chunked = self._measured_plan(ready, self._gradient_bytes / max(wire_s, 1e-6))
        chunks = len(chunked.chunks)
        one_chunk = one_chunk_suffices(
            wire_s, iteration_s, chunks, self.config.one_chunk_wire_share
        )
        self.one_chunk_probe = {
            "iterations": iteration,  # ran one chunk, whatever was chosen after them
            "wire_s": wire_s,
            "iteration_s": iteration_s,
            "chunks": chunks,
            "hideable_share": hideable_share(wire_s, iteration_s, chunks),
            "one_chunk": one_chunk,
        }
        if one_chunk:
            self._threshold = self.plan.threshold_bytes
        else:
            self.plan = chunked

    def measured_arrival_order(self) -> tuple[int, ...] | None:
        """Parameter indices in the order the last complete backward pass made their gradients
        ready (this rank's hooks), or None before any backward pass has completed."""
        with self._cv:
            if self._snapshot_iter == 0:
                return None
            ready = list(self._last_ready_s)
        return tuple(sorted(range(len(ready)), key=lambda i: (ready[i], -i)))

    @property
    def threshold_bytes(self) -> int:
        """The threshold the plan is built with now (the config's, the default's or tuning's)."""
        return self._threshold

    def _credit(self) -> int:
        return self.config.credit_bytes or default_credit(self._threshold, self._gradient_bytes)

    def before_forward(self, training: bool) -> None:
        """Pre-hook of the whole model, before any module's `__call__` has picked its forward
        (a switch of K swaps them). An evaluation forward sees every update applied. A training
        forward after a backward pass whose `step()` was never called accumulates onto its
        reduced gradients, as DDP does: that iteration's updates are dropped, its gradients kept.
        It is also an iteration boundary for the autotuner."""
        grad = torch.is_grad_enabled()
        if grad:
            self._grad_sync = self.no_sync_depth == 0
            with self._cv:
                unreleased = self._released < self._backward_count
            if unreleased:
                self._wait(lambda: self._reduced >= self._backward_count)
                self._release("absorb", [])
                self._wait(lambda: self._settled >= self._released)
                self._held = True
        if not (training and grad):
            self.flush()
            return
        if self.tuner is not None:
            self.tuner.before_forward()

    def wait_params(self, params: tuple[int, ...]) -> None:
        """Block until the latest released updates of `params` are applied (a forward gate)."""
        start = time.perf_counter()
        self._wait(
            lambda: self._released < self._backward_count
            or all(self._applied[i] == self._backward_count for i in params)
        )
        end = time.perf_counter()
        self.waited_s += end - start

    def wait_reduced(self) -> None:
        """Block until the latest backward pass's gradients are all reduced (and averaged):
        what reads every gradient between backward and step (clipping, unscaling) needs."""
        self._wait(lambda: self._reduced >= self._backward_count)

    def step(self, hparams: list[dict[str, Any]]) -> None:
        """`optimizer.step()`: release the latest backward pass's updates with `hparams` (the
        param groups' values now). Gradients kept past their iteration (absorbed, or from
        no_sync passes only) are applied at once, as a plain optimizer would."""
        if self._release("step", hparams):
            return
        if self._held:
            self.flush()
            self._held = False
            self._apply_now(self._all_layers(), "step", hparams)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """`optimizer.zero_grad()`: gradients are cleared after each update already; a backward
        pass whose `step()` was never called is dropped, and kept gradients are cleared.
        `set_to_none=False` keeps gradients allocated and zeroes them from then on, as torch
        does: a parameter with a zero gradient counts as used (DDP's rule), so it is updated."""
        self._set_to_none = set_to_none
        self._release("drop", [])
        if self._held:
            self.flush()
            self._held = False
            for index in range(len(self.layout.params)):
                self._clear_grad(index)

    def _release(self, kind: str, hparams: list[dict[str, Any]]) -> bool:
        """Release the latest backward pass if it is not yet: whether it was."""
        with self._cv:
            iteration = self._backward_count
            if self._released >= iteration:
                return False
            self._release_kind, self._hparams = kind, hparams
            self._released = iteration
            inline = self._inline_iter == iteration
            self._cv.notify_all()
        if inline:  # synchronised by this thread: applied here too, no hand-off
            self._apply_layers(self._all_layers(), iteration)
            with self._cv:
                self._settled = iteration
                self._cv.notify_all()
        return True

    def _all_layers(self) -> list[int]:
        return [layer for layer, ps in enumerate(self._update_params) if ps]

    def _apply_now(self, layers: list[int], kind: str, hparams: list[dict[str, Any]]) -> None:
        if kind == "step":
            self.updater.step_many(layers, hparams)
        for layer in layers:
            for index in self._update_params[layer]:
                self._clear_grad(index)

    def _clear_grad(self, index: int) -> None:
        param = self.layout.params[index]
        if self._set_to_none:
            param.grad = None
        elif param.grad is not None:
            param.grad.zero_()

    def reconfigure(self, threshold_bytes: int, reorder_k: int | None) -> None:
        """Switch threshold and K between iterations (main thread, before a forward)."""
        probing, self._probe_at = self._probe_at is not None, None  # a chosen plan is kept
        if (threshold_bytes, reorder_k) == (self._threshold, self._k) and not probing:
            return
        # The communication thread must be idle: it reads the plan and may be re-planning.
        self._wait(lambda: self._synced == self._backward_count)
        with self._cv:
            if reorder_k != self._k:
                if self.reorder is not None:
                    self.reorder.close()
                self.reorder = self._make_reorder(reorder_k)
                self._deferred_params = self.reorder.deferred_params() if self.reorder else set()
            self._threshold, self._k = threshold_bytes, reorder_k
            self.plan = build_plan(
                self.layout.infos, threshold_bytes, self._credit(), reorder_k=reorder_k
            )
            self._replan_at = self._backward_count + 1  # settle: plan from measured timings

    def _wait(self, condition: Callable[[], bool]) -> None:
        with self._cv:
            while not condition():
                if self._error is not None:
                    raise RuntimeError("cadence-dp communication failed") from self._error
                self._cv.wait(WAIT_POLL_S)

    def _quiet(self) -> bool:
        count = self._backward_count
        return self._reduced >= count and (self._released < count or self._settled >= count)

    def flush(self) -> None:
        """Wait until every started backward pass is reduced, and applied if released."""
        self._wait(self._quiet)

    # ----- communication thread ----------------------------------------------------------
    def _comm_loop(self) -> None:
        done = 0
        try:
            while True:
                with self._cv:
                    while self._backward_count == done and not self._closed:
                        self._cv.wait()
                    if self._closed:
                        return
                done += 1
                if not self._inline():  # else the main thread synchronises it
                    self._sync_iteration(done)
                with self._cv:
                    self._synced = done
                    self._cv.notify_all()
        except BaseException as exc:  # surfaced to the main thread by _wait
            with self._cv:
                self._error = exc
                self._cv.notify_all()

    def _sync_iteration(self, iteration: int) -> None:
        plan = self.plan
        remaining = [0] * len(self.layout.params)
        for chunk in plan.chunks:
            for seg in chunk.segments:
                remaining[seg.param] += 1
        layer_left = [0] * len(self.layout.layers)
        for info in self.layout.infos:
            layer_left[info.layer] += 1
        in_flight: deque[tuple[Chunk, torch.Tensor, Any]] = deque()
        in_flight_bytes = 0
        t_first = time.perf_counter()
        pending: list[list[int]] = []  # reduced layers waiting for step() (or the flags)
        needs_flags: list[list[int]] = []  # ... with a parameter this rank got no gradient for

        def complete_oldest() -> None:
            nonlocal in_flight_bytes
            chunk, buffer, work = in_flight.popleft()
            in_flight_bytes -= chunk.nbytes
            if work is not None:
                work.wait()
            self._unpack(chunk, buffer, averaged=self.codec is not None and work is not None)
            done = []
            for seg in chunk.segments:
                remaining[seg.param] -= 1
                if remaining[seg.param] == 0:
                    layer = self.layout.infos[seg.param].layer
                    layer_left[layer] -= 1
                    if layer_left[layer] == 0:
                        done.append(layer)
            if not done:
                return
            done.sort()
            side = self._side  # usually empty: every gradient was computed here
            if side and any(i in side for layer in done for i in self._update_params[layer]):
                needs_flags.append(done)
            else:
                self._offer(done, iteration, pending)

        for chunk_id in plan.issue_order:
            chunk = plan.chunks[chunk_id]
            self._wait_for_chunk(chunk, iteration)
            while in_flight and in_flight_bytes + chunk.nbytes > plan.credit_bytes:
                complete_oldest()
            buffer = self._pack(chunk)
            work = None
            if self.group is not None:
                work = self._reduce(chunk, buffer, iteration)
            if self._fault is not None and self._fault.step + 1 == iteration:
                self._fault.fire("in the gradient all-reduce")
            in_flight.append((chunk, buffer, work))
            in_flight_bytes += chunk.nbytes
        # Which parameters got a gradient on some rank: known once the backward pass has ended
        # (a gradient never computed is ready only then), reduced after the last chunk.
        self._wait(lambda: self._snapshot_iter >= iteration)
        flags = self._flags(self._pack_dtype(plan.chunks[0]))
        flags_work = None
        if self.group is not None:
            flags_work = comm.all_reduce_async(flags, group=self.group)
        while in_flight:
            complete_oldest()
        if flags_work is not None:
            flags_work.wait()
        self._resolve_unused(flags)
        self._end_bytes()
        for layers in needs_flags:
            self._offer(layers, iteration, pending)
        if iteration == self._replan_at:
            self._replan(iteration, time.perf_counter() - t_first)
        with self._cv:
            self._reduced = iteration
            self._cv.notify_all()
        self._wait(lambda: self._released >= iteration or self._closed)
        # In the order their chunks completed, as the simulator runs update tasks.
        for layers in pending:
            self._apply_layers(layers, iteration)
        with self._cv:
            self._settled = max(self._settled, iteration)
            self._cv.notify_all()

    def _offer(self, layers: list[int], iteration: int, pending: list[list[int]]) -> None:
        """Apply reduced `layers` now if their iteration is released, else keep them."""
        with self._cv:
            released = self._released >= iteration
        if released:
            self._apply_layers(layers, iteration)
        else:
            pending.append(layers)

    def _reduce(self, chunk: Chunk, buffer: torch.Tensor, iteration: int) -> Any:
        """Start reducing `chunk`'s packed `buffer`: a summing all-reduce in place, or the
        codec's reduction, which leaves the average in `buffer` when waited on."""
        if self.codec is None:
            self._count_bytes(buffer.numel() * buffer.element_size())
            return comm.all_reduce_async(buffer, group=self.group)
        # A gradient this rank did not compute is ready only once `_side` holds its zeros.
        self.codec.local_unused = self._side
        work = self.codec.start(chunk, buffer, self.group, iteration)
        self._count_bytes(self.codec.last_bytes)
        return work

    def _count_bytes(self, nbytes: int) -> None:
        self._iteration_bytes += nbytes

    def _end_bytes(self) -> None:
        self.wire_bytes, self._iteration_bytes = self._iteration_bytes, 0
        self.wire_bytes_total += self.wire_bytes

    def _pack_dtype(self, chunk: Chunk) -> torch.dtype:
        return self.layout.params[chunk.segments[0].param].dtype

    def _flags(self, dtype: torch.dtype) -> torch.Tensor:
        """1 for each parameter this rank has a gradient for, 0 for the others."""
        return torch.tensor(self._local_used, dtype=dtype, device=self.layout.params[0].device)

    def _resolve_unused(self, flags: torch.Tensor) -> None:
        """Parameters this rank got no gradient for: the reduced zeros become their gradient
        where another rank had one; where no rank had one it stays None (no update)."""
        unapplied = []
        if self._side:
            used = flags.tolist()
            for index in self._side:
                if not used[index] > 0:
                    self.layout.params[index].grad = None
                    unapplied.append(index)
        if self.codec is not None:
            self.codec.settle(unapplied)

    def _wait_for_chunk(self, chunk: Chunk, iteration: int) -> None:
        """Block until every gradient `chunk` holds is ready in backward pass `iteration`."""
        needed = frozenset(seg.param for seg in chunk.segments)
        with self._cv:
            missing = sum(self._ready_iter[i] != iteration for i in needed)
            if missing == 0:
                return
            self._awaited, self._awaited_iter, self._awaited_missing = needed, iteration, missing
            try:
                # The count is a hint for whom to wake; readiness itself is read afresh.
                while not all(self._ready_iter[i] == iteration for i in needed):
                    self._cv.wait(WAIT_POLL_S)
            finally:
                self._awaited = None

    def _grad(self, index: int) -> torch.Tensor:
        grad = self.layout.params[index].grad
        assert grad is not None  # ready means computed, or zeros given at the backward's end
        return grad

    def _pack(self, chunk: Chunk, tail: torch.Tensor | None = None) -> torch.Tensor:
        """The chunk's gradients in one buffer (`tail` appended in the same copy)."""
        views = [
            self._grad(s.param).view(-1)[s.start : s.start + s.length]
            for s in chunk.segments
        ]
        if tail is not None:
            return torch.cat([*views, tail])
        if len(views) == 1:
            return views[0]  # a contiguous slice: reduce in place, no copy
        return torch.cat(views)

    def _unpack(
        self, chunk: Chunk, buffer: torch.Tensor, copied: bool = False, averaged: bool = False
    ) -> None:
        if self.world_size > 1 and not averaged:
            buffer.div_(self.world_size)
        if len(chunk.segments) == 1 and not copied:
            return  # reduced in place
        offset = 0
        for seg in chunk.segments:
            grad = self._grad(seg.param)
            grad.view(-1)[seg.start : seg.start + seg.length].copy_(
                buffer[offset : offset + seg.length]
            )
            offset += seg.length

    def _apply_layers(self, layers: list[int], iteration: int) -> None:
        """Update the layers a chunk completed, in one optimizer call: a fused chunk can
        complete dozens of small layers at once, and one call per layer costs more Python time
        than the arithmetic (30 ms against 5 ms for gpt_mini's 3 MB). Their parameters are
        released together; `layers` is in forward order."""
        with self._cv:
            kind, hparams = self._release_kind, self._hparams
        if kind == "step":
            self.updater.step_many(layers, hparams)
        with self._cv:
            for layer in layers:
                for index in self._update_params[layer]:
                    if kind != "absorb":  # an absorbed iteration's gradients are accumulated on
                        self._clear_grad(index)
                    self._applied[index] = iteration
            self._cv.notify_all()

    def _replan(self, iteration: int, comm_seconds: float) -> None:
        """Rebuild the plan from warm-up timings; rank 0's figures, so every rank agrees."""
        rate = sum(c.nbytes for c in self.plan.chunks) / max(comm_seconds, 1e-6)
        self._wait(lambda: self._snapshot_iter >= iteration)  # that backward's ready times
        *ready, link = self._rank0([*self._last_ready_s, rate])
        self.plan = self._measured_plan(ready, link)

    def _rank0(self, values: list[float]) -> list[float]:
        """`values` as rank 0 measured them: every rank plans from the same figures."""
        measured = torch.tensor(values, dtype=torch.float64, device=wire_device(self.group))
        if self.group is not None:
            comm.broadcast(measured, src=dist.get_global_rank(self.group, 0), group=self.group)
        return measured.tolist()

    def _measured_plan(self, ready_s: list[float], link_bytes_per_s: float) -> DPPlan:
        """The plan at the current threshold and K from measured gradient ready times and link
        rate (the config's rate, where given, wins)."""
        return build_plan(
            self.layout.infos,
            self._threshold,
            self._credit(),
            ready_s=ready_s,
            link_bytes_per_s=self.config.link_bytes_per_s or link_bytes_per_s,
            reorder_k=self._k,
        )

    def compression_state_dict(self) -> dict[str, Any]:
        """The codec's state (error feedback, PowerSGD's Q), for a checkpoint; empty for none."""
        self.flush()
        return self.codec.state_dict() if self.codec is not None else {}

    def load_compression_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `compression_state_dict` returned (same model, same compression)."""
        self.flush()
        if self.codec is not None and state:
            self.codec.load_state_dict(state)

    def close(self) -> None:
        """Drop a backward pass never stepped, wait for the rest, stop the thread, unhook, and
        leave the engine's process group (its connections and I/O thread go with it)."""
        self._release("drop", [])
        self.flush()
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()
        clip.unregister(self)
        self.forward_side.close()
        for handle in self._hooks:
            handle.remove()
        if self.reorder is not None:
            self.reorder.close()
        leave_groups(self.group)  # data_parallel made it for this engine alone
        self.group = None
