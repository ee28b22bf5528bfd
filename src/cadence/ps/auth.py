"""Message authentication between one job's parameter servers and workers (torch-free).

Whoever starts the job makes a 32-byte secret (`new_secret`); servers get it in the settings on
their stdin, workers from the launcher's environment (`SECRET_ENV`) or, when nobody set it,
from worker 0 over the process group (`cadence.ps.runtime.job_secret`). It is never logged.

Every message carries one more frame: an 8-byte sequence number and an HMAC-SHA256 tag over
the direction, the server, the worker, the channel, that number and every frame. A receiver
refuses (and counts) a message whose tag does not verify (a stranger, another job, a wrong
key, a message meant for another server, worker or channel) or whose number is not above the
last one it accepted from that sender on that channel (a replay: each channel is one ordered
TCP connection, so numbers only grow).

Why HMAC rather than ZeroMQ CURVE (which this pyzmq supports): CURVE refuses a stranger in its
handshake, inside libzmq, so the server cannot count the refused messages next to the malformed
ones, and it needs a ZAP authenticator thread per server; an HMAC is checked where every
message is already parsed, costs one SHA-256 pass over the payload (hashlib releases the GIL,
so a worker signs on its communication thread while training goes on), and needs nothing of
libzmq. What it does not give: secrecy. Messages travel in the clear; an eavesdropper on the
network reads parameters and gradients (but cannot forge or replay them).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct

SECRET_ENV = "CADENCE_PS_SECRET"
"""Environment variable holding the job's secret as hex (set by the launcher for its workers)."""
SECRET_BYTES = 32
TO_SERVER = 0
TO_WORKER = 1
_SEQ = struct.Struct("!Q")
_CONTEXT = struct.Struct("!BHHHQII")  # direction, server, worker, channel, seq, frame lengths
TAG_BYTES = hashlib.sha256().digest_size
AUTH_BYTES = _SEQ.size + TAG_BYTES


class Unauthenticated(ValueError):
    """A message without a valid tag, or a replay; the receiver counts and drops it."""


def new_secret() -> bytes:
    """A fresh per-job secret."""
    return secrets.token_bytes(SECRET_BYTES)


def parse_secret(text: str) -> bytes:
    """The secret from its hex form; ValueError (without the text) if it is not one."""
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise ValueError(f"the job's secret ({SECRET_ENV}) must be at least 16 bytes in hex")
    return secret


def _tag(secret: bytes, context: bytes, header: bytes, payload: bytes) -> bytes:
    mac = hmac.new(secret, context, hashlib.sha256)
    mac.update(header)
    mac.update(payload)
    return mac.digest()


class Signer:
    """Signs the messages one process sends in one direction; numbers each (peer, channel)."""

    def __init__(self, secret: bytes, direction: int) -> None:
        self._secret, self._direction = secret, direction
        self._seq: dict[tuple[int, int, int], int] = {}

    def sign(self, server: int, worker: int, channel: int, header: bytes, payload: bytes) -> bytes:
        """The auth frame of the message `header`, `payload` between `server` and `worker`."""
        seq = self._seq.get((server, worker, channel), 0) + 1
        self._seq[server, worker, channel] = seq
        context = _CONTEXT.pack(
            self._direction, server, worker, channel, seq, len(header), len(payload)
        )
        return _SEQ.pack(seq) + _tag(self._secret, context, header, payload)


class Verifier:
    """Checks the messages one process receives from the other direction."""

    def __init__(self, secret: bytes, direction: int) -> None:
        self._secret, self._direction = secret, direction
        self._last: dict[tuple[int, int, int], int] = {}

    def verify(
        self, server: int, worker: int, channel: int, header: bytes, payload: bytes, auth: bytes
    ) -> None:
        """Raise `Unauthenticated` unless `auth` is a fresh, valid tag of this message."""
        if len(auth) != AUTH_BYTES or not (0 <= server < 1 << 16 and 0 <= worker < 1 << 16):
            raise Unauthenticated("no valid auth frame")
        (seq,) = _SEQ.unpack(auth[: _SEQ.size])
        context = _CONTEXT.pack(
            self._direction, server, worker, channel, seq, len(header), len(payload)
        )
        if not hmac.compare_digest(auth[_SEQ.size :], _tag(self._secret, context, header, payload)):
            raise Unauthenticated("bad tag")
        if seq <= self._last.get((server, worker, channel), 0):
            raise Unauthenticated(f"replayed message {seq}")
        self._last[server, worker, channel] = seq
