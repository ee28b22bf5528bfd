"""A dead parameter server stops its worker with a clear error instead of a hang (one worker in
this process, real server subprocesses): its own servers are watched; any other server that
stays silent is named after the timeout."""

import pytest
import torch

from cadence.ps import PSConfig, PSTrainer
from cadence.ps.worker import ServerTimeout
from tests.dist.test_ps_parity import batch, make_model, make_optimizer


def test_dead_server_is_named_within_the_timeout():
    model = make_model()
    config = PSConfig(workers=1, servers=2, priority="layer", timeout_s=1.0)
    trainer = PSTrainer(model, make_optimizer("sgd", model.parameters()), config)
    x, y = batch(0)
    assert torch.isfinite(trainer.train_step(x, y))
    trainer.servers[-1].kill()  # the worker's only server 1
    trainer.servers[-1].wait()
    with pytest.raises(ServerTimeout, match=r"parameter server 1 \(pid \d+\) exited with code -9"):
        for _ in range(3):  # answers already in flight may still complete one step
            trainer.train_step(x, y)
    trainer.channels.check = None  # now as a worker that did not start the dead server
    trainer.servers[0].kill()
    trainer.servers[0].wait()
    with pytest.raises(
        ServerTimeout, match=r"server\(s\) \[[01, ]+\] sent no parameters for block \d+ within 1 s"
    ):
        for _ in range(3):
            trainer.train_step(x, y)
    # Tear the channels down without the dead servers: end their thread and drop unsent
    # messages, or garbage collection later blocks in zmq's context term (a hang in a
    # later test).
    channels = trainer.channels
    with channels._send_lock:
        channels._outbox.send_multipart([b"quit"])
    channels._thread.join(timeout=5)
    channels.ctx.destroy(linger=0)
