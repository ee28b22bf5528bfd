"""Timeline recording on real ranks (world 2, gloo): every layer's forward and backward,
every chunk or bucket all-reduce and every update of the recorded iteration are there, in a
possible order, and recording changes nothing about training (DDP parity)."""

import torch
import torch.nn.functional as F
from torch import nn

from cadence.dp import DPConfig, data_parallel
from cadence.dp.layers import model_layout
from cadence.dp.trace import Recorder, trace_ddp, trace_layers
from cadence.testing import run_ranks

STEPS, RECORDED = 4, 3  # 1-based iteration recorded


def _model():
    torch.manual_seed(0)
    # An in-place ReLU after the conv: the backward tensor hook must tolerate it.
    return nn.Sequential(
        nn.Conv2d(1, 4, 3),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(576, 32),
        nn.Linear(32, 10),
    )


def _record(rank, world_size, strategy):
    plain = _model()
    optimizer = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    layout = model_layout(plain)
    rec = Recorder()
    if strategy == "ddp":
        model = nn.parallel.DistributedDataParallel(plain, bucket_cap_mb=0.01)
        trace_ddp(model, rec)
        chunks = None
    else:
        model, optimizer = data_parallel(plain, optimizer, DPConfig(threshold_bytes=4096))
        model._cadence_dp_engine.trace = rec
        chunks = len(model._cadence_dp_engine.plan.chunks)
    trace_layers(layout.layers, layout.params, rec)
    gen = torch.Generator().manual_seed(1)
    starts = {}
    for it in range(1, STEPS + 1):
        x, y = torch.randn(8, 1, 14, 14, generator=gen), torch.randint(0, 10, (8,), generator=gen)
        rec.active, rec.iteration = it == RECORDED, it
        starts[it] = rec.clock()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x[rank::2]), y[rank::2])
        called = rec.clock()
        loss.backward()
        rec.end_backward(called, rec.clock())
        optimizer.step()
        if strategy != "ddp":
            optimizer.flush()  # the recorded iteration's updates land before recording stops
    rec.active = False
    params = [p.detach().clone() for p in plain.parameters()]
    return rec.to_json(starts[RECORDED]), chunks, params


def test_recorded_iteration_has_every_layer_chunk_and_update_and_training_is_unchanged():
    ddp = run_ranks(_record, 2, "ddp")
    ours = run_ranks(_record, 2, "cadence")
    for (_, _, a), (_, _, b) in zip(ddp, ours, strict=True):
        for pa, pb in zip(a, b, strict=True):
            torch.testing.assert_close(pa, pb)
    labels = ["layer 1 (Conv2d)", "layer 2 (Linear)", "layer 3 (Linear)"]
    for events, chunks, _ in (ddp[0], ours[0]):
        assert all(e["iteration"] == RECORDED and e["start"] <= e["end"] for e in events)
        forward = [e for e in events if e["kind"] == "forward"]
        assert [e["label"] for e in forward] == labels  # in start order
        backward = [e for e in events if e["kind"] == "backward"]
        assert [e["label"] for e in backward] == labels[::-1]
        assert forward[-1]["end"] <= backward[0]["start"]
        comm = [e for e in events if e["row"] == "comm"]
        assert comm and all(e["start"] >= backward[0]["start"] for e in comm)
        if chunks is not None:  # cadence: every chunk once, every layer updated after its reduce
            assert len(comm) == chunks
            updates = [e for e in events if e["kind"] == "update"]
            assert sorted(e["label"] for e in updates) == ["layer 1", "layer 2", "layer 3"]
            assert min(e["start"] for e in updates) >= min(e["end"] for e in comm) - 1e-3
        else:  # DDP: 10 KB buckets, so several of them
            assert len(comm) >= 2
