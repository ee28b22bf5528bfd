"""Dead workers: a real server (in a thread, real ZeroMQ sockets) declares a worker dead once it
has been silent for `dead_after_s`, tells the others, and goes on without it where the
consistency mode allows (asp, ssp, backup) or makes bsp's failure explicit. No torch."""

import time

import numpy as np
import pytest

from cadence.errors import UserError
from cadence.ps import PSConfig
from cadence.ps.wire import Header, Kind
from tests.unit.test_ps_server import Fake

DEAD_AFTER = 0.4


def recv_alive(fake, w, timeout_s=10.0):
    """The next message for worker `w`, sending its heartbeats meanwhile (it must not look
    dead itself while it waits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fake.send(w, Kind.HEARTBEAT)
        got = fake.recv(w, timeout_ms=50)
        if got is not None:
            return got
    raise AssertionError(f"worker {w} got nothing within {timeout_s} s")


def start(consistency):
    fake = Fake(consistency, dead_after=DEAD_AFTER)
    fake.send(0, Kind.INIT, values=[0.0, 0.0])
    fake.send(1, Kind.HEARTBEAT)  # worker 1 is heard from once, then goes silent
    return fake


def test_ssp_goes_on_without_a_dead_worker():
    fake = start("ssp:1")
    fake.send(0, Kind.PUSH, 0, [1.0, 1.0])
    fake.send(0, Kind.PUSH, 1, [1.0, 1.0])
    started = time.monotonic()
    fake.send(0, Kind.PULL, 2)  # needs worker 1 past step 0: it never will
    notice, _ = recv_alive(fake, 0)
    assert (notice.kind, notice.extra, notice.step) == (Kind.DEAD, 1, 0)  # not fatal
    assert time.monotonic() - started >= DEAD_AFTER * 0.9
    header, value = recv_alive(fake, 0)  # the bound now counts worker 0 only
    assert header.kind == Kind.PARAM and header.extra == 2
    np.testing.assert_allclose(np.frombuffer(value, np.float32), [-0.5, -0.5])
    assert fake.stop(live=[0])["dead_workers"] == 1


def test_backup_makes_the_step_from_the_live_workers():
    fake = start("backup:2")  # K = 2 of 2: a step needs both, until one dies
    fake.send(0, Kind.PUSH, 0, [2.0, 2.0])
    fake.send(0, Kind.PULL, 1)
    assert recv_alive(fake, 0)[0].kind == Kind.DEAD
    header, value = recv_alive(fake, 0)
    assert header.kind == Kind.PARAM and header.step == 1
    np.testing.assert_allclose(np.frombuffer(value, np.float32), [-1.0, -1.0])
    fake.stop(live=[0])


def test_bsp_tells_the_others_that_the_run_cannot_go_on():
    fake = start("bsp")
    fake.send(0, Kind.PUSH, 0, [2.0, 2.0])
    fake.send(0, Kind.PULL, 1)
    notice, _ = recv_alive(fake, 0)
    assert (notice.kind, notice.extra, notice.step) == (Kind.DEAD, 1, 1)  # fatal
    assert fake.recv(0, timeout_ms=300) is None  # and no step without worker 1
    fake.stop(live=[0])


def test_a_dead_worker_that_speaks_again_is_told_and_ignored():
    fake = start("asp")
    assert recv_alive(fake, 0)[0].kind == Kind.DEAD
    fake.send(1, Kind.PUSH, 0, [100.0, 100.0])
    notice, _ = fake.recv(1)
    assert (notice.kind, notice.extra, notice.step) == (Kind.DEAD, 1, 1)
    header, value = fake.value(0, step=0)
    np.testing.assert_allclose(np.frombuffer(value, np.float32), [0.0, 0.0])  # never applied
    stats = fake.stop(live=[0])
    assert (stats["applied"], stats["dropped"], stats["dead_workers"]) == (0, 1, 1)


def test_a_worker_that_stopped_is_done_not_dead():
    fake = start("asp")
    fake.send(1, Kind.STOP)  # then silent: finished, not dead
    deadline = time.monotonic() + 3 * DEAD_AFTER
    while time.monotonic() < deadline:
        fake.send(0, Kind.HEARTBEAT)
        assert fake.recv(0, timeout_ms=50) is None  # no DEAD notice about anyone
    assert fake.stop()["dead_workers"] == 0


def test_dead_after_must_exceed_the_heartbeat():
    with pytest.raises(UserError, match="must exceed the heartbeat interval"):
        PSConfig(heartbeat_s=2.0, dead_after_s=1.0)
    assert Header(Kind.DEAD, 0, 0, 0, 1, 3).extra == 3
