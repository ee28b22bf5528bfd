"""What a process holds, read from /proc: resident memory, threads, open descriptors, sockets.

`cadence bench soak` asks the training loop for these figures through the environment
(`SAMPLES_ENV`), so a long run can show that nothing piles up: every rank samples itself and
the processes it started (the parameter servers) every few steps and rewrites its own JSON file
after each sample, so a run stopped by a time limit keeps what it measured.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SAMPLES_ENV = "CADENCE_RESOURCE_SAMPLES"
"""`DIR:EVERY:START`: write `DIR/rank<R>.json`, sampling every EVERY steps and at step START
(the start of the comparison, after one-off allocations) and the last step."""


@dataclass(frozen=True)
class Usage:
    """One process at one moment."""

    rss_bytes: int
    """Resident memory (VmRSS)."""
    threads: int
    """Entries of /proc/PID/task."""
    fds: int
    """Open file descriptors (entries of /proc/PID/fd)."""
    sockets: int
    """Descriptors that are sockets."""


def usage(pid: int | str = "self") -> Usage:
    """`pid`'s figures now ("self": this process). Raises OSError if it is gone."""
    root = Path("/proc") / str(pid)
    rss_kb = 0
    for line in (root / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
            break
    fds = sockets = 0
    fd_dir = root / "fd"
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / name)
        except OSError:  # closed between the listing and the read
            continue
        fds += 1
        sockets += target.startswith("socket:")
    return Usage(rss_kb * 1024, len(os.listdir(root / "task")), fds, sockets)


def children(pid: int | None = None) -> list[int]:
    """The processes whose parent is `pid` (default: this process), in pid order."""
    parent = os.getpid() if pid is None else pid
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces) start with state, then ppid.
        if int(stat.rpartition(")")[2].split()[1]) == parent:
            found.append(int(entry))
    return sorted(found)


def command(pid: int) -> str:
    """A short label for `pid`: its command line without the interpreter ("-m mod ...")."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in args if a]
    return " ".join(words[1:] or words)[:80]


def snapshot(step: int) -> dict[str, Any]:
    """This process and its children (by pid) at `step`; a child that exits meanwhile is
    left out."""
    kids: dict[str, Any] = {}
    for pid in children():
        try:
            kids[str(pid)] = {"command": command(pid), **asdict(usage(pid))}
        except OSError:
            continue
    return {"step": step, **asdict(usage()), "children": kids}


class ResourceProbe:
    """Samples this rank every `every` steps, at `start` and at the last step; the file holds
    `start`, `end` (the latest sample so far) and `series` (every sample)."""

    def __init__(self, out_dir: Path, rank: int, every: int, start: int, total: int) -> None:
        self.path = out_dir / f"rank{rank}.json"
        self.rank = rank
        self.every = max(1, every)
        self.start = start
        self.total = total
        self.record: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "start": None,
                                       "end": None, "series": []}  # fmt: skip

    def after_step(self, step: int) -> None:
        """Call once after each optimizer step, `step` counting from 1."""
        if step % self.every and step not in (self.start, self.total):
            return
        sample = snapshot(step)
        series = self.record["series"]
        series.append(sample)
        if step == self.start:
            self.record["start"] = sample
        if step >= self.start:
            self.record["end"] = sample
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.record) + "\n")
        os.replace(tmp, self.path)


def probe_from_env(rank: int, total_steps: int) -> ResourceProbe | None:
    """The probe `SAMPLES_ENV` asks for, or None (the ordinary case)."""
    spec = os.environ.get(SAMPLES_ENV)
    if not spec:
        return None
    folder, every, start = spec.rsplit(":", 2)
    return ResourceProbe(Path(folder), rank, int(every), int(start), total_steps)


def encode(out_dir: Path, every: int, start: int) -> str:
    """The `SAMPLES_ENV` value for `probe_from_env`."""
    return f"{out_dir}:{every}:{start}"
