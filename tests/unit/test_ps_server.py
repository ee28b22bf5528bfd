"""A real server (its loop in a thread, real ZeroMQ sockets) driven by hand-made worker messages:
consistency rules, rejection of bad messages, statistics. No torch."""

import json
import threading
import time
from typing import cast

import numpy as np
import pytest
import zmq

from cadence.ps.auth import TO_SERVER, TO_WORKER, Signer, Verifier
from cadence.ps.optim import SliceOptimizer
from cadence.ps.server import Server
from cadence.ps.wire import HYPER_KEYS, PUSH_HYPER, PUSH_NO_GRAD, Header, Kind, tos

LR = 0.5
SECRET = bytes(range(32))


class Fake:
    """W workers' channel sockets (class 0 only) talking to one in-thread server.

    Every instance is remembered until it is stopped: `tests/unit/conftest.py` shuts down
    whatever a failing test left open (an open context blocks its garbage collection, and so
    whichever later test happens to trigger it)."""

    unstopped: list["Fake"] = []

    def __init__(
        self, consistency, workers=2, length=2, window=0, slices=None, dead_after=0.0, start=True
    ):
        Fake.unstopped.append(self)
        self.server = Server(
            {
                "workers": workers,
                "consistency": consistency,
                "classes": 2,
                "slices": slices or [[0, length, 0, 0], [1, 1, 1, 1]],
                "optimizer": "sgd",
                "optimizer_kwargs": {"lr": LR},
                "secret": SECRET.hex(),
                "bind": "127.0.0.1",
                "window_bytes": window,
                "dead_after_s": dead_after,
            }
        )
        self.thread = threading.Thread(target=self.server.serve, daemon=True)
        if start:
            self.thread.start()
        self.signer = Signer(SECRET, TO_SERVER)
        self.verifier = Verifier(SECRET, TO_WORKER)
        self.ctx = zmq.Context()
        self.strangers = []
        self.socks = []
        for w in range(workers):
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.IDENTITY, f"w{w}".encode())
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"tcp://127.0.0.1:{self.server.ports[0]}")
            self.socks.append(sock)

    def send(self, w, kind, step=0, values=(), key=0, **fields):
        data = np.asarray(values, np.float32).tobytes()
        header = Header(kind, 0, w, key, step, 0, len(values), **fields)
        self.sendraw(w, [header.pack(), data])

    def signed(self, w, frames, klass=0):
        """`frames` (header, payload) as worker `w` of this job sends them on channel `klass`."""
        return [*frames, self.signer.sign(0, w, klass, *frames)]

    def sendraw(self, w, frames, klass=0, sock=None):
        (sock or self.socks[w]).send_multipart(self.signed(w, frames, klass))

    def recv(self, w, timeout_ms=30000):
        if not self.socks[w].poll(timeout_ms):
            return None
        raw, payload, auth = self.socks[w].recv_multipart()
        self.verifier.verify(0, w, 0, raw, payload, auth)  # the server signs its answers
        return Header.unpack(raw), payload

    def value(self, w, step=0):
        self.send(w, Kind.PULL, step)
        header, payload = self.recv(w)
        return header, np.frombuffer(payload, np.float32)

    def stop(self, live=None):
        live = list(range(len(self.socks))) if live is None else live
        for w in live:  # STOP on every channel: class 1 has a socket of its own
            self.send(w, Kind.STOP)
            extra = self.ctx.socket(zmq.DEALER)
            extra.setsockopt(zmq.IDENTITY, f"w{w}".encode())
            extra.setsockopt(zmq.LINGER, 0)
            extra.connect(f"tcp://127.0.0.1:{self.server.ports[1]}")
            self.sendraw(w, [Header(Kind.STOP, 0, w, 0, 0).pack(), b""], klass=1, sock=extra)
            self.socks.append(extra)
        stats = []
        for w in live:
            header, payload = self.recv(w)
            assert header.kind == Kind.STATS
            stats.append(json.loads(payload))
        assert stats[0] == stats[-1]  # final figures, the same for every worker
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        self.shutdown()
        return stats[-1]

    def shutdown(self):
        """Close this side without waiting for anything (a server thread that was never told
        STOP on every channel idles, as a daemon, until the test process ends)."""
        if self not in Fake.unstopped:
            return
        Fake.unstopped.remove(self)
        for sock in self.socks + self.strangers:
            sock.close(linger=0)
        self.ctx.term()


def test_channels_are_marked_with_their_class_tos():
    fake = Fake("bsp")
    assert [s.getsockopt(zmq.TOS) for s in fake.server.routers] == [tos(0), tos(1)]
    fake.stop()


def test_bsp_averages_all_workers_and_holds_pulls_until_then():
    fake = Fake("bsp")
    fake.send(0, Kind.INIT, values=[1.0, 1.0])
    fake.send(0, Kind.PUSH, 0, [1.0, 1.0])
    fake.send(0, Kind.PULL, 1)
    assert fake.recv(0, timeout_ms=300) is None  # worker 1 has not pushed step 0 yet
    fake.send(1, Kind.PUSH, 0, [3.0, 3.0])
    header, payload = fake.recv(0)
    assert header.kind == Kind.PARAM and header.step == 1
    np.testing.assert_allclose(np.frombuffer(payload, np.float32), [0.0, 0.0])  # 1 - 0.5 * 2
    stats = fake.stop()
    assert stats["applied"] == 1
    assert stats["cpu_s"] > 0  # processor time spent serving, in the final counters


def test_backup_applies_the_first_k_and_drops_late_gradients():
    fake = Fake("backup:1")
    fake.send(0, Kind.INIT, values=[0.0, 0.0])
    fake.send(0, Kind.PUSH, 0, [2.0, 2.0])
    assert fake.value(0, step=1)[0].step == 1  # made by worker 0 alone
    fake.send(1, Kind.PUSH, 0, [100.0, 100.0])  # late: step 0 is already made
    header, value = fake.value(1, step=1)
    assert header.step == 1
    np.testing.assert_allclose(value, [-1.0, -1.0])
    stats = fake.stop()
    assert (stats["applied"], stats["dropped"], stats["rejected"]) == (1, 1, 0)


def test_ssp_blocks_a_worker_more_than_s_steps_ahead():
    fake = Fake("ssp:1")
    fake.send(0, Kind.INIT, values=[0.0, 0.0])
    fake.send(0, Kind.PUSH, 0, [1.0, 1.0])
    fake.send(0, Kind.PUSH, 1, [1.0, 1.0])
    fake.send(0, Kind.PULL, 2)  # step 2 needs every worker past step 2 - 1 = 1
    assert fake.recv(0, timeout_ms=300) is None
    fake.send(1, Kind.PUSH, 0, [1.0, 1.0])
    header, value = fake.recv(0)
    assert header.extra == 1  # slowest clock: staleness 2 - 1 = 1 <= s
    # asp-style application: each gradient divided by W = 2, three of them.
    np.testing.assert_allclose(np.frombuffer(value, np.float32), [-0.75, -0.75])
    fake.stop()


def test_asp_answers_at_once_and_applies_each_gradient():
    fake = Fake("asp")
    fake.send(0, Kind.INIT, values=[0.0, 0.0])
    # Workers' connections are not ordered with each other: see the INIT handled (worker 0's
    # pull answered) before worker 1 pushes, or the INIT could overwrite the update.
    assert fake.value(0, step=0)[0].step == 0
    fake.send(1, Kind.PUSH, 5, [4.0, 4.0])
    header, value = fake.value(1, step=9)  # same connection: after the push
    assert header.step == 1
    np.testing.assert_allclose(value, [-1.0, -1.0])
    fake.stop()


@pytest.mark.parametrize(
    "bad",
    [
        "short payload",
        "unknown slice",
        "wrong dtype",
        "unknown worker",
        "stale bsp step",
        "server-only kind",
    ],
)
def test_bad_messages_are_counted_and_never_applied(bad):
    fake = Fake("bsp")
    fake.send(0, Kind.INIT, values=[1.0, 1.0])
    if bad == "short payload":
        fake.send(0, Kind.PUSH, 0, [5.0])
    elif bad == "unknown slice":
        fake.send(0, Kind.PUSH, 0, [5.0, 5.0], key=9)
    elif bad == "wrong dtype":
        fake.send(0, Kind.PUSH, 0, [5.0, 5.0], dtype=2)
    elif bad == "unknown worker":
        push = [Header(Kind.PUSH, 0, 7, 0, 0, 0, 2).pack(), np.ones(2, np.float32).tobytes()]
        fake.sendraw(7, push, sock=fake.socks[0])  # signed with the job's key, yet no such worker
    elif bad == "stale bsp step":
        fake.send(0, Kind.PUSH, 3, [5.0, 5.0])
    else:
        fake.send(0, Kind.PARAM, 0, [5.0, 5.0])
    fake.send(1, Kind.PUSH, 0, [1.0, 1.0])  # alone it cannot complete step 0
    header, value = fake.value(1, step=0)
    np.testing.assert_allclose(value, [1.0, 1.0])
    stats = fake.stop()
    assert (stats["rejected"], stats["applied"]) == (1, 0)


def test_window_holds_answers_back_and_sends_the_most_urgent_first():
    # Three 2-float slices, priorities 0 (A), 1 (B), 2 (C); a window of one slice (8 bytes).
    fake = Fake("asp", workers=1, window=8, slices=[[k, 2, k, 0] for k in range(3)])
    for key in range(3):
        fake.send(0, Kind.INIT, values=[float(key)] * 2, key=key)
    fake.send(0, Kind.PULL, key=2)  # C goes out at once (nothing in flight)
    fake.send(0, Kind.PULL, key=1)
    fake.send(0, Kind.PULL, key=0)
    first = fake.recv(0)[0]
    assert first.key == 2
    assert fake.recv(0, timeout_ms=300) is None  # B and A wait for credit
    order: list[int] = []
    for _ in range(2):
        fake.send(0, Kind.ACK, values=[0.0, 0.0], key=order[-1] if order else 2)
        order.append(fake.recv(0)[0].key)
    assert order == [0, 1]  # A (most urgent) overtakes B, which was asked for first
    fake.send(0, Kind.ACK, values=[0.0, 0.0], key=1)
    assert fake.stop()["rejected"] == 0


def test_backup_makes_steps_without_idle_workers():
    fake = Fake("backup:2", workers=3)
    fake.send(0, Kind.INIT, values=[0.0, 0.0])
    fake.send(0, Kind.PUSH, 0, [1.0, 1.0])
    fake.send(1, Kind.PUSH, 0, [3.0, 3.0])
    assert fake.value(1, step=1)[0].step == 1  # K = 2 of 3 made step 0 (-0.5 * 2)
    for w in (0, 1):  # the fast workers pause (the training loop evaluates, or is done)
        fake.send(w, Kind.IDLE, 0)
    fake.send(2, Kind.PUSH, 1, [2.0, 2.0])  # the straggler, alone at work now
    header, value = fake.value(2, step=2)
    assert header.step == 2
    np.testing.assert_allclose(value, [-2.0, -2.0])  # -1 - 0.5 * 2
    fake.send(0, Kind.PUSH, 0, [9.0, 9.0])  # a late step-0 gradient: dropped, still idle
    fake.send(0, Kind.PUSH, 2, [2.0, 2.0])  # back at work: step 2 needs K = 2 again
    fake.send(0, Kind.PULL, 3)
    assert fake.recv(0, timeout_ms=300) is None
    fake.send(1, Kind.PUSH, 2, [2.0, 2.0])
    np.testing.assert_allclose(np.frombuffer(fake.recv(0)[1], np.float32), [-3.0, -3.0])
    stats = fake.stop()
    assert (stats["applied"], stats["dropped"]) == (3, 1)


def _flagged_push(fake, w, step, values, flags, hyper=()):
    data = np.asarray([*values, *hyper], np.float32).tobytes()
    header = Header(Kind.PUSH, 0, w, 0, step, flags, len(values) + len(hyper))
    fake.sendraw(w, [header.pack(), data])


def test_bsp_step_without_any_gradient_leaves_the_slice_alone():
    fake = Fake("bsp")
    fake.send(0, Kind.INIT, values=[1.0, 1.0])
    for w in range(2):
        _flagged_push(fake, w, 0, [0.0, 0.0], PUSH_NO_GRAD)
    header, value = fake.value(0, step=1)
    assert header.step == 1  # the step is made, with no update
    np.testing.assert_allclose(value, [1.0, 1.0])
    _flagged_push(fake, 0, 1, [0.0, 0.0], PUSH_NO_GRAD)  # one worker without, one with
    fake.send(1, Kind.PUSH, 1, [4.0, 4.0])
    np.testing.assert_allclose(fake.value(0, step=2)[1], [0.0, 0.0])  # 1 - 0.5 * (0 + 4) / 2
    assert fake.stop()["applied"] == 1


def test_a_push_carries_the_hyperparameters_of_its_update():
    fake = Fake("bsp")
    fake.send(0, Kind.INIT, values=[1.0, 1.0])
    hyper = {"lr": 0.25, "weight_decay": 0.0, "momentum": 0.0, "dampening": 0.0,
             "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}  # fmt: skip
    for w in range(2):
        _flagged_push(fake, w, 0, [2.0, 2.0], PUSH_HYPER, [hyper[k] for k in HYPER_KEYS])
    np.testing.assert_allclose(fake.value(0, step=1)[1], [0.5, 0.5])  # lr 0.25, not LR
    _flagged_push(fake, 0, 1, [2.0, 2.0], PUSH_HYPER, [1.0])  # too few values: rejected
    assert fake.stop()["rejected"] == 1


def test_optimizer_state_round_trips_through_state_and_load():
    fake = Fake("bsp", workers=1)
    fake.server.slices[0].optimizer = SliceOptimizer("adam", 2, {"lr": 0.1})
    fake.send(0, Kind.INIT, values=[1.0, 1.0])
    fake.send(0, Kind.PUSH, 0, [1.0, -2.0])
    fake.value(0, step=1)
    fake.send(0, Kind.STATE)
    header, payload = fake.recv(0)
    state = np.frombuffer(payload, np.float32)
    assert header.kind == Kind.STATE and state[:3].tolist() == [1.0, 0.0, 1.0]  # steps, no buf, m/v
    np.testing.assert_allclose(state[3:5], [0.1, -0.2])  # m = (1 - beta1) g
    fresh = state.copy()
    fresh[0], fresh[3:] = 5.0, 0.5
    load = Header(Kind.LOAD, 0, 0, 0, 0, 0, fresh.size)
    fake.sendraw(0, [load.pack(), fresh.tobytes()])
    fake.send(0, Kind.STATE)
    np.testing.assert_allclose(np.frombuffer(fake.recv(0)[1], np.float32), fresh)
    bad = Header(Kind.LOAD, 0, 0, 0, 0, 0, 2)  # too short for a slice of 2 with moments
    fake.sendraw(0, [bad.pack(), np.zeros(2, np.float32).tobytes()])
    assert fake.stop()["rejected"] == 1


def _wait_for(condition, timeout_s=30.0):
    """Wait until `condition()` holds (the server thread handles messages asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


@pytest.mark.parametrize(
    "stranger", ["unsigned", "wrong key", "replayed", "another channel", "forged worker", "garbage"]
)
def test_a_strangers_messages_are_refused_counted_and_never_applied(stranger):
    fake = Fake("bsp")
    fake.send(0, Kind.INIT, values=[1.0, 1.0])
    push = [Header(Kind.PUSH, 0, 0, 0, 0, 0, 2).pack(), np.ones(2, np.float32).tobytes()]
    genuine = fake.signed(0, push)
    fake.socks[0].send_multipart(genuine)  # worker 0's own gradient for step 0
    assert fake.value(0, step=0)[0].step == 0  # handled (same connection, in order)
    sock = fake.ctx.socket(zmq.DEALER)  # a process that can reach the port, not of the job
    sock.setsockopt(zmq.LINGER, 0)
    fake.strangers.append(sock)  # closed with the workers' sockets
    port = fake.server.ports[1 if stranger == "another channel" else 0]
    sock.connect(f"tcp://127.0.0.1:{port}")
    # Worker 1's gradient for step 0, as a stranger makes it up: were it applied, step 0 would
    # be made (worker 0 already pushed) with the mean of 1 and 100.
    evil = [Header(Kind.PUSH, 0, 1, 0, 0, 0, 2).pack(), np.full(2, 100.0, np.float32).tobytes()]
    if stranger == "unsigned":
        sock.send_multipart(evil)
    elif stranger == "wrong key":
        sock.send_multipart([*evil, Signer(bytes(32), TO_SERVER).sign(0, 1, 0, *evil)])
    elif stranger in ("replayed", "another channel"):
        # Worker 0's genuine message again (a second step-0 gradient, were it taken), on its
        # own channel or on another one (it is signed for channel 0).
        sock.send_multipart(genuine)
    elif stranger == "forged worker":  # worker 0's valid tag on a header claiming worker 1
        sock.send_multipart([evil[0], push[1], genuine[2]])
    else:
        sock.send_multipart([b"garbage"])
    _wait_for(lambda: fake.server.stats["unauthenticated"] == 1)
    header, value = fake.value(1, step=0)
    assert header.step == 0  # no step made: the model is unchanged
    np.testing.assert_allclose(value, [1.0, 1.0])
    fake.send(1, Kind.PUSH, 0, [3.0, 3.0])  # the job's own worker 1: the step is made
    np.testing.assert_allclose(fake.value(1, step=1)[1], [0.0, 0.0])  # 1 - 0.5 * (1 + 3) / 2
    stats = fake.stop()
    assert (stats["unauthenticated"], stats["rejected"], stats["applied"]) == (1, 0, 1)


def test_a_server_without_the_jobs_secret_does_not_start():
    with pytest.raises(ValueError, match="secret"):
        Server({"workers": 1, "consistency": "bsp", "classes": 1, "slices": [],
                "optimizer": "sgd", "optimizer_kwargs": {"lr": LR}})  # fmt: skip


@pytest.mark.parametrize(("bind", "listens"), [(None, "127.0.0.1"), ("*", "0.0.0.0")])
def test_a_server_listens_only_on_the_address_it_is_given(bind, listens):
    settings = {"workers": 1, "consistency": "bsp", "classes": 2, "slices": [], "optimizer": "sgd",
                "optimizer_kwargs": {"lr": LR}, "secret": SECRET.hex()}  # fmt: skip
    if bind is not None:
        settings["bind"] = bind
    server = Server(settings)
    try:
        for router, port in zip(server.routers, server.ports, strict=True):
            endpoint = cast(bytes, router.getsockopt(zmq.LAST_ENDPOINT))
            assert endpoint.decode() == f"tcp://{listens}:{port}"
    finally:
        server.close()


def test_messages_reordered_by_priority_are_not_taken_for_replays():
    # Sent on one channel, the less urgent first: the server handles the urgent one first,
    # yet checks sequence numbers in arrival order.
    fake = Fake("bsp", workers=1, start=False)
    fake.sendraw(0, [Header(Kind.INIT, 1, 0, 1, 0, 0, 1).pack(), np.ones(1, np.float32).tobytes()])
    fake.sendraw(0, [Header(Kind.INIT, 0, 0, 0, 0, 0, 2).pack(), np.ones(2, np.float32).tobytes()])
    assert fake.server.routers[0].poll(30000)  # both wait for the server's first drain
    fake.thread.start()
    np.testing.assert_allclose(fake.value(0, step=0)[1], [1.0, 1.0])
    stats = fake.stop()
    assert (stats["unauthenticated"], stats["rejected"]) == (0, 0)
