"""The event engine on hand-checkable graphs: streams, priorities, fair links, latency."""

from __future__ import annotations

import pytest

from cadence.sim import LINK, STREAM, TaskGraph, run


def test_stream_runs_ready_tasks_by_priority_then_in_program_order() -> None:
    g = TaskGraph()
    cpu = g.resource("cpu", STREAM)
    gate = g.add("gate", "marker", duration_s=1.0)
    low = g.add("low", "x", resources=[cpu], duration_s=2.0, deps=[gate], priority=5)
    high = g.add("high", "x", resources=[cpu], duration_s=3.0, deps=[gate], priority=1)
    after = g.add("after", "x", resources=[cpu], duration_s=1.0, deps=[low])
    s = run(g)
    # Both become ready at 1.0 together; the lower priority number wins although added later.
    assert (s.start_s[high], s.end_s[high]) == (1.0, 4.0)
    assert (s.start_s[low], s.end_s[low]) == (4.0, 6.0)
    assert (s.start_s[after], s.end_s[after]) == (6.0, 7.0)
    assert s.makespan_s == 7.0


def test_link_shares_bandwidth_equally_between_concurrent_flows() -> None:
    g = TaskGraph()
    nic = g.resource("nic", LINK, bytes_per_s=100.0)
    a = g.add("a", "flow", resources=[nic], nbytes=100.0)
    delay = g.add("delay", "marker", duration_s=0.5)
    b = g.add("b", "flow", resources=[nic], nbytes=100.0, deps=[delay])
    s = run(g)
    # a alone moves 50 B by 0.5 s, then 50 B/s each: a ends at 1.5, b has 50 B left alone.
    assert s.end_s[a] == pytest.approx(1.5)
    assert s.end_s[b] == pytest.approx(2.0)


def test_flow_over_two_links_moves_at_its_slowest_share_and_pays_latency_first() -> None:
    g = TaskGraph()
    fast = g.resource("fast", LINK, bytes_per_s=100.0)
    slow = g.resource("slow", LINK, bytes_per_s=40.0)
    x = g.add("x", "flow", resources=[fast, slow], nbytes=100.0)
    y = g.add("y", "flow", resources=[fast], nbytes=100.0)
    z = g.add("z", "flow", resources=[slow], nbytes=40.0, duration_s=10.0)
    s = run(g)
    # x: min(100/2, 40) = 40 B/s; y: 50 B/s -> 2.0; x then alone at 40 B/s: 80 B by 2.0 -> 2.5.
    assert s.end_s[y] == pytest.approx(2.0)
    assert s.end_s[x] == pytest.approx(2.5)
    assert s.end_s[z] == pytest.approx(11.0)  # latency 10 s, then 40 B alone at 40 B/s


def test_graph_rejects_forward_dependencies_and_mixed_resources() -> None:
    g = TaskGraph()
    cpu = g.resource("cpu", STREAM)
    nic = g.resource("nic", LINK, bytes_per_s=1.0)
    with pytest.raises(ValueError, match="not yet added"):
        g.add("t", "x", deps=[3])
    with pytest.raises(ValueError, match="one stream or only links"):
        g.add("t", "x", resources=[cpu, nic])
    with pytest.raises(ValueError, match="positive bandwidth"):
        g.resource("bad", LINK, bytes_per_s=0.0)


def test_add_work_time_slices_a_shared_processor_and_runs_a_stream_alone() -> None:
    g = TaskGraph()
    core = g.resource("core", LINK, bytes_per_s=1.0)  # seconds of work per second
    cpu = g.resource("cpu", STREAM)
    a = g.add_work("a", "forward", core, 1.0)
    b = g.add_work("b", "update", core, 0.5)
    c = g.add_work("c", "forward", cpu, 1.0)
    s = run(g)
    # a and b share the core at half speed each: b's 0.5 s of work ends at 1.0, a's at 1.5.
    assert s.end_s[b] == pytest.approx(1.0)
    assert s.end_s[a] == pytest.approx(1.5)
    assert s.end_s[c] == pytest.approx(1.0)


def test_a_token_bucket_passes_its_bytes_at_once_after_the_link_idles() -> None:
    g = TaskGraph()
    nic = g.resource("nic", LINK, bytes_per_s=100.0, bucket_bytes=50.0)
    first = g.add("first", "flow", resources=[nic], nbytes=200.0)
    wait = g.add("wait", "marker", duration_s=4.0)
    second = g.add("second", "flow", resources=[nic], nbytes=200.0, deps=[wait])
    right_after = g.add("right_after", "flow", resources=[nic], nbytes=100.0, deps=[first])
    s = run(g)
    # At 0 the bucket is empty: 200 B at 100 B/s. right_after starts as first ends, on a link
    # that has not idled: no tokens, 1.0 s. At 4.0 the link has idled 1.0 s (bucket full,
    # 50 B): second moves the other 150 B at the rate.
    assert s.end_s[first] == pytest.approx(2.0)
    assert s.end_s[right_after] == pytest.approx(3.0)
    assert s.end_s[second] == pytest.approx(5.5)


def test_a_flow_joining_a_busy_link_gets_no_tokens_and_a_partly_filled_bucket_gives_less() -> None:
    g = TaskGraph()
    nic = g.resource("nic", LINK, bytes_per_s=100.0, bucket_bytes=50.0)
    first = g.add("first", "flow", resources=[nic], nbytes=100.0)
    late = g.add("late", "marker", duration_s=0.5)
    joins = g.add("joins", "flow", resources=[nic], nbytes=50.0, deps=[late])
    pause = g.add("pause", "marker", duration_s=1.8, deps=[first])
    after_pause = g.add("after_pause", "flow", resources=[nic], nbytes=100.0, deps=[pause])
    s = run(g)
    # joins shares the busy link from 0.5 (no tokens): both at 50 B/s, 50 B each left -> 1.5.
    assert s.end_s[first] == pytest.approx(1.5) and s.end_s[joins] == pytest.approx(1.5)
    # first ends at 1.5 but the link stays busy until joins ends, also 1.5; idle until 3.3:
    # 1.8 s would gather 180 B, capped at 50; 50 B at once, then 50 B at 100 B/s.
    assert s.end_s[after_pause] == pytest.approx(3.8)


def test_only_a_link_takes_a_token_bucket_and_never_a_negative_one() -> None:
    g = TaskGraph()
    with pytest.raises(ValueError, match="only a link"):
        g.resource("cpu", STREAM, bucket_bytes=10.0)
    with pytest.raises(ValueError, match="bucket_bytes"):
        g.resource("nic", LINK, bytes_per_s=1.0, bucket_bytes=-1.0)
    # A refused resource leaves no name behind: both can still be made as they should be.
    assert g.resource("cpu", STREAM) == 0 and g.resources[0].kind == STREAM
    assert g.resource("nic", LINK, bytes_per_s=1.0) == 1 and len(g.resources) == 2


def test_a_link_slowed_by_a_busy_stream_keeps_its_share_only_while_the_stream_works() -> None:
    g = TaskGraph()
    cpu = g.resource("cpu", STREAM)
    nic = g.resource("nic", LINK, bytes_per_s=100.0, slowed_by=cpu, slowed_share=0.5)
    work = g.add("work", "backward", resources=[cpu], duration_s=1.0)
    flow = g.add("flow", "allreduce", resources=[nic], nbytes=100.0)
    pause = g.add("pause", "marker", duration_s=0.5, deps=[work])
    more = g.add("more", "forward", resources=[cpu], duration_s=1.0, deps=[pause])
    s = run(g)
    # 0-1.0: the cpu works, 50 B/s: 50 B. 1.0-1.5: idle, 100 B/s: the other 50 B by 1.5, just
    # as `more` starts; without the slowing the flow would end at 1.0.
    assert s.end_s[flow] == pytest.approx(1.5)
    assert s.start_s[more] == pytest.approx(1.5)


def test_back_to_back_work_keeps_a_slowed_link_slow_and_a_shared_core_counts_as_in_use() -> None:
    g = TaskGraph()
    core = g.resource("core", LINK, bytes_per_s=1.0)  # a processor shared by two threads
    nic = g.resource("nic", LINK, bytes_per_s=100.0, slowed_by=core, slowed_share=0.25)
    first = g.add_work("first", "backward", core, 1.0)
    g.add_work("second", "backward", core, 1.0, deps=[first])  # starts the instant first ends
    flow = g.add("flow", "allreduce", resources=[nic], nbytes=100.0)
    s = run(g)
    # The core is in use from 0 to 2.0 without a gap: 25 B/s, 50 B by 2.0, then 100 B/s.
    assert s.end_s[flow] == pytest.approx(2.5)


def test_only_a_link_is_slowed_by_an_existing_resource_at_a_share_in_0_1() -> None:
    g = TaskGraph()
    cpu = g.resource("cpu", STREAM)
    with pytest.raises(ValueError, match="only a link is slowed"):
        g.resource("other", STREAM, slowed_by=cpu, slowed_share=0.5)
    with pytest.raises(ValueError, match="only a link is slowed"):
        g.resource("nic", LINK, bytes_per_s=1.0, slowed_by=7, slowed_share=0.5)
    for share in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="slowed_share"):
            g.resource("nic", LINK, bytes_per_s=1.0, slowed_by=cpu, slowed_share=share)
    assert g.resource("nic", LINK, bytes_per_s=1.0, slowed_by=cpu, slowed_share=0.5) == 1


@pytest.mark.parametrize("release_s, works_early", [(1.0, True), (3.0, False)])
def test_a_conditional_task_works_only_if_its_condition_ended_else_its_deferred_copy_does(
    release_s: float, works_early: bool
) -> None:
    g = TaskGraph()
    cpu = g.resource("cpu", STREAM)
    release = g.add("release", "marker", duration_s=release_s)
    ready = g.add("ready", "marker", duration_s=2.0)
    early = g.add("early", "x", resources=[cpu], duration_s=1.0, deps=[ready],
                  work_if_ended=release)  # fmt: skip
    late_gate = g.add("late gate", "marker", duration_s=5.0)
    late = g.add("late", "x", resources=[cpu], duration_s=1.0, deps=[late_gate, release],
                 ends_with=early)  # fmt: skip
    after = g.add("after", "x", resources=[cpu], duration_s=1.0, deps=[late])
    s = run(g)
    # Ready at 2: released at 1, the early copy works 2..3 and the late one ends with it;
    # released at 3, the early copy ends at once and the late one works 5..6.
    assert (s.did_work(early), s.did_work(late)) == (works_early, not works_early)
    assert s.end_s[late] == (3.0 if works_early else 6.0)
    assert s.end_s[after] == s.end_s[late] + 1.0
