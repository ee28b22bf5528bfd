"""The parameter-server plan and priorities on tiny hand-checkable cases (no torch, no sockets)."""

import pytest

from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.ps.config import PSConfig, parse_consistency, parse_straggler
from cadence.ps.plan import ParamInfo, build_plan, priority_class, split_lengths
from cadence.ps.priority import (
    Op,
    fifo_priorities,
    graph_order,
    graph_priorities,
    layer_priorities,
    receive_groups,
)
from cadence.ps.wire import HEADER_BYTES, BadMessage, Header, Kind, tos


def _params(*specs):
    """specs: (numel, block) per parameter."""
    return [ParamInfo(i, f"p{i}", n, b) for i, (n, b) in enumerate(specs)]


def test_split_lengths_are_near_equal_and_bounded():
    assert split_lengths(10, 4) == [4, 3, 3]
    assert split_lengths(8, 4) == [4, 4]
    assert split_lengths(3, 4) == [3]


def test_large_tensor_is_sliced_across_servers_and_bytes_balance():
    # 100 + 20 + 20 elements over 2 servers: at most ceil(140 / 2) = 70 per slice, so p0 is cut
    # 50 + 50; largest first onto the least-loaded server: s0=50, s1=50, then 20 each.
    plan = build_plan(_params((100, 0), (20, 1), (20, 2)), [0, 1, 2], servers=2)
    desc = [(s.param, s.start, s.length, s.server) for s in plan.slices]
    assert desc == [(0, 0, 50, 0), (0, 50, 50, 1), (1, 0, 20, 0), (2, 0, 20, 1)]
    assert plan.server_bytes() == [280, 280]


def test_slice_bytes_caps_slices_and_one_server_holds_everything():
    plan = build_plan(_params((10, 0), (3, 1)), [1, 0], servers=1, slice_bytes=16)
    assert [(s.param, s.length) for s in plan.slices] == [(0, 4), (0, 3), (0, 3), (1, 3)]
    assert {s.server for s in plan.slices} == {0}
    assert plan.pull_order() == [3, 0, 1, 2]  # p1 is more urgent (priority 0)


def test_priority_classes_spread_evenly():
    assert [priority_class(p, 7, 4) for p in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [priority_class(p, 0, 4) for p in range(1)] == [0]  # FIFO: one class
    plan = build_plan(_params((1, 0), (1, 1), (1, 2)), [0, 1, 2], servers=1, classes=3)
    assert [s.klass for s in plan.slices] == [0, 1, 2]


def test_fifo_and_layer_priorities():
    assert fifo_priorities(3) == [0, 0, 0]
    assert layer_priorities([0, 0, 2, 5]) == [0, 0, 1, 2]


def test_graph_priority_follows_a_chain_in_order():
    # x -> lin0(p0, p1) -> relu -> lin1(p2) -> lin2(p3): a chain is received front to back.
    ops = [
        Op("lin0", 1.0, (), (0, 1)),
        Op("relu", 1.0, (0,), ()),
        Op("lin1", 1.0, (1,), (2,)),
        Op("lin2", 1.0, (2,), (3,)),
    ]
    assert receive_groups(ops, 4) == [[0, 1], [2], [3]]
    assert graph_priorities(ops, 4) == [0, 0, 1, 2]  # p0, p1 share their receive


def test_graph_priority_puts_the_parameter_needed_after_least_compute_first():
    # A branch with heavy compute before p0 is needed, and p1 needed at once by a cheap op.
    # Module (layer) order would receive p0 first; the graph order receives p1 first.
    ops = [
        Op("heavy", 10.0, (), ()),
        Op("lin", 1.0, (0,), (0,)),  # needs p0 after 10 s of compute
        Op("scale", 1.0, (), (1,)),  # needs p1 at once
        Op("add", 1.0, (1, 2), ()),
        Op("head", 1.0, (3,), (2,)),
    ]
    assert graph_order(ops, 3) == [[1], [0], [2]]
    assert graph_priorities(ops, 4) == [1, 0, 2, 3]  # p3: read by no op, last


def test_graph_priority_is_recomputed_after_each_pick():
    # "join" needs p0 and, through "a", p1: p0 alone unblocks nothing at first, so p1 (cost 0)
    # comes first; then p0 unblocks "join" after 1 s of compute, before p2 ("solo", after 5 s).
    ops = [
        Op("a", 1.0, (), (1,)),
        Op("pre", 5.0, (), ()),
        Op("join", 1.0, (0,), (0,)),
        Op("solo", 1.0, (1,), (2,)),
    ]
    assert graph_order(ops, 3) == [[1], [0], [2]]


def test_graph_order_rejects_ops_out_of_order():
    with pytest.raises(ValueError, match="topo order"):
        graph_order([Op("a", 1.0, (1,), ()), Op("b", 1.0, (), ())], 0)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("bsp", ("bsp", 0)), ("asp", ("asp", 0)), ("ssp:3", ("ssp", 3)), ("backup:2", ("backup", 2))],
)
def test_consistency_parses(text, parsed):
    assert parse_consistency(text) == parsed


@pytest.mark.parametrize("text", ["sync", "ssp", "ssp:-1", "backup:0", "bsp:1", "ssp:x"])
def test_bad_consistency_is_one_line(text):
    with pytest.raises(UserError, match="--consistency") as info:
        parse_consistency(text)
    assert "\n" not in str(info.value)


def test_straggler_parses_and_rejects():
    assert parse_straggler("1:0.5") == (1, 0.5)
    assert parse_straggler(None) is None
    for bad in ("1", "x:1", "1:-2"):
        with pytest.raises(UserError, match="--straggler"):
            parse_straggler(bad)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"servers": 0}, "--servers"),
        ({"priority": "random"}, "--ps-priority"),
        ({"consistency": "backup:3", "workers": 2}, "at most --workers"),
        ({"straggler": "2:1", "workers": 2}, "--straggler rank 2"),
        ({"classes": 9}, "priority classes"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(UserError, match=match):
        PSConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"strategy": "ps", "servers": 0}, "--servers must be at least 1"),
        ({"strategy": "ps", "consistency": "backup:3", "workers": 2}, "at most --workers 2"),
        ({"strategy": "ps", "ps_priority": "random"}, "unknown --ps-priority 'random'"),
        ({"strategy": "ddp", "straggler": "1:1"}, "--straggler is for --strategy ps"),
    ],
)
def test_train_config_checks_ps_settings(kwargs, match):
    with pytest.raises(UserError, match=match):
        TrainConfig.from_flat(**kwargs)
    assert TrainConfig.from_flat(strategy="ps", servers=2, consistency="ssp:2", straggler="1:0.5")


def test_header_round_trips_and_rejects_garbage():
    header = Header(Kind.PUSH, priority=3, worker=1, key=7, step=-1, extra=2, numel=10)
    raw = header.pack()
    assert len(raw) == HEADER_BYTES and Header.unpack(raw) == header
    with pytest.raises(BadMessage):
        Header.unpack(raw[:-1])
    with pytest.raises(BadMessage):
        Header.unpack(b"XX" + raw[2:])
    with pytest.raises(BadMessage, match="kind"):
        Header.unpack(raw[:3] + bytes([99]) + raw[4:])


def test_tos_marks_classes_with_dscp():
    assert [tos(c) for c in range(4)] == [184, 136, 72, 0]
