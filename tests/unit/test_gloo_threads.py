"""`cadence.comm.gloo_threads`: finding threads by name, demoting them to SCHED_IDLE inside the
block and restoring their policy after, on a real thread named like gloo's I/O thread."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator

import pytest

from cadence.comm.gloo_threads import gloo_io_yields, io_thread_ids

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="thread names and SCHED_IDLE are Linux's"
)

NAME = "cad_io_probe"  # at most 15 characters, like a kernel thread name
_PR_SET_NAME = 15


@pytest.fixture
def named_thread() -> Iterator[int]:
    """A thread whose kernel name is NAME, waiting until the test ends; yields its id."""
    ready, done = threading.Event(), threading.Event()

    def body() -> None:
        ctypes.CDLL(None).prctl(_PR_SET_NAME, NAME.encode(), 0, 0, 0)
        ready.set()
        done.wait()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    ready.wait()
    assert thread.native_id is not None
    yield thread.native_id
    done.set()
    thread.join()


def test_finds_the_thread_by_its_kernel_name(named_thread: int) -> None:
    assert io_thread_ids(NAME) == [named_thread]
    assert named_thread not in io_thread_ids()  # gloo's name is another


def test_demotes_inside_the_block_and_restores_after(named_thread: int) -> None:
    assert os.sched_getscheduler(named_thread) == os.SCHED_OTHER
    with gloo_io_yields(name=NAME) as demoted:
        assert demoted == [named_thread]
        assert os.sched_getscheduler(named_thread) == os.SCHED_IDLE
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # only the named thread
    assert os.sched_getscheduler(named_thread) == os.SCHED_OTHER


def test_restores_when_the_block_raises(named_thread: int) -> None:
    with pytest.raises(RuntimeError, match="boom"), gloo_io_yields(name=NAME):
        raise RuntimeError("boom")
    assert os.sched_getscheduler(named_thread) == os.SCHED_OTHER


def test_disabled_leaves_every_thread_alone(named_thread: int) -> None:
    with gloo_io_yields(enabled=False, name=NAME) as demoted:
        assert demoted == []
        assert os.sched_getscheduler(named_thread) == os.SCHED_OTHER
