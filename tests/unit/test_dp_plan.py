"""The data-parallel plan on tiny hand-checkable cases."""

import pytest

from cadence.dp.config import DPConfig, mb_to_bytes
from cadence.dp.plan import (
    ParamInfo,
    backward_order,
    build_plan,
    default_credit,
    default_threshold,
    make_chunks,
    priority_order,
)


def _params(*specs):
    """specs: (numel, layer) per parameter, 4-byte floats."""
    return [ParamInfo(i, f"p{i}", n, 4, layer) for i, (n, layer) in enumerate(specs)]


def test_backward_order_is_back_layers_first():
    params = _params((1, 0), (1, 0), (1, 1), (1, 2))
    assert [p.index for p in backward_order(params)] == [3, 2, 1, 0]


def test_large_gradients_split_small_ones_fuse():
    # threshold 40 bytes = 10 floats. p2 (25 floats) splits 10+10+5; p1 and p0 (4 each) fuse.
    params = _params((4, 0), (4, 1), (25, 2))
    chunks = make_chunks(params, 40)
    desc = [[(s.param, s.start, s.length) for s in c.segments] for c in chunks]
    assert desc == [[(2, 0, 10)], [(2, 10, 10)], [(2, 20, 5)], [(1, 0, 4), (0, 0, 4)]]
    assert [c.priority for c in chunks] == [2, 2, 2, 0]  # a fused chunk takes its front layer
    assert [c.nbytes for c in chunks] == [40, 40, 20, 32]


def test_fusing_stops_once_threshold_is_reached():
    params = _params((3, 0), (3, 1), (3, 2), (3, 3))
    chunks = make_chunks(params, 24)  # two 12-byte gradients reach 24 bytes
    assert [[s.param for s in c.segments] for c in chunks] == [[3, 2], [1, 0]]


def test_urgent_chunk_overtakes_queued_ones():
    # Chunks 0-2 (priority 5) are ready at t=0, chunk 3 (priority 0) at t=1.5. The link needs
    # 1 s per chunk and the credit lets one in flight, so chunk 0 goes at t=0, chunk 1 at t=1,
    # then at t=2 the urgent chunk 3 is ready and overtakes chunk 2.
    params = _params((10, 5), (10, 5), (10, 5), (10, 0))
    chunks = make_chunks(params, 40)
    order = priority_order(chunks, [0.0, 0.0, 0.0, 1.5], link_bytes_per_s=40.0, credit_bytes=40)
    assert order == [0, 1, 3, 2]


def test_fifo_when_everything_is_ready_late():
    params = _params((10, 1), (10, 0))
    plan = build_plan(params, threshold_bytes=40, credit_bytes=80)
    assert plan.describe() == "c0[p0:0+10]@1 c1[p1:0+10]@0 | order 0 1"
    assert plan.layer_chunks == ((1,), (0,))


def test_every_element_is_covered_exactly_once():
    params = _params((7, 0), (100, 1), (1, 1), (33, 2), (0, 3))
    for threshold in (4, 12, 64, 400, 10_000):
        plan = build_plan(params, threshold, credit_bytes=threshold)
        covered = {p.index: [0] * p.numel for p in params}
        for chunk in plan.chunks:
            for seg in chunk.segments:
                for k in range(seg.start, seg.start + seg.length):
                    covered[seg.param][k] += 1
        assert all(c == 1 for counts in covered.values() for c in counts)
        assert sorted(plan.issue_order) == list(range(len(plan.chunks)))


def test_bad_threshold():
    with pytest.raises(ValueError, match="threshold"):
        make_chunks(_params((1, 0)), 0)


def test_default_threshold_is_a_quarter_of_the_gradients_within_1_to_4_mib():
    mib = 2**20
    assert default_threshold(int(1.86 * mib)) == mib  # resnet32: at least 1 MiB
    assert default_threshold(8 * mib) == 2 * mib  # a quarter
    assert default_threshold(61 * mib) == 4 * mib  # vgg16: at most 4 MiB
    assert default_threshold(0) == mib


def test_default_credit_is_two_chunks_or_four_for_a_large_model():
    mib = 2**20
    assert default_credit(mib, int(3.2 * mib)) == 2 * mib  # gpt_mini: 4 chunks in flight is all
    assert default_credit(4 * mib, 61 * mib) == 16 * mib  # vgg16: 15 chunks of 4 MiB
    assert default_credit(mib, 8 * mib) == 4 * mib  # 8 chunks: large
    assert default_credit(mib) == 2 * mib  # size unknown: two
    assert DPConfig().credit_for(61 * mib) == 16 * mib


def test_config_threshold_given_or_default():
    mib = 2**20
    assert DPConfig().threshold_for(8 * mib) == 2 * mib
    assert DPConfig().credit_for(8 * mib) == 4 * mib
    assert DPConfig(threshold_bytes=100).threshold_for(8 * mib) == 100
    assert DPConfig(threshold_bytes=100, credit_bytes=7).credit_for(8 * mib) == 7
    assert mb_to_bytes(None) is None and mb_to_bytes(0.5) == mib // 2


def test_engine_runs_the_default_threshold_for_its_model():
    import torch
    from torch import nn

    import cadence

    model = nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512), nn.Linear(512, 512))
    grad_bytes = sum(p.numel() * 4 for p in model.parameters())  # ~3 MiB: fits in 4 MiB
    model, optimizer = cadence.data_parallel(model, torch.optim.SGD(model.parameters(), lr=0.1))
    engine = model._cadence_dp_engine
    assert engine.threshold_bytes == default_threshold(grad_bytes) == 2**20
    model(torch.randn(4, 512)).sum().backward()
    optimizer.step()
    optimizer.flush()
    # The three 1 MiB weights and their biases: no single chunk of the whole model.
    assert len(engine.plan.chunks) == 3
    assert engine.plan.threshold_bytes == 2**20
