"""cadence-dp's trace recorder and the backward spans it derives from instants."""

from cadence.dp.trace import Recorder, backward_spans


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
