"""`cadence bench dp-timeline` end to end on the loopback: every rank's compute is recorded."""

from cadence.bench.dp_timeline import DPTimelineConfig, run_dp_timeline
from cadence.dp.plan import DPPlan


def test_every_rank_records_its_breakdown(tmp_path):
    config = DPTimelineConfig(
        model="cnn", cap="none", batch_size=16, steps=5, record_step=2, compute_alone=True,
        out=str(tmp_path / "tl.png"),
    )  # fmt: skip
    lines: list[str] = []
    report = run_dp_timeline(config, "test", echo=lines.append)
    assert (tmp_path / "tl.png").stat().st_size > 0
    assert list(report["runs"]) == ["compute", "ddp", "cadence", "compute-after"]
    for run in report["runs"].values():
        ranks = run["rank_breakdowns"]
        assert len(ranks) == 2
        assert ranks[0] == run["breakdown"]  # rank 0's is the pictured one
        for b in ranks:
            assert b["forward_s"] > 0 and b["backward_s"] > 0
            assert b["iteration_s"] >= b["forward_s"] + b["backward_s"] - 1e-9
        # Iterations 2-4 recorded whole (steps 1-4 traced; the last one's updates run past).
        per_iteration = run["iteration_breakdowns"]
        assert len(per_iteration) == 3 and all(len(ranks) == 2 for ranks in per_iteration)
        assert per_iteration[1] == ranks  # the pictured iteration, on every rank
        for ranks_of_one in per_iteration:
            for b in ranks_of_one:
                assert b["forward_s"] > 0 and b["backward_s"] > 0 and b["updates_s"] > 0
                assert b["iteration_s"] >= b["forward_s"] + b["backward_s"] - 1e-9
    # cadence-dp's plan, as its engine ran it, for the replay (DDP has none).
    plan = DPPlan.from_json(report["runs"]["cadence"]["plan"])
    assert plan.issue_order and sorted(plan.issue_order) == list(range(len(plan.chunks)))
    assert "plan" not in report["runs"]["ddp"]
    # Compute alone, before and after: every rank trains with nothing sent, and each
    # strategy's slowdown of its forward and backward against it is printed.
    for name in ("compute", "compute-after"):
        alone = report["runs"][name]
        assert "plan" not in alone
        assert all(b["allreduce_in_flight_s"] == 0 for b in alone["rank_breakdowns"])
    ratios = [line for line in lines if line.startswith("forward + backward")]
    assert len(ratios) == 1 and "ddp" in ratios[0] and "cadence" in ratios[0], lines
