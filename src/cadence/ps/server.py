"""A parameter server: `python -m cadence.ps.server` reads its JSON settings from stdin, binds
one ROUTER socket per priority class, prints `{"ports": [...]}` and serves until every worker
has said STOP on every channel (or its parent process is gone).

It owns some slices; each has a value, its own optimizer (`cadence.ps.optim`: elementwise, so
per-slice optimizers compute what one optimizer over the whole model would), a version (updates
applied) and the pulls waiting for it. Messages are drained from all channels and handled most
urgent first. Consistency decides when a gradient is applied and when a pull may be answered:
  bsp       apply the mean of all W gradients of step v; answer a pull for step t once v >= t
  backup:K  the same with the first K gradients of step v; later ones are dropped and counted
  asp       apply each gradient (divided by W) on arrival; answer every pull at once
  ssp:S     apply like asp; answer a pull for step t once every worker has pushed t - S steps
STATE and LOAD read and replace a slice's optimizer state (`SliceOptimizer.export`): the
workers' `optimizer.state_dict()` / `load_state_dict()`.
A PUSH may carry its param_group's hyperparameters (`PUSH_HYPER`: the slice's optimizer uses
them from that update on) and may say the worker had no gradient (`PUSH_NO_GRAD`): a bsp or
backup step in which no gradient came leaves the slice alone, as torch does.
Every message is signed with the job's secret (`cadence.ps.auth`): one that does not verify
(a stranger's, another job's, a replay) is counted as `unauthenticated` and never looked at
further; the server signs its answers the same way. The server listens on the one address
its settings name (`bind`, the address the job's workers reach it at; 127.0.0.1 if absent).
Bad messages (malformed, unknown slice, wrong size or dtype) are counted and never applied.
Every worker's communication thread sends heartbeats; a worker heard from once and then silent
for `dead_after_s` is declared dead: its pending answers are dropped, every live worker is told
(in bsp that ends the run: no step can be made without it) and asp, ssp and backup go on with
the others (ssp's bound and backup's K then count live workers only). Whatever a dead worker
still sends is dropped, and it is told it was declared dead.
The server imports no torch, so it starts in a fraction of a second.
"""

from __future__ import annotations

import heapq
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from cadence.ps import checkpoint
from cadence.ps.auth import TO_SERVER, TO_WORKER, Signer, Unauthenticated, Verifier, parse_secret
from cadence.ps.config import parse_consistency
from cadence.ps.optim import SliceOptimizer
from cadence.ps.wire import (
    FLOAT32,
    HYPER_KEYS,
    PUSH_HYPER,
    PUSH_NO_GRAD,
    BadMessage,
    Header,
    Kind,
    channel_socket,
)

_POLL_MS = 500


@dataclass
class SliceState:
    """One slice on this server."""

    key: int
    """`Slice.key`."""
    priority: int
    """The slice's priority (0 = most urgent), echoed in every answer's header."""
    klass: int
    """Channel (priority class) its answers leave on."""
    value: np.ndarray
    """Current float32 values."""
    optimizer: SliceOptimizer
    """This slice's optimizer state."""
    initialized: bool = False
    """Worker 0's INIT has arrived; no pull is answered before."""
    version: int = 0
    """Updates applied so far."""
    grad_sum: np.ndarray | None = None
    """bsp/backup: sum of the gradients of step `version` received so far."""
    count: int = 0
    """bsp/backup: how many gradients `grad_sum` holds."""
    with_grad: int = 0
    """bsp/backup: how many of them carried a gradient (not `PUSH_NO_GRAD`)."""
    clocks: list[int] = field(default_factory=list)
    """ssp: steps each worker has pushed for this slice."""
    waiting: list[tuple[int, int]] = field(default_factory=list)
    """Pulls not answered yet: (worker, step)."""


class Server:
    """The serving loop; see the module docstring."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.workers = int(settings["workers"])
        self.mode, self.bound = parse_consistency(settings["consistency"])
        self.parent = int(settings.get("parent_pid", 0))
        self.index = int(settings.get("server", 0))
        secret = parse_secret(str(settings.get("secret", "")))  # required: no open servers
        self.verifier = Verifier(secret, TO_SERVER)
        self.signer = Signer(secret, TO_WORKER)
        self.slices: dict[int, SliceState] = {}
        for key, length, priority, klass in settings["slices"]:
            value = np.zeros(int(length), np.float32)
            opt = SliceOptimizer(settings["optimizer"], value.size, settings["optimizer_kwargs"])
            self.slices[key] = SliceState(
                key, priority, klass, value, opt, clocks=[0] * self.workers
            )
        # Checkpoints: restored before any socket exists (a mismatch ends us at start-up);
        # a restored server ignores INIT values (worker 0 sends its fresh model's).
        path = settings.get("checkpoint")
        self.checkpoint = None if path is None else Path(path)
        self.checkpoint_every = int(settings.get("checkpoint_every", 0))
        self.restored = self.checkpoint is not None and self.checkpoint.exists()
        if self.restored:
            assert self.checkpoint is not None
            checkpoint.restore(self.checkpoint, self.slices)
        self._snapshots: dict[int, dict[int, dict[str, Any]]] = {}  # version -> key -> state
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.routers = [
            channel_socket(self.ctx, zmq.ROUTER, c) for c in range(int(settings["classes"]))
        ]
        host = settings.get("bind") or "127.0.0.1"
        self.ports = [s.bind_to_random_port(f"tcp://{host}") for s in self.routers]
        self.stats = {
            "applied": 0, "dropped": 0, "rejected": 0, "unauthenticated": 0, "received": 0
        }  # fmt: skip
        self.stopped: set[tuple[int, int]] = set()
        self._serving_since = time.process_time()  # reset when `serve` starts
        self._seq = 0
        # Answers wait here, most urgent first, while a worker's unacknowledged bytes would
        # exceed the window: then an urgent answer that becomes ready later overtakes the
        # queued ones instead of queueing behind them in socket buffers (0: no window).
        self.window = int(settings.get("window_bytes", 0))
        self.outbox: list[list[tuple[int, int, int, list[bytes]]]] = [
            [] for _ in range(self.workers)
        ]
        self.in_flight = [0] * self.workers
        # backup: workers pausing (between epochs, or done) after pushing the step noted here;
        # a step is then made from fewer than K gradients rather than never.
        self.idle: list[int | None] = [None] * self.workers
        # Liveness: when each worker was last heard from (None: not yet), and who is dead.
        self.dead_after_s = float(settings.get("dead_after_s", 0.0))  # 0: never declared dead
        self.last_seen: list[float | None] = [None] * self.workers
        self.dead: set[int] = set()
        self.stats["dead_workers"] = 0

    def serve(self) -> None:
        # The final counters report the processor time spent serving (`_maybe_finish`): per
        # slice and worker a step takes a PUSH, a PULL and an ACK and sends a PARAM, each
        # verified or signed and parsed in Python, on top of the optimizer's arithmetic.
        self._serving_since = time.process_time()
        poller = zmq.Poller()
        for sock in self.routers:
            poller.register(sock, zmq.POLLIN)
        while len(self.stopped) < self.workers * len(self.routers):
            ready = dict(poller.poll(_POLL_MS))
            self._check_workers(time.monotonic())
            if not ready:
                if self.parent and os.getppid() != self.parent:
                    return  # the process that started us is gone: nobody will say STOP
                continue
            queue: list[tuple[int, int, int, Header, bytes]] = []
            for klass, sock in enumerate(self.routers):
                while sock in ready:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    # Verified in arrival order (sequence numbers grow along a channel),
                    # before the queue reorders by priority.
                    header = self.admit(klass, frames)
                    if header is not None:
                        self._seq += 1
                        item = (header.priority, self._seq, klass, header, frames[2])
                        heapq.heappush(queue, item)
            while queue:  # most urgent first, whatever channel it came on
                _, _, klass, header, payload = heapq.heappop(queue)
                self.handle(klass, header, payload)
        self.close()

    def close(self) -> None:
        if self.checkpoint is not None:  # a clean stop always leaves the final state
            snaps = {key: checkpoint.snapshot(state) for key, state in self.slices.items()}
            checkpoint.save(self.checkpoint, snaps)
        for sock in self.routers:
            sock.close(linger=1000)  # let the last answers (STATS) leave
        self.ctx.term()

    def admit(self, klass: int, frames: list[bytes]) -> Header | None:
        """The header of a message signed by a worker of this job, fresh on channel `klass`;
        None (counted) for anything else: a stranger's, another job's, a replay. The claimed
        worker is part of what is signed."""
        self.stats["received"] += 1
        try:
            if len(frames) != 4:
                raise Unauthenticated(f"{len(frames)} frames, expected 4")
            _, raw, payload, auth = frames
            try:
                header = Header.unpack(raw)
            except BadMessage:
                raise Unauthenticated("no header") from None
            self.verifier.verify(self.index, header.worker, klass, raw, payload, auth)
        except Unauthenticated:
            self.stats["unauthenticated"] += 1  # never applied, never answered
            return None
        return header

    def handle(self, klass: int, header: Header, payload: bytes) -> None:
        """Act on an admitted message."""
        try:
            if not 0 <= header.worker < self.workers:
                raise BadMessage(f"worker {header.worker} of {self.workers}")
            if header.worker in self.dead:
                self._tell(header.worker, header.worker, fatal=True)
                self.stats["dropped"] += 1  # too late: it was declared dead
                return
            self.last_seen[header.worker] = time.monotonic()
            if header.kind == Kind.HEARTBEAT:
                return
            if header.kind == Kind.STOP:
                self._stop(header.worker, klass)
                return
            if header.kind == Kind.IDLE:
                self.idle[header.worker] = header.step
                for waiting in self.slices.values():
                    self._complete(waiting)
                return
            state = self.slices.get(header.key)
            if state is None:
                raise BadMessage(f"slice {header.key} is not on this server")
            if header.kind in (Kind.INIT, Kind.PUSH):
                values = _values(header, payload, state)
                if header.kind == Kind.PUSH and header.extra & PUSH_HYPER:
                    hyper = values[state.value.size :].tolist()
                    state.optimizer.set_hyper(dict(zip(HYPER_KEYS, hyper, strict=True)))
                    values = values[: state.value.size]
                if header.kind == Kind.INIT:
                    if not self.restored:
                        state.value[:] = values
                    state.initialized = True
                else:
                    self._push(state, header, values)
            elif header.kind == Kind.PULL:
                state.waiting.append((header.worker, header.step))
            elif header.kind == Kind.STATE:
                data = state.optimizer.export()
                reply = Header(Kind.STATE, state.priority, header.worker, state.key,
                               state.version, 0, data.size)  # fmt: skip
                self._send(klass, header.worker, [reply.pack(), data.tobytes()])
                return
            elif header.kind == Kind.LOAD:
                if header.numel * 4 != len(payload):
                    raise BadMessage(f"{len(payload)} bytes for {header.numel} values")
                try:
                    state.optimizer.load(np.frombuffer(payload, np.float32), state.value.size)
                except ValueError as exc:
                    raise BadMessage(str(exc)) from None
                return
            elif header.kind == Kind.ACK:
                self.in_flight[header.worker] -= 4 * min(header.numel, state.value.size)
                self.in_flight[header.worker] = max(0, self.in_flight[header.worker])
                self._flush(header.worker)
                return
            else:
                raise BadMessage(f"a server does not accept {header.kind.name}")
            self._answer(state)
        except BadMessage:
            self.stats["rejected"] += 1  # never applied

    def _send(self, klass: int, worker: int, frames: list[bytes]) -> None:
        """Send header and payload to `worker` on channel `klass`, signed."""
        header, payload = frames
        auth = self.signer.sign(self.index, worker, klass, header, payload)
        self.routers[klass].send_multipart([f"w{worker}".encode(), header, payload, auth])

    def _stop(self, worker: int, klass: int) -> None:
        """A worker says STOP on every channel (each channel is ordered, so everything it sent
        before has been handled); once all have, every worker gets the final counters."""
        self.stopped.add((worker, klass))
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if len(self.stopped) < self.workers * len(self.routers):
            return
        cpu_s = time.process_time() - self._serving_since
        stats = json.dumps({**self.stats, "cpu_s": round(cpu_s, 6)}).encode()
        for w in sorted(set(range(self.workers)) - self.dead):
            self._send(0, w, [Header(Kind.STATS, 0, w, 0, 0).pack(), stats])

    def _check_workers(self, now: float) -> None:
        """Declare dead every worker silent for longer than `dead_after_s` (one that has said
        STOP is done, not dead; one never heard from is still starting)."""
        if not self.dead_after_s:
            return
        done = {w for w, _ in self.stopped}
        for worker, seen in enumerate(self.last_seen):
            if worker in self.dead or worker in done or seen is None:
                continue
            if now - seen > self.dead_after_s:
                self._declare_dead(worker)

    def _declare_dead(self, worker: int) -> None:
        self.dead.add(worker)
        self.stats["dead_workers"] += 1
        self.outbox[worker].clear()
        self.in_flight[worker] = 0
        for klass in range(len(self.routers)):
            self.stopped.add((worker, klass))  # nobody waits for its STOP
        # Everyone alive hears it, also workers that said STOP and wait for the final STATS
        # (sent after this notice): they all end knowing the same dead workers.
        for live in sorted(set(range(self.workers)) - self.dead):
            self._tell(live, worker, fatal=self.mode == "bsp")
        if self.mode != "bsp":  # fewer workers now make a step (backup) or bound it (ssp)
            for state in self.slices.values():
                self._complete(state)
                self._answer(state)
        self._maybe_finish()

    def _tell(self, to: int, dead: int, fatal: bool) -> None:
        notice = Header(Kind.DEAD, 0, to, 0, int(fatal), dead)
        self._send(0, to, [notice.pack(), b""])

    def _push(self, state: SliceState, header: Header, grad: np.ndarray) -> None:
        if self.mode in ("asp", "ssp"):
            self._apply(state, grad / self.workers)
            state.clocks[header.worker] = max(state.clocks[header.worker], header.step + 1)
            return
        rested = self.idle[header.worker]
        if rested is not None and header.step > rested:
            self.idle[header.worker] = None  # back at work
        need = self._need()
        if header.step != state.version or state.count >= need:
            if self.mode == "bsp":
                raise BadMessage(f"BSP gradient for step {header.step} at version {state.version}")
            self.stats["dropped"] += 1  # backup: a late worker's gradient
            return
        if state.grad_sum is None:
            state.grad_sum = grad.copy()
        else:
            state.grad_sum += grad
        state.count += 1
        state.with_grad += 0 if header.extra & PUSH_NO_GRAD else 1
        self._complete(state)

    def _need(self) -> int:
        """Gradients that make a step: W (bsp), or K, fewer if fewer are at work (backup)."""
        if self.mode == "bsp":
            return self.workers
        working = sum(1 for w, step in enumerate(self.idle) if step is None and w not in self.dead)
        return max(1, min(self.bound, working))

    def _complete(self, state: SliceState) -> None:
        """Apply the step once enough gradients are in, and answer whoever waits."""
        if self.mode in ("bsp", "backup") and state.count and state.count >= self._need():
            assert state.grad_sum is not None
            if state.with_grad:
                self._apply(state, state.grad_sum / state.count)
            else:  # no worker had a gradient: torch's optimizers leave such a parameter alone
                state.version += 1
            state.grad_sum, state.count, state.with_grad = None, 0, 0
            self._answer(state)

    def _apply(self, state: SliceState, grad: np.ndarray) -> None:
        state.optimizer.step(state.value, grad)
        state.version += 1
        self.stats["applied"] += 1
        if self.checkpoint is not None and self.checkpoint_every:
            self._maybe_checkpoint(state)

    def _maybe_checkpoint(self, state: SliceState) -> None:
        """Snapshot a slice at every `checkpoint_every`-th version; write the file once every
        slice of this server has a snapshot of that version."""
        if state.version % self.checkpoint_every:
            return
        snaps = self._snapshots.setdefault(state.version, {})
        snaps[state.key] = checkpoint.snapshot(state)
        if len(snaps) == len(self.slices):
            assert self.checkpoint is not None
            checkpoint.save(self.checkpoint, snaps)
            for version in [v for v in self._snapshots if v <= state.version]:
                del self._snapshots[version]

    def _ready(self, state: SliceState, step: int) -> bool:
        if not state.initialized:
            return False
        if self.mode == "asp":
            return True
        if self.mode == "ssp":
            return self._slowest(state) >= step - self.bound
        return state.version >= step

    def _slowest(self, state: SliceState) -> int:
        """The clock of the slowest live worker (dead ones no longer hold anyone back)."""
        live = [c for w, c in enumerate(state.clocks) if w not in self.dead]
        return min(live, default=min(state.clocks))

    def _answer(self, state: SliceState) -> None:
        keep = []
        for worker, step in state.waiting:
            if worker in self.dead:
                continue  # nobody to answer any more
            if not self._ready(state, step):
                keep.append((worker, step))
                continue
            header = Header(
                Kind.PARAM,
                state.priority,
                worker,
                state.key,
                state.version,
                self._slowest(state),
                state.value.size,
            )
            frames = [header.pack(), state.value.tobytes()]
            self._seq += 1
            heapq.heappush(self.outbox[worker], (state.priority, self._seq, state.klass, frames))
            self._flush(worker)
        state.waiting = keep

    def _flush(self, worker: int) -> None:
        """Send queued answers to `worker`, most urgent first, while the window allows (one
        answer may always be in flight)."""
        queue = self.outbox[worker]
        while queue:
            size = len(queue[0][3][1])
            if (
                self.window
                and self.in_flight[worker]
                and self.in_flight[worker] + size > self.window
            ):
                return
            _, _, klass, frames = heapq.heappop(queue)
            self._send(klass, worker, frames)
            self.in_flight[worker] += size


def _values(header: Header, payload: bytes, state: SliceState) -> np.ndarray:
    if header.dtype != FLOAT32:
        raise BadMessage(f"dtype code {header.dtype}, expected float32")
    size = state.value.size
    if header.kind == Kind.PUSH and header.extra & PUSH_HYPER:
        size += len(HYPER_KEYS)
    if header.numel != size or len(payload) != 4 * header.numel:
        raise BadMessage(f"{len(payload)} bytes for slice {state.key} of {state.value.size}")
    return np.frombuffer(payload, dtype=np.float32)


def main() -> int:
    settings = json.loads(sys.stdin.readline())
    try:
        server = Server(settings)
    except (ValueError, zmq.ZMQError) as exc:  # e.g. a checkpoint of another model, an
        # address not on this host: one line, in the log
        print(f"parameter server: {exc}", file=sys.stderr, flush=True)
        return 2
    print(json.dumps({"ports": server.ports}), flush=True)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
