"""Let gloo's I/O thread yield the processor to the threads it serves.

gloo's TCP transport runs one I/O loop thread per process (named ``gloo_tcp_loop``). While a
message has arrived that no receive has claimed yet, that thread polls ``epoll_wait`` without
sleeping, and it does so at normal priority. On a machine with fewer cores than busy threads
(two ranks on two cores here), the threads it waits for, once woken, queue behind it until
its time slice ends: a scheduler tick, 4 ms on this kernel (HZ=250). Timed one by one,
1-256 KB all-reduces between two local processes took 0.40-0.51 ms at the median (2.2 ms in
one round) and 3.6-4.2 ms at the 90th percentile, and the I/O thread used 0.4-1.1 ms of
processor time per call.

Under ``SCHED_IDLE`` the poller still gets every otherwise idle moment, but any woken normal
thread preempts it at once: 0.31-0.42 ms at the median, 0.44-0.57 ms at the 90th percentile,
0.07-0.13 ms of I/O-thread time per call. Real-time priority is the wrong fix: a real-time
thread that polls keeps its core until the kernel throttles it, ~1 s.

The risk in training: a rank whose cores are all busy computing would leave its I/O thread
no time, and communication would stop overlapping computation. One check at 400mbit saw
neither harm nor gain, so cadence applies it
only where collectives are timed on their own (`cadence bench collectives`, calibration
included), not to training.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

IO_THREAD_NAME = "gloo_tcp_loop"
"""The name gloo gives its TCP I/O loop thread (``/proc/self/task/*/comm``)."""


def io_thread_ids(name: str = IO_THREAD_NAME) -> list[int]:
    """Thread ids of this process's threads called `name`. gloo starts its I/O thread when the
    process group connects (`init_process_group`)."""
    ids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:  # the thread ended while we looked
            continue
        if comm == name:
            ids.append(int(task.name))
    return sorted(ids)


@contextmanager
def gloo_io_yields(enabled: bool = True, name: str = IO_THREAD_NAME) -> Iterator[list[int]]:
    """Run the body with gloo's I/O threads (threads called `name`) under ``SCHED_IDLE``;
    restore their policy after.

    Yields the demoted thread ids (empty when `enabled` is False, or when gloo has not
    started its I/O thread yet: set up the process group first). Needs Linux.
    """
    demoted: list[tuple[int, int, int]] = []  # (tid, policy, priority) to restore
    try:
        for tid in io_thread_ids(name) if enabled else []:
            try:
                policy = os.sched_getscheduler(tid)
                priority = os.sched_getparam(tid).sched_priority
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            except ProcessLookupError:  # the thread ended while we looked
                continue
            demoted.append((tid, policy, priority))
        yield [tid for tid, _, _ in demoted]
    finally:
        for tid, policy, priority in demoted:
            with suppress(ProcessLookupError):  # the thread ended meanwhile
                os.sched_setscheduler(tid, policy, os.sched_param(priority))
