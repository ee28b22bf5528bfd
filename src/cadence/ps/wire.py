"""Message format and channel sockets (ZeroMQ; torch-free).

Every message is two frames: a 25-byte header and a payload (raw float32 values, or JSON for
statistics). The header carries the priority, so a receiver can serve urgent messages first
whichever channel they came on. A channel is one socket per (worker, server, priority class);
each marks its packets with its class's DSCP value (IP TOS byte = DSCP << 2), which lets
switch-port priority classes (htb + u32 on the TOS byte) serve them first across hosts.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import zmq

from cadence.ps.config import DSCP

MAGIC = b"CP"
VERSION = 1
_HEADER = struct.Struct("!2sBBHHIiiIB")
HEADER_BYTES = _HEADER.size
FLOAT32 = 1


class Kind(IntEnum):
    """What a message asks for or carries."""

    INIT = 1  # worker 0 -> server: a slice's initial value
    PUSH = 2  # worker -> server: a gradient for step `step`, `extra` = PUSH_* flags
    PULL = 3  # worker -> server: send the slice once fresh enough for step `step`
    PARAM = 4  # server -> worker: the slice's value at version `step`, `extra` = min clock
    STOP = 5  # worker -> server: this worker is done
    STATS = 6  # server -> worker: JSON counters, the answer to STOP
    ACK = 7  # worker -> server: a PARAM of `numel` elements arrived (returns send credit)
    IDLE = 8  # worker -> server: pausing after pushing step `step` (backup: do not wait for me)
    HEARTBEAT = 9  # worker -> server: still alive (its communication thread, every interval)
    DEAD = 10  # server -> worker: worker `extra` went silent; `step` 1: the run cannot go on
    STATE = 11  # worker -> server: send slice `key`'s optimizer state; server -> worker: it
    LOAD = 12  # worker -> server: replace slice `key`'s optimizer state with the payload's


PUSH_NO_GRAD = 1
"""PUSH flag: the parameter got no gradient this step (the payload's values are zeros); a step
in which no worker's gradient came is no update at all, as in torch (bsp, backup)."""
PUSH_HYPER = 2
"""PUSH flag: `len(HYPER_KEYS)` float32 hyperparameters follow the gradient in the payload;
the update of that step uses them (the worker's param_group at the time of the push)."""
HYPER_KEYS = ("lr", "weight_decay", "momentum", "dampening", "beta1", "beta2", "eps")


class BadMessage(ValueError):
    """A message that does not parse; the receiver counts and drops it."""


@dataclass(frozen=True)
class Header:
    """The fixed part of every message."""

    kind: Kind
    """Message type."""
    priority: int
    """Priority of the slice it concerns (0 = most urgent)."""
    worker: int
    """Sending (or addressed) worker."""
    key: int
    """Slice key (`Slice.key`)."""
    step: int
    """PUSH: the worker's step; PULL: the step it needs parameters for; PARAM: version."""
    extra: int = 0
    """PARAM: the slowest worker's clock (SSP staleness); DEAD: the dead worker; PUSH: flags
    (`PUSH_NO_GRAD`, `PUSH_HYPER`); otherwise 0."""
    numel: int = 0
    """Elements in the payload."""
    dtype: int = FLOAT32
    """Payload element type code (only float32 exists)."""

    def pack(self) -> bytes:
        return _HEADER.pack(
            MAGIC,
            VERSION,
            int(self.kind),
            self.priority,
            self.worker,
            self.key,
            self.step,
            self.extra,
            self.numel,
            self.dtype,
        )

    @classmethod
    def unpack(cls, data: bytes) -> Header:
        if len(data) != HEADER_BYTES:
            raise BadMessage(f"header of {len(data)} bytes, expected {HEADER_BYTES}")
        magic, version, kind, prio, worker, key, step, extra, numel, dtype = _HEADER.unpack(data)
        if magic != MAGIC or version != VERSION:
            raise BadMessage(f"bad magic/version {magic!r}/{version}")
        try:
            kind = Kind(kind)
        except ValueError:
            raise BadMessage(f"unknown message kind {kind}") from None
        return cls(kind, prio, worker, key, step, extra, numel, dtype)


def tos(klass: int) -> int:
    """IP TOS byte for a priority class."""
    return DSCP[klass] << 2


def channel_socket(ctx: zmq.Context[zmq.Socket[bytes]], kind: int, klass: int) -> zmq.Socket[bytes]:
    """A socket of `kind` for priority class `klass`, its packets marked with the class's DSCP
    (TOS must be set before bind/connect to apply to the connections)."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.TOS, tos(klass))
    sock.setsockopt(zmq.LINGER, 0)
    return sock
