"""Per-rank error files: a dying worker writes why, so the launcher can name the rank and cause."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from cadence.errors import UserError
from cadence.launch.env import ERROR_FILE_ENV, LOG_FILE_ENV

_GLOO_SOURCE = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|h):\d+\] ")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting \d+ms for \w+ operation|Application timeout")


@dataclass(frozen=True)
class RankError:
    """What one rank recorded before it died."""

    rank: int
    """The rank that failed."""
    kind: str
    """Exception class name."""
    message: str
    """Exception message (first line)."""
    traceback: str
    """Full formatted traceback."""
    time: float
    """Wall-clock time of the failure; the earliest one is the root cause."""
    user_error: bool
    """True when the cause was bad input rather than a bug or a crash."""

    def summary(self) -> str:
        first_line = _GLOO_SOURCE.sub("", _first_line(self.message))  # gloo's file:line prefix
        return f"{self.kind}: {first_line}" if first_line else self.kind

    def timed_out(self) -> bool:
        """Whether this rank failed because a collective gave up waiting on a peer (gloo's
        "Timed out waiting 5000ms for recv operation", or "Application timeout caused pair
        closure" on the operations that shared the connection)."""
        return _GLOO_TIMEOUT.search(self.message) is not None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _with_root_cause(exc: BaseException) -> str:
    """`exc`'s message, its first line followed by the first line of the exception that
    caused it where one did (e.g. the gloo error behind "cadence-dp communication failed")."""
    root = exc
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    message = str(exc)
    if root is exc:
        return message
    head, _, rest = message.strip().partition("\n")
    cause = _first_line(str(root))
    cause = f"{type(root).__name__}: {cause}" if cause else type(root).__name__
    return f"{head} ({cause})" + (f"\n{rest}" if rest else "")


def record_error(rank: int, exc: BaseException, user_error: bool) -> None:
    """Write `exc` to the file named by CADENCE_ERROR_FILE, if the launcher asked for one."""
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    data = {
        "rank": rank,
        "kind": type(exc).__name__,
        "message": str(exc) if user_error else _with_root_cause(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "time": time.time(),
        "user_error": user_error,
    }
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def fail_worker(rank: int, exc: BaseException) -> int:
    """What a worker entry point does with the exception that ends it: record it for the
    launcher, put the traceback in its log (or on stderr), and return the exit status."""
    record_error(rank, exc, isinstance(exc, UserError))
    log = os.environ.get(LOG_FILE_ENV)
    if log:
        with open(log, "a") as stream:
            traceback.print_exception(exc, file=stream)
    else:
        traceback.print_exception(exc)
    return 130 if isinstance(exc, KeyboardInterrupt) else 1


def worker_entry(body: Callable[[], object]) -> int:
    """Run a worker process's whole work; any exception that ends it, Ctrl-C included, is
    recorded for the launcher (`fail_worker`) and becomes the exit status."""
    rank = int(os.environ.get("RANK", "0"))
    try:
        body()
    except BaseException as exc:  # record every cause for the parent, then die
        return fail_worker(rank, exc)
    return 0


def exit_worker(code: int) -> NoReturn:
    """End a worker process with `code`, skipping interpreter teardown whatever the status:
    native threads of torch/gloo have been seen to abort the process there (SIGABRT, and
    "terminate called without an active exception" on the user's terminal) after the work
    was done, and after a failure that `worker_entry` had already recorded and logged."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def read_error(path: Path) -> RankError | None:
    try:
        return RankError(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
