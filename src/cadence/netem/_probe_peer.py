"""TCP bulk sender/receiver run inside a host namespace by :mod:`cadence.netem.probe`.

Stdlib only and self-limiting: every socket has a timeout and every mode a deadline, so a
lost peer never leaves a process behind.

    python -m cadence.netem._probe_peer recv --bind IP --timeout S
        prints the listening port, then one JSON line {"bytes", "seconds", "total_bytes"}
    python -m cadence.netem._probe_peer send --connect IP --port P --seconds S
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

_CHUNK = 1 << 20


def receive(bind: str, timeout: float) -> dict[str, float]:
    """Accept one connection and read it to EOF; rate is timed from first to last byte.

    ``timeout`` <= 0 means no deadline (background load, stopped by killing us).
    """
    deadline = time.monotonic() + timeout if timeout > 0 else float("inf")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((bind, 0))
        server.listen(1)
        server.settimeout(timeout if timeout > 0 else None)
        print(server.getsockname()[1], flush=True)
        conn, _ = server.accept()
    buf = bytearray(_CHUNK)
    total = counted = 0
    first = last = 0.0
    with conn:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            conn.settimeout(min(remaining, 5.0))
            try:
                n = conn.recv_into(buf)
            except TimeoutError:
                break  # sender went silent: report what arrived
            if n == 0:
                break
            now = time.monotonic()
            if total == 0:
                first = now  # the first chunk only starts the clock; it is not counted
            else:
                counted += n
            total += n
            last = now
    return {"bytes": counted, "seconds": last - first, "total_bytes": total}


def send(connect: str, port: int, seconds: float, connect_timeout: float = 10.0) -> int:
    """Send zeros to ``connect:port`` for ``seconds`` (forever if <= 0); returns bytes sent."""
    deadline = time.monotonic() + connect_timeout
    while True:
        try:
            sock = socket.create_connection((connect, port), timeout=5.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    payload = bytes(_CHUNK)
    sent = 0
    end = time.monotonic() + seconds if seconds > 0 else float("inf")
    with sock:
        sock.settimeout(10.0)
        while time.monotonic() < end:
            sent += sock.send(payload)
        sock.shutdown(socket.SHUT_WR)
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cadence.netem._probe_peer")
    sub = parser.add_subparsers(dest="mode", required=True)
    recv_p = sub.add_parser("recv")
    recv_p.add_argument("--bind", required=True)
    recv_p.add_argument("--timeout", type=float, default=30.0)
    send_p = sub.add_parser("send")
    send_p.add_argument("--connect", required=True)
    send_p.add_argument("--port", type=int, required=True)
    send_p.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.mode == "recv":
        print(json.dumps(receive(args.bind, args.timeout)), flush=True)
    else:
        try:
            send(args.connect, args.port, args.seconds)
        except (BrokenPipeError, ConnectionResetError):
            return 0  # the receiver hung up (stopped load, or its deadline): not an error
    return 0


if __name__ == "__main__":
    sys.exit(main())
