"""Gradient accumulation in the simulator (`SimOptions.grad_accum`, `--grad-accum`): N compute
passes per iteration, one gradient sync, overlapping only the last pass's backward. The toy
model of `test_sim_dp` (5 s of compute, 800 B of gradients, 10 s on its 80 B/s link) and the
two 4 MB blocks of `test_sim_strategies` (6 s of compute) make the figures hand-checkable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cadence.cli import main
from cadence.dp.plan import build_plan
from cadence.sim import SimOptions, simulate_ddp, simulate_dp
from cadence.sim.api import plan_dp
from cadence.sim.metrics import SimResult
from cadence.sim.zero_graph import ZeroSimPlan, simulate_zero
from tests.unit.test_sim_cli import zoo_profile
from tests.unit.test_sim_dp import LINK, TWO, params_of
from tests.unit.test_sim_strategies import FREE, MB, SLOW, _costs

ACCUM2 = SimOptions(grad_accum=2)


def _syncs(result: SimResult) -> int:
    """Collectives per measured iteration."""
    tasks = result.schedule.graph.tasks
    return sum(t.kind in ("allreduce", "collective") and t.iteration == 1 for t in tasks)


def test_ddp_pays_one_more_compute_pass_and_syncs_once() -> None:
    one = simulate_ddp(TWO, 2, LINK, params=params_of(TWO))
    two = simulate_ddp(TWO, 2, LINK, params=params_of(TWO), options=ACCUM2)
    # 5 s of compute, then the whole 10 s all-reduce after the last backward (one bucket).
    assert one.iteration_s == pytest.approx(15.0)
    assert two.iteration_s == pytest.approx(20.0)
    assert two.compute_s == pytest.approx(2 * one.compute_s)
    assert two.wire_bytes == pytest.approx(one.wire_bytes)
    assert _syncs(two) == _syncs(one) == 1


def test_cadence_dp_overlaps_only_the_last_micro_batchs_backward() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    one = simulate_dp(TWO, plan, 2, LINK)
    two = simulate_dp(TWO, plan, 2, LINK, options=ACCUM2)
    # The first pass 0..5 sends nothing; the second's W1 at 9 and W0 at 10 start c0 9..14 and
    # c1 14..19, whose update starts the next iteration: 14 s + one 5 s pass.
    assert one.iteration_s == pytest.approx(14.0)
    assert two.iteration_s == pytest.approx(19.0)
    assert _syncs(two) == _syncs(one) == 3  # two chunks and the "used" flags
    first = [t for t in two.schedule.graph.tasks if t.kind == "allreduce" and t.iteration == 0]
    assert min(two.schedule.start_s[t.id] for t in first) == pytest.approx(9.0)


def test_on_a_free_link_n_passes_cost_n_times_the_compute() -> None:
    for n in (1, 2, 4):
        options = SimOptions(grad_accum=n)
        ddp = simulate_ddp(TWO, 4, 1e12, params=params_of(TWO), options=options)
        assert ddp.iteration_s == pytest.approx(5.0 * n, rel=1e-6)


def test_the_runtimes_plan_is_timed_on_one_backward() -> None:
    args = (TWO, params_of(TWO), 400, 800, 2, LINK)
    assert plan_dp(*args, ACCUM2).describe() == plan_dp(*args).describe()


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_computes_n_passes_and_steps_once(stage: int) -> None:
    plan = ZeroSimPlan(stage=stage)
    # a 0.5 s step of a quarter shard
    update: dict[str, Any] = {"update_s_per_byte": 2.0 / (8 * MB)}
    one = simulate_zero(_costs(), plan, 4, FREE, **update)
    two = simulate_zero(_costs(), plan, 4, FREE, **update, grad_accum=2)
    assert one.iteration_s == pytest.approx(6.5)
    assert two.iteration_s == pytest.approx(12.5)
    slow_one = simulate_zero(_costs(), plan, 4, SLOW)
    slow_two = simulate_zero(_costs(), plan, 4, SLOW, grad_accum=2)
    if stage < 3:  # gradients reduced once, parameters gathered once
        assert slow_two.wire_bytes == pytest.approx(slow_one.wire_bytes)
    else:  # stage 3 gathers each block again for every micro-batch
        assert slow_two.wire_bytes > slow_one.wire_bytes


def _cli(tmp_path: Path, *extra: str) -> list[str]:
    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    return ["--model", "cnn", "--profile", str(profile), "--workers", "4", "--bandwidth",
            "10mbit", "--optimizer", "none", *extra]  # fmt: skip


def test_simulate_and_plan_take_grad_accum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    for n in (1, 2):
        args = _cli(tmp_path, "--strategy", "ddp", "--grad-accum", str(n), "--json", str(out))
        assert main(["simulate", *args]) == 0
        if n == 1:
            single = json.loads(out.read_text())
    double = json.loads(out.read_text())
    assert double["compute_s"] == pytest.approx(2 * single["compute_s"])
    assert double["wire_bytes"] == pytest.approx(single["wire_bytes"])
    assert "2 micro-batches per step" in capsys.readouterr().out
    plan = ["plan", "strategies", *_cli(tmp_path, "--grad-accum", "2", "--json", str(out))]
    assert main(plan) == 0
    names = {row["strategy"] for row in json.loads(out.read_text())["rows"]}
    assert {"ddp", "cadence-dp", "zero"} <= names and "ps" not in names


def test_a_bad_grad_accum_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *_cli(tmp_path, "--grad-accum", "0")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--grad-accum must be at least 1 (got 0)" in err
