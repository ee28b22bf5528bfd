"""The pipeline planner: candidates, memory limits, network state and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.pipeline.planner import microbatch_counts, plan_pipeline, schedules_for
from cadence.profile.record import BlockProfile, Profile


def _profile(batch: int = 8, t: float = 0.04, blocks: int = 4, act: int = 4000) -> Profile:
    items = tuple(
        BlockProfile(f"b{i}", t, t, t, 1000, act, 400 * batch, 0) for i in range(blocks)
    )
    return Profile("toy", batch, (10,), items, 0.0, 0.0, 1, 0, "cpu", 1, "x", 0, "cpu_accounted")


FAST = AlphaBeta(alpha_s=0.0, beta_s_per_byte=1e-15)


def test_candidates_cover_every_split_and_k() -> None:
    assert microbatch_counts(8) == [1, 2, 4, 8]
    assert microbatch_counts(8, [4, 2]) == [2, 4]
    assert [s.name for s in schedules_for(2, 4)] == ["gpipe", "1f1b", "kfkb:2", "kfkb:4"]
    plan = plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST)
    assert [s.name for s in schedules_for(2, 1)] == ["gpipe"]  # M = 1: they are all one
    assert len(plan.candidates) == 1 + 3 + 4 + 5  # per M > 1: gpipe + one per divisor K
    times = [round(c.predicted_s, 9) for c in plan.candidates]
    assert times == sorted(times) and plan.best == plan.candidates[0]
    assert plan.ranges == ((0, 2), (2, 4))


def test_without_limits_on_a_free_network_more_micro_batches_win() -> None:
    # Costs proportional to the batch and free messages: the bubble shrinks as M grows.
    plan = plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST)
    assert plan.best.microbatches == 8
    assert plan.best.schedule in ("gpipe", "1f1b")


def test_memory_limit_excludes_candidates_and_the_pick_fits() -> None:
    free = plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST)
    peaks = sorted({max(c.peak_bytes) for c in free.candidates})
    limit = peaks[len(peaks) // 2]
    plan = plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST, memory_limit=limit)
    assert max(plan.best.peak_bytes) <= limit
    assert any(not c.fits for c in plan.candidates)
    assert all(c.fits == (max(c.peak_bytes) <= limit) for c in plan.candidates)
    assert plan.best.predicted_s >= free.best.predicted_s
    assert "exceed the limit" in plan.why()


def test_message_latency_makes_the_planner_group_micro_batches() -> None:
    # M = 8 under a limit that only 1F1B and kFkB:2 meet (stage 0 holds 2 and 4 micro-batches).
    def pick(link: AlphaBeta) -> str:
        free = plan_pipeline(_profile(), stages=2, batch_size=8, link=link, microbatches=[8])
        limit = next(max(c.peak_bytes) for c in free.candidates if c.schedule == "kfkb:2")
        plan = plan_pipeline(
            _profile(), stages=2, batch_size=8, link=link, microbatches=[8], memory_limit=limit
        )
        assert {c.schedule for c in plan.candidates if c.fits} == {"1f1b", "kfkb:2"}
        return plan.best.schedule

    assert pick(FAST) == "1f1b"  # free messages: the smaller bubble wins
    # 50 ms per message, 10 ms of compute per micro-batch and block: half the messages win.
    assert pick(AlphaBeta(alpha_s=0.05, beta_s_per_byte=1e-15)) == "kfkb:2"


def test_table_json_and_why() -> None:
    plan = plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST, memory_limit=10**9)
    lines = plan.table_lines()
    assert lines[0].split()[:5] == ["schedule", "M", "mb", "msgs", "pred"]
    assert sum("<- pick" in line for line in lines) == 1
    data = json.loads(plan.dumps())
    assert data["best"]["schedule"] == plan.best.schedule
    assert len(data["candidates"]) == len(plan.candidates)
    assert plan.why().startswith(f"pick {plan.best.schedule} x {plan.best.microbatches}")


def test_bad_input_says_what_is_possible() -> None:
    with pytest.raises(UserError, match=r"3 micro-batches do not divide the batch of 8: use one "
                       r"of 1, 2, 4, 8"):
        plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST, microbatches=[3])
    with pytest.raises(UserError, match=r"4 blocks cannot be split into 5 stages: use --stages"):
        plan_pipeline(_profile(), stages=5, batch_size=8, link=FAST)
    with pytest.raises(UserError, match=r"no schedule fits --memory-limit .* use --memory-limit "
                       r"(\d+) or more"):
        plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST, memory_limit=1000)


def test_smallest_fitting_limit_named_in_the_error_is_enough() -> None:
    import re

    with pytest.raises(UserError) as info:
        plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST, memory_limit=1000)
    match = re.search(r"use --memory-limit (\d+)", str(info.value))
    assert match is not None
    enough = int(match.group(1))
    plan = plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST, memory_limit=enough)
    assert max(plan.best.peak_bytes) <= enough
    with pytest.raises(UserError):
        plan_pipeline(_profile(), stages=2, batch_size=8, link=FAST, memory_limit=enough - 1)


def _saved(tmp_path: Path, batch: int) -> Path:
    path = tmp_path / f"toy-b{batch}.json"
    _profile(batch=batch, t=0.005 * batch).save(path)
    return path


def test_plan_pipeline_command_prints_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    args = ["plan", "pipeline", "--model", "toy", "--stages", "2", "--batch-size", "8",
            "--bandwidth", "100mbit", "--latency", "0.001", "--memory-limit", "1MiB",
            "--profile", str(_saved(tmp_path, 2)), "--profile", str(_saved(tmp_path, 8)),
            "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    best = data["best"]
    assert f"pick {best['schedule']} x {best['microbatches']}" in text
    assert "<- pick" in text and "toy, batch 8, 2 stages (blocks 0..1, 2..3)" in text
    assert data["memory_limit"] == 2**20 and data["latency_s"] == 0.001
    assert len(data["candidates"]) == 13


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--memory-limit", "1kb"], "no schedule fits --memory-limit"),
        (["--microbatches", "3"], "3 micro-batches do not divide the batch of 8"),
        (["--microbatches", "two"], "bad micro-batch count 'two'"),
        (["--stages", "5"], "4 blocks cannot be split into 5 stages"),
        (["--bandwidth", "fast"], "fast"),
    ],
)
def test_plan_pipeline_command_bad_input_is_one_line(
    tmp_path: Path, extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "pipeline", "--model", "toy", "--batch-size", "8",
            "--profile", str(_saved(tmp_path, 8)), *extra]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_the_batch_moves_every_candidate_alike() -> None:
    # Every rank reads the step's whole batch (here twice the profile's): each candidate's
    # prediction grows by that, and the order stays.
    import dataclasses

    without = plan_pipeline(_profile(), stages=2, batch_size=16, link=FAST)
    charged = plan_pipeline(
        dataclasses.replace(_profile(), input_s=0.003), stages=2, batch_size=16, link=FAST
    )
    assert [(c.schedule, c.microbatches) for c in charged.candidates] == [
        (c.schedule, c.microbatches) for c in without.candidates
    ]
    for a, b in zip(without.candidates, charged.candidates, strict=True):
        assert b.predicted_s == pytest.approx(a.predicted_s + 2 * 0.003, rel=1e-9)
