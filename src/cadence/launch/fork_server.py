"""The worker server of `cadence.launch.forked`: `python -m cadence.launch.fork_server FD ...`.

Imports what every worker imports, then forks a worker per request line on its standard input
and reports on the pipe at file descriptor FD (further arguments label the command line that
its workers share); see `cadence.launch.forked` for the protocol.
Single-threaded, so forking it is safe.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import sys
from typing import IO, Any

PRELOADED = ("torch", "torch._dynamo", "cadence.launch.worker", "cadence.train.loop")
"""What the server imports before it forks any worker: what every worker imports."""


def _serve(requests: int, replies: IO[str]) -> None:
    """The server's loop: fork a worker per request line read from the file descriptor
    `requests`, report each start and exit on `replies`; no threads."""
    for module in PRELOADED:
        __import__(module)
    # Keep the imported objects out of the workers' garbage collections: a collection writes
    # to every object it tracks, which copies every page a worker shares with the server
    # (rank 0's plot after training took 3 s instead of 1.5).
    gc.collect()
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C reaches the workers, not the server
    running: set[int] = set()
    pending = b""
    open_input = True

    def say(message: dict[str, int]) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    while open_input or running:
        ready, _, _ = select.select([requests, wake_r] if open_input else [wake_r], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            running.discard(pid)
            say({"exited": pid, "code": os.waitstatus_to_exitcode(status)})
        if requests not in ready:
            continue
        chunk = os.read(requests, 1 << 16)
        open_input = bool(chunk)
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            pid = os.fork()
            if pid == 0:
                os.close(wake_r)
                os.close(wake_w)
                replies.close()
                _become_worker(json.loads(line))  # never returns
            running.add(pid)
            say({"started": pid})


def _become_worker(request: dict[str, Any]) -> None:
    """In a forked child: become what `python -m cadence.launch.worker ARGV` would be."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)  # the server's stdin is the launcher's pipe
        if request["log"] is not None:
            os.dup2(null, 1)
            err = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(err, 2)
            os.close(err)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        # `python -m` puts the working directory first on the import path: a user's model
        # module named as `module:factory` is found there.
        sys.path.insert(0, request["cwd"])
        sys.argv = ["cadence.launch.worker", *request["argv"]]
        from cadence.launch.worker import main

        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # the process ends either way
                stream.flush()
        os._exit(code)  # as `exit_worker`: no interpreter teardown


if __name__ == "__main__":
    _serve(sys.stdin.fileno(), os.fdopen(int(sys.argv[1]), "w", encoding="utf-8"))
    os._exit(0)  # every worker reaped, every reply sent: no interpreter teardown to wait for
