"""Local workers forked from a server process that has imported torch once.

A worker started as `python -m cadence.launch.worker` spends ~4 s of processor time importing
torch and `torch._dynamo` (every torch optimizer imports it on first use) before it trains:
on a 2-core machine, 8 of the 9 processor-seconds of a 4-step run of two workers. A local
run's workers are instead forked from one server (`cadence.launch.fork_server`) that
imported those modules once: each starts in a fraction of a second as the same program
(`cadence.launch.worker.main`) with the environment, working directory, import path, log
file and exit status the subprocess had. The server is a fresh interpreter that runs no torch
operation and starts no thread, so forking it is safe, and the launching program's own state
(its `__main__`, threads, torch's thread pools) never reaches a worker.

Protocol, one JSON object per line: the launcher writes `{"argv", "env", "cwd", "log"}` to
the server's standard input; the server answers `{"started": PID}` and, when a worker ends,
`{"exited": PID, "code": CODE}` (minus the signal's number where a signal ended it, as
`subprocess.Popen.returncode`). The server exits when its standard input closes and every
worker it forked has ended.

Workers inside an emulated host's network namespace still start as subprocesses under
`ip netns exec`: forked ones would stay in the server's namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from cadence.errors import WorkerFailed


class ForkedWorker:
    """A forked worker, with the part of `subprocess.Popen`'s interface the launcher uses."""

    def __init__(self, server: WorkerServer, pid: int) -> None:
        self._server = server
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._server.wait(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # ended; not yet reported
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WorkerServer:
    """The launcher's end of a running server (`start_server`)."""

    def __init__(self, proc: subprocess.Popen[str], replies: IO[str]) -> None:
        self._proc = proc
        self._replies = replies
        self._codes: dict[int, int] = {}
        self._started: list[int] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="worker-server", daemon=True)
        self._reader.start()

    def start(self, argv: list[str], env: dict[str, str], log: Path | None) -> ForkedWorker:
        """Fork a worker running `cadence.launch.worker` with `argv`, `env` as its whole
        environment, and its stderr in `log` (stdout discarded), or with None, this process's
        stdout and stderr."""
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "log": log and str(log)}
        assert self._proc.stdin is not None
        with self._changed:
            seen = len(self._started)
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            if not self._changed.wait_for(lambda: len(self._started) > seen or self._gone(), 120):
                raise WorkerFailed("the worker server did not start a worker within 120 s")
            if len(self._started) == seen:
                raise WorkerFailed(
                    f"the worker server exited with code {self._proc.wait()} before starting "
                    "a worker (its error is above)"
                )
            return ForkedWorker(self, self._started[seen])

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._code(pid)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while (code := self._code(pid)) is None:
                left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
                if left <= 0:
                    break
                self._changed.wait(left)  # woken by a report, or again to look (server gone)
            return code

    def _code(self, pid: int) -> int | None:
        """`pid`'s exit code as the server reported it; with the server gone (killed) and the
        worker too, 255: what ended it is not known."""
        if pid in self._codes or not self._gone():
            return self._codes.get(pid)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 255
        return None

    def close(self) -> None:
        """Let the server exit once its workers have (they are stopped by then)."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _gone(self) -> bool:
        return not self._reader.is_alive()

    def _read(self) -> None:
        for line in self._replies:
            said = json.loads(line)
            with self._changed:
                if "started" in said:
                    self._started.append(int(said["started"]))
                else:
                    self._codes[int(said["exited"])] = int(said["code"])
                self._changed.notify_all()
        self._replies.close()
        with self._changed:
            self._changed.notify_all()


def start_server(argv: list[str], command: list[str] | None = None) -> WorkerServer:
    """A server that has imported what workers import, ready to fork them. It shares this
    process's stdout and stderr (rank 0 writes there); its replies come on a pipe of their
    own. `argv` (the workers' arguments) only labels its command line, which its workers
    keep: `ps` and `pgrep -f` find a run's workers by it, as they found the subprocesses.
    `command`: another program serving the same protocol (its first argument the reply
    pipe's descriptor), for tests."""
    program = command or [sys.executable, "-m", "cadence.launch.fork_server"]
    replies_r, replies_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [*program, str(replies_w), *argv],
            stdin=subprocess.PIPE,
            text=True,
            pass_fds=(replies_w,),
            # Read at interpreter start or library load, so set here as `_worker_env` sets
            # them for a worker (which also sets its thread count explicitly).
            env={"TORCH_CPP_LOG_LEVEL": "ERROR", **os.environ, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        os.close(replies_w)
    return WorkerServer(proc, os.fdopen(replies_r, "r", encoding="utf-8"))
