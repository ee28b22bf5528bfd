"""Pure parts of the timeline: backward spans from instants, lanes, the window, drawing."""

import pytest

from cadence.bench.dp_timeline import DPTimelineConfig, breakdown, draw, lanes, window
from cadence.dp.trace import Recorder, backward_spans
from cadence.errors import UserError


def test_backward_spans_run_from_each_start_to_the_next_and_end_with_a_wait():
    starts = [("layer 2", 1.0), ("layer 3", 0.5), ("layer 1", 1.5)]  # arrival order differs
    spans = backward_spans(starts, compute_end=2.0, returned=2.5)
    assert spans == [
        ("backward", "layer 3", 0.5, 1.0),
        ("backward", "layer 2", 1.0, 1.5),
        ("backward", "layer 1", 1.5, 2.0),
        ("wait", "waiting for communication", 2.0, 2.5),
    ]


def test_backward_spans_without_starts_or_wait():
    assert backward_spans([], compute_end=1.0, returned=1.0) == []
    assert backward_spans([("l", 1.0)], compute_end=0.5, returned=0.5) == [
        ("backward", "l", 1.0, 1.0)
    ]


def test_recorder_keeps_events_only_while_active_and_tags_the_iteration():
    rec = Recorder(clock=lambda: 10.0)
    rec.span("compute", "forward", "a", 1.0, 2.0)
    rec.active, rec.iteration = True, 4
    rec.span("compute", "forward", "b", 3.0, 4.0)
    rec.span("comm", "allreduce", "c", 2.5, 5.0, iteration=3)
    assert [(e.label, e.iteration) for e in rec.events] == [("b", 4), ("c", 3)]
    data = rec.to_json(origin=2.0)
    assert [(d["label"], d["start"], d["end"]) for d in data] == [("c", 0.5, 3.0), ("b", 1.0, 2.0)]


def test_lanes_put_overlapping_spans_side_by_side():
    assert lanes([(0, 2), (1, 3), (2, 4), (3.5, 5)]) == [0, 1, 0, 1]


def _run(iteration_s, comm_end):
    return {
        "iteration": 2,
        "iteration_s": iteration_s,
        "events": [
            {"row": "compute", "kind": "forward", "label": "l1", "start": 0.0, "end": 0.2,
             "iteration": 2},
            {"row": "compute", "kind": "backward", "label": "l1", "start": 0.3, "end": 0.6,
             "iteration": 2},
            {"row": "comm", "kind": "allreduce", "label": "1 MB", "start": 0.4, "end": comm_end,
             "iteration": 2},
            {"row": "comm", "kind": "allreduce", "label": "1 MB", "start": -0.2, "end": 0.1,
             "iteration": 1},
            {"row": "update", "kind": "update", "label": "l1", "start": comm_end,
             "end": comm_end + 0.05, "iteration": 2},
        ],
    }  # fmt: skip


def test_window_reaches_the_later_of_next_iteration_and_own_work(tmp_path):
    assert window(_run(1.0, 0.7)) == (0.0, 1.0)
    assert window(_run(0.8, 1.2)) == pytest.approx((0.0, 1.25))
    path = tmp_path / "t.png"
    draw({"ddp": _run(1.0, 0.7), "cadence": _run(0.8, 1.2)}, {"ddp": "A", "cadence": "B"}, path)
    assert path.stat().st_size > 5_000


def test_timeline_config_rejects_a_step_without_neighbours():
    with pytest.raises(UserError, match="--record-step"):
        DPTimelineConfig(model="mlp", cap="none", steps=6, record_step=5)
    with pytest.raises(UserError, match="unknown model"):
        DPTimelineConfig(model="alexnet")


def test_breakdown_separates_waiting_inside_the_forward_and_merges_overlapping_reduces():
    run = _run(1.0, 0.7)
    run["events"] += [
        {"row": "compute", "kind": "forward-pass", "label": "f", "start": 0.0, "end": 0.25,
         "iteration": 2},
        {"row": "compute", "kind": "wait", "label": "w", "start": 0.0, "end": 0.05,
         "iteration": 2},
        {"row": "comm", "kind": "allreduce", "label": "x", "start": 0.5, "end": 0.9,
         "iteration": 2},
    ]  # fmt: skip
    got = breakdown(run)
    assert got["forward_s"] == pytest.approx(0.2)
    assert got["wait_s"] == pytest.approx(0.05)
    assert got["allreduce_in_flight_s"] == pytest.approx(0.5)  # 0.4-0.7 and 0.5-0.9 overlap
    assert got["updates_s"] == pytest.approx(0.05)
