"""A worker's communication thread signs what it sends and drops answers that do not verify
(one worker, a hand-driven ROUTER socket standing in for a server)."""

import numpy as np
import torch
import zmq

from cadence.ps.auth import TO_SERVER, TO_WORKER, Signer, Verifier
from cadence.ps.plan import build_plan
from cadence.ps.trace import param_infos
from cadence.ps.wire import Header, Kind
from cadence.ps.worker import WorkerChannels

SECRET = bytes(range(32))


def test_worker_signs_its_messages_and_drops_answers_that_do_not_verify():
    model = torch.nn.Linear(2, 1, bias=False)
    params, infos = param_infos(model)
    plan = build_plan(infos, [0], servers=1)
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    channels = WorkerChannels(plan, 0, [("127.0.0.1", [port])], params, 1, 30.0, SECRET)
    try:
        channels.expect([0])
        channels.send(0, 0, Header(Kind.PULL, 0, 0, 0, 0))
        assert router.poll(30000)
        ident, raw, payload, auth = router.recv_multipart()
        Verifier(SECRET, TO_SERVER).verify(0, 0, 0, raw, payload, auth)  # signed by worker 0

        def param(value):
            return [Header(Kind.PARAM, 0, 0, 0, 1, 0, 2).pack(), np.full(2, value, "f4").tobytes()]

        signer = Signer(SECRET, TO_WORKER)
        router.send_multipart([ident, *param(9.0)])  # unsigned
        bad = param(9.0)
        router.send_multipart([ident, *bad, Signer(bytes(32), TO_WORKER).sign(0, 0, 0, *bad)])
        good = param(1.0)
        genuine = [*good, signer.sign(0, 0, 0, *good)]
        router.send_multipart([ident, *genuine])
        channels.wait_block(0)
        router.send_multipart([ident, *param(9.0)[:1], genuine[1], genuine[2]])  # forged value
        router.send_multipart([ident, *genuine])  # replayed
        # The genuine answer's ACK, then (same connection, in order) one for a later answer
        # proves every message before it was handled.
        assert router.poll(30000) and Header.unpack(router.recv_multipart()[1]).kind == Kind.ACK
        channels.expect([0])
        later = param(1.0)
        router.send_multipart([ident, *later, signer.sign(0, 0, 0, *later)])
        assert router.poll(30000) and Header.unpack(router.recv_multipart()[1]).kind == Kind.ACK
        channels.wait_block(0)
        assert channels.unauthenticated == 4
        torch.testing.assert_close(model.weight.detach(), torch.ones(1, 2))
    finally:
        with channels._send_lock:
            channels._outbox.send_multipart([b"quit"])
        channels._thread.join(timeout=5)
        channels.ctx.destroy(linger=0)
        router.close(linger=0)
        ctx.term()
