"""The worker's side of the transport: a communication thread that owns every channel socket.

The training thread never touches a TCP socket: it hands messages to the communication thread
over an in-process pair socket, and waits on per-block ready flags that the communication
thread sets as soon as the last slice of a block has arrived (written straight into the
parameters). A wait that outlasts the timeout fails naming the server that did not answer.
The communication thread also sends the servers heartbeats, and hears from them when another
worker was declared dead (see `cadence.ps.server`): under bsp the next wait fails naming it.
It signs every message it sends and verifies every one it receives (`cadence.ps.auth`); a
message from the servers that does not verify is counted (`unauthenticated`) and dropped.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import zmq

from cadence.ps.auth import TO_SERVER, TO_WORKER, Signer, Unauthenticated, Verifier
from cadence.ps.plan import PSPlan
from cadence.ps.wire import Header, Kind, channel_socket

_CHECK_S = 0.5


class ServerTimeout(RuntimeError):
    """A server did not answer in time (dead, or unreachable)."""


class WorkerDead(RuntimeError):
    """The servers declared a worker dead and the run cannot go on without it (bsp), or this
    worker itself was declared dead."""


@dataclass(frozen=True)
class Liveness:
    """Heartbeat settings of one worker."""

    heartbeat_s: float
    """Seconds between heartbeats to every server."""
    dead_after_s: float
    """Silence after which the servers declare a worker dead (for the error messages)."""


class WorkerChannels:
    """Channels to every server and the per-block ready flags of one worker."""

    def __init__(
        self,
        plan: PSPlan,
        rank: int,
        addresses: Sequence[tuple[str, Sequence[int]]],
        params: Sequence[torch.Tensor],
        num_blocks: int,
        timeout_s: float,
        secret: bytes,
        liveness: Liveness | None = None,
    ) -> None:
        self.plan, self.rank, self.timeout_s = plan, rank, timeout_s
        # Both used by the communication thread only: sequence numbers follow send order.
        self._signer = Signer(secret, TO_SERVER)
        self._verifier = Verifier(secret, TO_WORKER)
        self.unauthenticated = 0
        """Messages from the servers' side that did not verify (dropped)."""
        self.liveness = liveness
        self.dead_workers: list[int] = []
        """Workers the servers declared dead (and this one trains on without)."""
        self.fatal: WorkerDead | None = None
        self.flat = [p.data.view(-1) for p in params]
        self.block_of_key = [plan.params[s.param].block for s in plan.slices]
        self.ready = [threading.Event() for _ in range(num_blocks)]
        for event in self.ready:
            event.set()
        self.pending = [0] * num_blocks
        self.versions = [0] * len(plan.slices)
        self.min_clocks = [0] * len(plan.slices)
        self._lock = threading.Lock()  # pending counts and flags
        self._send_lock = threading.Lock()  # the pair socket (separate: a full send must not
        # block the communication thread's bookkeeping)
        self._stats: queue.SimpleQueue[dict[str, float]] = queue.SimpleQueue()
        self.states: queue.SimpleQueue[tuple[int, bytes]] = queue.SimpleQueue()
        """Answers to STATE requests: (slice key, the optimizer state's float32 bytes)."""
        self.error: BaseException | None = None
        # Counters for the run's metrics: payload bytes each way and per class (channel),
        # and the training thread's time spent waiting for parameters.
        self.bytes_pushed = 0
        self.bytes_pulled = 0
        self.class_bytes = [0] * plan.classes
        self.wait_s = 0.0
        self.check: Callable[[], None] | None = None
        """Called while waiting: raises if a server this process started has died."""
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        endpoint = f"inproc://ps-worker-{id(self)}"
        self._inbox = self.ctx.socket(zmq.PAIR)
        self._inbox.bind(endpoint)
        self._outbox = self.ctx.socket(zmq.PAIR)
        self._outbox.connect(endpoint)
        self._thread = threading.Thread(
            target=self._run, args=(addresses,), name="ps-comm", daemon=True
        )
        self._thread.start()

    # --- training thread ---------------------------------------------------------------------
    def send(self, server: int, klass: int, header: Header, payload: bytes = b"") -> None:
        with self._send_lock:  # autograd hooks and the training thread share the pair socket
            self._outbox.send_multipart([bytes([server, klass]), header.pack(), payload])
            if header.kind == Kind.PUSH:
                self.bytes_pushed += len(payload)
                self.class_bytes[klass] += len(payload)

    def expect(self, keys: Sequence[int]) -> None:
        """Mark the blocks of `keys` not ready until their answers arrive (call before pulling)."""
        with self._lock:
            for key in keys:
                block = self.block_of_key[key]
                self.pending[block] += 1
                self.ready[block].clear()

    def wait_block(self, block: int) -> None:
        """Wait for a block's parameters; fail at once if `check` reports a dead server, or
        after the timeout naming the servers that owe them."""
        if self.ready[block].is_set():
            self._raise_if_failed()
            return
        start = time.monotonic()
        try:
            self._wait_block(block, start + self.timeout_s)
        finally:
            self.wait_s += time.monotonic() - start

    def _wait_block(self, block: int, deadline: float) -> None:
        while not self.ready[block].wait(min(_CHECK_S, max(0.0, deadline - time.monotonic()))):
            self._raise_if_failed()
            if self.check is not None:
                self.check()
            if time.monotonic() >= deadline:
                servers = sorted(
                    {s.server for s in self.plan.slices if self.block_of_key[s.key] == block}
                )
                raise ServerTimeout(
                    f"worker {self.rank}: parameter server(s) {servers} sent no parameters for "
                    f"block {block} within {self.timeout_s:.0f} s (dead or unreachable?)"
                )
        self._raise_if_failed()

    def wait_all(self) -> None:
        for block in range(len(self.ready)):
            self.wait_block(block)

    def stop(self, servers: int) -> list[dict[str, float]]:
        """Say STOP to every server on every channel, collect the servers' final statistics
        (sent once all workers stopped), end the thread."""
        for server in range(servers):
            for klass in range(self.plan.classes):
                self.send(server, klass, Header(Kind.STOP, 0, self.rank, 0, 0))
        stats = []
        for _ in range(servers):
            try:
                stats.append(self._stats.get(timeout=self.timeout_s))
            except queue.Empty:
                self._raise_if_failed()
                raise ServerTimeout(f"worker {self.rank}: a server did not confirm STOP") from None
        with self._send_lock:
            self._outbox.send_multipart([b"quit"])
        self._thread.join(timeout=5)
        self._outbox.close()
        self._inbox.close()
        self.ctx.term()
        return stats

    def counters(self) -> dict[str, Any]:
        """This worker's traffic and waiting so far (JSON-safe)."""
        return {
            "bytes_pushed": self.bytes_pushed,
            "bytes_pulled": self.bytes_pulled,
            "bytes_per_class": list(self.class_bytes),
            "param_wait_s": self.wait_s,
            "dead_workers": list(self.dead_workers),
            "unauthenticated": self.unauthenticated,
        }

    def _raise_if_failed(self) -> None:
        if self.fatal is not None:
            raise self.fatal
        if self.error is not None:
            raise RuntimeError(f"worker {self.rank}: communication thread failed") from self.error

    # --- communication thread ----------------------------------------------------------------
    def _run(self, addresses: Sequence[tuple[str, Sequence[int]]]) -> None:
        dealers: list[list[zmq.Socket[bytes]]] = []
        where: dict[zmq.Socket[bytes], tuple[int, int]] = {}  # socket -> (server, channel)
        try:
            poller = zmq.Poller()
            poller.register(self._inbox, zmq.POLLIN)
            for host, ports in addresses:
                row = []
                for klass, port in enumerate(ports):
                    sock = channel_socket(self.ctx, zmq.DEALER, klass)
                    sock.setsockopt(zmq.IDENTITY, f"w{self.rank}".encode())
                    sock.connect(f"tcp://{host}:{port}")
                    poller.register(sock, zmq.POLLIN)
                    where[sock] = (len(dealers), klass)
                    row.append(sock)
                dealers.append(row)
            beat = self.liveness.heartbeat_s if self.liveness is not None else None
            next_beat = time.monotonic()
            while True:
                if beat is not None and time.monotonic() >= next_beat:
                    # From this thread, so a worker busy in a long evaluation stays alive.
                    alive = Header(Kind.HEARTBEAT, 0, self.rank, 0, 0).pack()
                    for server in range(len(dealers)):
                        self._send(dealers, server, 0, alive, b"")
                    next_beat = time.monotonic() + beat
                timeout_ms = (
                    None if beat is None else max(1, int(1000 * (next_beat - time.monotonic())))
                )
                for sock, _ in poller.poll(timeout_ms):
                    if sock is self._inbox:
                        frames = sock.recv_multipart()
                        if frames[0] == b"quit":
                            return
                        self._send(dealers, frames[0][0], frames[0][1], *frames[1:])
                    else:
                        while True:
                            try:
                                received = sock.recv_multipart(zmq.NOBLOCK)
                            except zmq.Again:
                                break
                            if self._authentic(*where[sock], received):
                                self._receive(dealers, *where[sock], received)
        except BaseException as exc:  # surfaced to the training thread by the next wait
            self.error = exc
        finally:
            for row in dealers:
                for sock in row:
                    sock.close(linger=0)

    def _send(
        self,
        dealers: list[list[zmq.Socket[bytes]]],
        server: int,
        klass: int,
        header: bytes,
        payload: bytes,
    ) -> None:
        auth = self._signer.sign(server, self.rank, klass, header, payload)
        dealers[server][klass].send_multipart([header, payload, auth])

    def _authentic(self, server: int, klass: int, frames: list[bytes]) -> bool:
        """Whether `frames` are a fresh message signed by this job's server `server`."""
        try:
            if len(frames) != 3:
                raise Unauthenticated(f"{len(frames)} frames, expected 3")
            header, payload, auth = frames
            self._verifier.verify(server, self.rank, klass, header, payload, auth)
        except Unauthenticated:
            self.unauthenticated += 1
            return False
        return True

    def _dead(self, worker: int, fatal: bool) -> None:
        if worker in self.dead_workers:
            return  # every server tells
        self.dead_workers.append(worker)
        after = f"{self.liveness.dead_after_s:g} s" if self.liveness else "too long"
        if worker == self.rank:
            self.fatal = WorkerDead(
                f"worker {self.rank}: the parameter servers heard nothing from this worker for "
                f"{after} and declared it dead; they no longer take its messages"
            )
        elif fatal:
            self.fatal = WorkerDead(
                f"worker {worker} sent the parameter servers nothing for {after} (dead?): "
                f"bsp cannot make a step without it; --consistency asp, ssp:S or backup:K "
                f"train on without a dead worker"
            )

    def _receive(
        self, dealers: list[list[zmq.Socket[bytes]]], server: int, klass: int, frames: list[bytes]
    ) -> None:
        header = Header.unpack(frames[0])
        if header.kind == Kind.STATS:
            self._stats.put(json.loads(frames[1]))
            return
        if header.kind == Kind.DEAD:
            self._dead(header.extra, fatal=bool(header.step))
            return
        if header.kind == Kind.STATE:
            self.states.put((header.key, frames[1]))
            return
        if header.kind != Kind.PARAM:
            raise ValueError(f"worker got a {header.kind.name} message")
        piece = self.plan.slices[header.key]
        target = self.flat[piece.param][piece.start : piece.start + piece.length]
        target.copy_(torch.frombuffer(bytearray(frames[1]), dtype=torch.float32))
        # Acknowledge on the same channel: returns the server's send credit (its window).
        ack = Header(Kind.ACK, header.priority, self.rank, header.key, header.step, 0, header.numel)
        self._send(dealers, server, klass, ack.pack(), b"")
        self.versions[header.key] = header.step
        self.bytes_pulled += len(frames[1])
        self.class_bytes[piece.klass] += len(frames[1])
        self.min_clocks[header.key] = header.extra
        block = self.block_of_key[header.key]
        with self._lock:
            self.pending[block] -= 1
            if self.pending[block] == 0:
                self.ready[block].set()
