"""Pinned hosts: `host_cpus` hands processors out in turn, and `run_workers(pin_hosts=True)`
starts each real worker process, and the threads it starts, on its host's processor."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cadence.bench._launch import Loopback, host_cpus, run_workers, run_workers_on_link

WORKER = "tests.unit.affinity_worker"


def test_hosts_take_processors_in_turn() -> None:
    assert [host_cpus(r, [1, 0]) for r in range(5)] == [{0}, {1}, {0}, {1}, {0}]
    assert [host_cpus(r, [3]) for r in range(3)] == [{3}, {3}, {3}]
    with pytest.raises(ValueError, match="no processors"):
        host_cpus(0, [])


def _affinities(tmp_path: Path, workers: int, pin_hosts: bool) -> list[dict[str, list[int]]]:
    out = tmp_path / "seen"
    out.mkdir()
    run_workers(Loopback.of(workers), WORKER, [str(out)], tmp_path, 1, 60, pin_hosts=pin_hosts)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(workers)]


def test_pinned_workers_and_their_threads_run_on_their_host_processor(tmp_path: Path) -> None:
    available = sorted(os.sched_getaffinity(0))
    seen = _affinities(tmp_path, 3, pin_hosts=True)
    for rank, where in enumerate(seen):
        expected = sorted(host_cpus(rank, available))
        assert where == {"process": expected, "thread": expected}, (rank, where)


def test_unpinned_workers_keep_every_processor(tmp_path: Path) -> None:
    available = sorted(os.sched_getaffinity(0))
    for where in _affinities(tmp_path, 2, pin_hosts=False):
        assert where == {"process": available, "thread": available}


def test_workers_on_the_loopback_link_pin_when_asked(tmp_path: Path) -> None:
    # The same pinning `cadence bench collectives` asks `run_workers` for, through this call.
    out = tmp_path / "seen"
    out.mkdir()
    run_workers_on_link(None, 2, WORKER, [str(out)], tmp_path, 1, 60, pin_hosts=True)
    available = sorted(os.sched_getaffinity(0))
    for rank in range(2):
        expected = sorted(host_cpus(rank, available))
        seen = json.loads((out / f"rank{rank}.json").read_text())
        assert seen == {"process": expected, "thread": expected}, (rank, seen)
