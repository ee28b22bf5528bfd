"""The ZeRO adapter of the event simulator (`cadence.sim.zero_graph`) on hand-checkable cases:
two blocks of 1 s forward, 2 s backward and 4 MB of parameters each, unless said otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cadence.cli import main
from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.sim.zero_graph import ZeroSimPlan, simulate_zero
from cadence.zero.codec_cost import CodecCost, codec_work
from tests.unit.test_sim_cli import zoo_profile
from tests.unit.test_sim_strategies import FREE, MB, SLOW, _costs


def _period(stage: int, link: AlphaBeta, p: int, compression: str = "none", nb: int = 2) -> float:
    plan = ZeroSimPlan(stage=stage, compression=compression)
    return simulate_zero(_costs(nb=nb), plan, p, link).iteration_s


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_on_a_free_link_a_step_is_compute_plus_a_sharded_update(stage: int) -> None:
    plan = ZeroSimPlan(stage=stage)
    # 8 MB of parameters at 0.25 s/MB: a 2 s step over the whole model, 0.5 s per shard of 4.
    result = simulate_zero(_costs(), plan, 4, FREE, update_s_per_byte=2.0 / (8 * MB))
    assert result.iteration_s == pytest.approx(6.0 + 0.5)


@pytest.mark.parametrize("stage", [1, 2])
def test_early_updates_still_charge_their_processor_time_to_the_step(stage: int) -> None:
    # 1-bit Adam updates each block on the communication thread during the backward, but the
    # ranks' threads share the cores: the update's time is charged as the step, a shard's
    # (0.5 s of the whole model's 2 s at p = 4), or the whole model's when replicated.
    cost: dict[str, Any] = {"update_s_per_byte": 2.0 / (8 * MB)}
    sharded = ZeroSimPlan(stage=stage, compression="onebit")
    assert simulate_zero(_costs(), sharded, 4, FREE, **cost).iteration_s == pytest.approx(6.5)
    everywhere = ZeroSimPlan(stage=stage, compression="onebit", replicated_update=True)
    assert simulate_zero(_costs(), everywhere, 4, FREE, **cost).iteration_s == pytest.approx(8.0)


def test_codec_work_follows_the_executors_passes() -> None:
    # A bucket of 400 elements over 4 ranks (pieces of 100); (encoded, decoded) elements.
    stage1 = codec_work(1, False, 400, 4)  # decode the 3 pieces not owned, encode all 4;
    assert (stage1.before, stage1.between, stage1.after) == ((400, 300), (100, 400), (0, 0))
    assert codec_work(1, True, 400, 4).after == (0, 300)  # the others' pieces for the update
    stage2 = codec_work(2, False, 400, 4)  # last sent decoded, 4 pieces encoded; 4 received
    assert (stage2.before, stage2.between, stage2.after) == ((400, 400), (0, 0), (0, 400))
    assert codec_work(2, True, 400, 4).after == (0, 1600)  # 4 sent pieces for each owner
    assert codec_work(3, False, 400, 4) == stage2


@pytest.mark.parametrize(
    ("stage", "replicated", "codec_s"),
    # per block at p = 2, 1e6 elements, 0.1 us an element either way:
    [(1, False, 0.15 + 0.15), (2, False, 0.2 + 0.1), (1, True, 0.35), (2, True, 0.2 + 0.2)],
)
def test_the_codec_delays_each_buckets_exchange_on_the_communication_thread(
    stage: int, replicated: bool, codec_s: float
) -> None:
    codec = CodecCost(1e-7, 1e-7)
    plan = ZeroSimPlan(stage=stage, compression="onebit", replicated_update=replicated)
    free = simulate_zero(_costs(), plan, 2, FREE).iteration_s
    assert free == pytest.approx(6.0)
    # Block 1's codec hides under block 0's backward; block 0's comes after the backward,
    # before its update, which the next forward waits for.
    priced = simulate_zero(_costs(), plan, 2, FREE, codec=codec)
    assert priced.iteration_s == pytest.approx(6.0 + codec_s)
    assert any(task.kind == "codec" for task in priced.schedule.graph.tasks)
    # Stages without 1-bit compression have no codec to price.
    plain = ZeroSimPlan(stage=stage)
    assert simulate_zero(_costs(), plain, 2, FREE, codec=codec).iteration_s == pytest.approx(6.0)


def test_without_a_gather_lane_gathers_queue_behind_the_reductions() -> None:
    # Stage 2, onebit, on a slow link: block 1's gather is submitted right behind its update,
    # during block 0's backward, and is still on the wire when that backward ends. On a lane
    # of its own it shares the link with block 0's exchange; on the one thread, which runs
    # in submission order, block 0's exchange waits for it.
    def times(plan: ZeroSimPlan) -> dict[str, tuple[float, float]]:
        schedule = simulate_zero(_costs(), plan, 2, SLOW).schedule
        return {t.name: (schedule.start_s[t.id], schedule.end_s[t.id])
                for t in schedule.graph.tasks if t.iteration == 1}  # fmt: skip

    two = times(ZeroSimPlan(stage=2, compression="onebit"))
    one = times(ZeroSimPlan(stage=2, compression="onebit", gather_lane=False))
    assert two["a2a 0"][0] < two["g1"][1]
    assert one["a2a 0"][0] == pytest.approx(one["g1"][1])


def test_stage1_reduces_after_backward_and_gathers_after_the_step() -> None:
    ar = SLOW.time("allreduce", "ring", 4 * MB, 4)
    ag = SLOW.time("allgather", "ring", 4 * MB, 4)
    assert _period(1, SLOW, 4) == pytest.approx(6.0 + 2 * ar + 2 * ag)


def test_stage2_overlaps_reduce_scatter_with_backward() -> None:
    rs = SLOW.time("reduce_scatter", "ring", 4 * MB, 2)  # 2 s each
    ag = SLOW.time("allgather", "ring", 4 * MB, 2)
    # Block 1's reduce-scatter (from 4 s to 6 s) hides under block 0's backward (ends at 6 s);
    # block 0's starts at 6 s, so one is exposed, then the two gathers.
    assert _period(2, SLOW, 2) == pytest.approx(6.0 + rs + 2 * ag)


def test_onebit_cuts_the_gradient_bytes_and_updates_early() -> None:
    ar = SLOW.time("allreduce", "ring", 4 * MB, 2)
    ag = SLOW.time("allgather", "ring", 4 * MB, 2)
    # Plain stage 1: both all-reduces after the backward (6 s), the step, both gathers.
    assert _period(1, SLOW, 2) == pytest.approx(6.0 + 2 * ar + 2 * ag)
    # 1-bit Adam: each block's momentum is 1-bit all-reduced as its backward ends, updated on
    # the communication thread and gathered on the gather lane, so the link is busy from block
    # 1's backward end (4 s) with the two small reductions and the two gathers.
    packed = 4 * MB // 32 + 4 * 2
    reduce1 = SLOW.time("all_to_all", "pairwise", packed, 2) + SLOW.time(
        "allgather", "ring", packed, 2
    )
    assert reduce1 < ar / 25
    assert _period(1, SLOW, 2, "onebit") == pytest.approx(4.0 + 2 * reduce1 + 2 * ag)


def test_replicated_update_leaves_only_the_one_bit_momentum_on_the_wire() -> None:
    packed = 4 * MB // 32 + 4 * 2  # sign bits + a scale per chunk, per block
    a2a = SLOW.time("all_to_all", "pairwise", packed, 2)
    stage1 = ZeroSimPlan(stage=1, compression="onebit", replicated_update=True)
    # Each block's 1-bit all-reduce (all-to-all + all-gather) as its backward ends: block 1's
    # hides under block 0's backward, block 0's is exposed; no gathers.
    ag1 = SLOW.time("allgather", "ring", packed, 2)
    assert simulate_zero(_costs(), stage1, 2, SLOW).iteration_s == pytest.approx(
        6.0 + a2a + ag1
    )
    # Stage 2 all-gathers what each rank sent (p pieces); block 1's hides under block 0's
    # backward, block 0's is exposed.
    stage2 = ZeroSimPlan(stage=2, compression="onebit", replicated_update=True)
    sent = SLOW.time("allgather", "ring", 2 * packed, 2)
    assert simulate_zero(_costs(), stage2, 2, SLOW).iteration_s == pytest.approx(6.0 + sent)
    with pytest.raises(UserError, match="replicated_update needs stage 1 or 2 with onebit"):
        ZeroSimPlan(stage=3, compression="onebit", replicated_update=True)


def test_a_replicated_share_gathers_only_the_blocks_behind_it() -> None:
    packed = 4 * MB // 32 + 4 * 2
    a2a = SLOW.time("all_to_all", "pairwise", packed, 2)
    ag1 = SLOW.time("allgather", "ring", packed, 2)
    gather = SLOW.time("allgather", "ring", 4 * MB, 2)
    # Block 0 holds half the parameters: replicated at share 0.5, block 1 still gathered, so
    # the link is busy from block 1's backward end (4 s) with both reductions and one gather.
    half = ZeroSimPlan(stage=1, compression="onebit", replicated_update=True, replicated_share=0.5)
    assert half.replicated_blocks([4 * MB, 4 * MB]) == [True, False]
    assert simulate_zero(_costs(), half, 2, SLOW).iteration_s == pytest.approx(
        4.0 + 2 * (a2a + ag1) + gather
    )
    # A share below block 0's half replicates nothing: both gathered, as without the option.
    less = ZeroSimPlan(stage=1, compression="onebit", replicated_update=True, replicated_share=0.4)
    plain = ZeroSimPlan(stage=1, compression="onebit")
    assert simulate_zero(_costs(), less, 2, SLOW).iteration_s == pytest.approx(
        simulate_zero(_costs(), plain, 2, SLOW).iteration_s
    )
    with pytest.raises(UserError, match=r"replicated_share must be within \[0, 1\]"):
        ZeroSimPlan(stage=1, compression="onebit", replicated_update=True, replicated_share=2)


def test_stage3_gathers_hide_behind_compute_on_a_fast_link() -> None:
    fast = AlphaBeta(alpha_s=0.0, beta_s_per_byte=1e-9)
    exposed = fast.time("allgather", "ring", 4 * MB, 2) + fast.time(
        "reduce_scatter", "ring", 4 * MB, 2
    )  # the next step's first gather waits behind the last reduce-scatter
    assert _period(3, fast, 2, nb=4) == pytest.approx(12.0 + exposed, rel=1e-6)


def test_bad_plans_are_one_line_errors() -> None:
    with pytest.raises(UserError, match="stage"):
        ZeroSimPlan(stage=4)
    with pytest.raises(UserError, match="compression"):
        ZeroSimPlan(stage=1, compression="twobit")


def test_simulate_command_runs_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    out = tmp_path / "z.json"
    args = ["simulate", "--model", "cnn", "--profile", str(profile), "--workers", "4"]
    args += ["--bandwidth", "1mbit", "--optimizer", "none", "--strategy", "zero"]
    assert main([*args, "--zero-stage", "1", "--json", str(out)]) == 0
    stage1 = json.loads(out.read_text())
    assert main([*args, "--zero-stage", "1", "--compression", "onebit", "--json", str(out)]) == 0
    onebit = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert stage1["strategy"] == "zero1" and "zero stage 1, none" in printed
    assert printed.count("1-bit codec") == 1  # priced for the onebit run only
    assert onebit["wire_bytes"] < stage1["wire_bytes"] / 2
    assert onebit["iteration_time_s"] < stage1["iteration_time_s"]


def test_gathers_are_priced_with_the_all_gathers_own_alpha() -> None:
    # Stage 1 on 4 ranks: 2 all-reduces and 2 all-gathers of one block each per step, all
    # exposed. An all-gather's own alpha (3 messages each) moves the step by exactly its share.
    link = AlphaBeta(alpha_s=0.01, beta_s_per_byte=1e-6)
    own = AlphaBeta(alpha_s=0.01, beta_s_per_byte=1e-6, collective_alphas=(("allgather", 0.05),))
    messages = link.terms("allgather", "ring", 4 * MB, 4).messages
    assert _period(1, own, 4) - _period(1, link, 4) == pytest.approx(2 * messages * 0.04)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zeros_collectives_are_priced_with_cadences_own_alphas(stage: int) -> None:
    # The executor runs cadence's ring collectives: a calibration's p2p alphas price every one
    # of them as if they were the link's alphas for those collectives, and gloo's do not.
    names = ("allreduce", "reduce_scatter", "allgather")
    gloo = AlphaBeta(alpha_s=1e-3, beta_s_per_byte=1e-6)
    ring = AlphaBeta(1e-3, 1e-6, collective_alphas=tuple((c, 4e-3) for c in names))
    calibrated = AlphaBeta(1e-3, 1e-6, p2p_alphas=tuple((c, 4e-3) for c in names))
    assert _period(stage, calibrated, 4) == pytest.approx(_period(stage, ring, 4))
    assert _period(stage, calibrated, 4) > _period(stage, gloo, 4)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_step_waits_for_the_used_flags_all_reduce(
    stage: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The executor's plan all-reduces one flag per parameter once every bucket is reduced,
    # and the step waits for it: on a link of pure latency it adds one all-reduce's messages
    # to the step (2 (p - 1) of them in a ring); 1-bit Adam exchanges no flags.
    from cadence.sim.zero_graph import build_zero
    from cadence.zero.plan import ZeroPlan

    costs, link, p = _costs(), AlphaBeta(alpha_s=0.01, beta_s_per_byte=0.0), 4
    plan = ZeroSimPlan(stage=stage).zero_plan(costs, p)
    assert plan.used_flags is not None
    names = [t.name for t in build_zero(costs, plan, p, link, 1).graph.tasks]
    assert names.count("flags") == 2  # the warm-up iteration and the measured one
    with_flags = simulate_zero(costs, plan, p, link).iteration_s
    monkeypatch.setattr(ZeroPlan, "used_flags", property(lambda _plan: None))
    messages = link.terms("allreduce", "ring", 8, p).messages
    assert with_flags - simulate_zero(costs, plan, p, link).iteration_s == pytest.approx(
        messages * 0.01
    )
    monkeypatch.undo()
    onebit = ZeroSimPlan(stage=min(stage, 2), compression="onebit").zero_plan(costs, p)
    assert onebit.used_flags is None


def test_simulate_takes_the_all_gathers_alpha_from_a_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from cadence.comm.calibrate import Calibration

    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    args = ["simulate", "--model", "cnn", "--profile", str(profile), "--workers", "4"]
    args += ["--optimizer", "none", "--strategy", "zero", "--zero-stage", "3"]
    times = []
    for name, alphas in (("one", ()), ("own", (("allgather", 5e-3),))):
        link = AlphaBeta(alpha_s=1e-3, beta_s_per_byte=1e-6, collective_alphas=alphas)
        Calibration(link, 4, "gloo", 1, "regimes", (), torch.__version__).save(tmp_path / name)
        out = tmp_path / f"{name}.out.json"
        assert main([*args, "--calibration", str(tmp_path / name), "--json", str(out)]) == 0
        times.append(json.loads(out.read_text())["iteration_time_s"])
    assert "allgather alpha 5000 us" in capsys.readouterr().out
    assert times[1] > times[0]  # stage 3 gathers every block: each pays the larger alpha


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_first_forward_waits_for_the_buffers_one_broadcast_per_dtype(stage: int) -> None:
    # The executor broadcasts rank 0's buffers before each step's first forward, one message
    # per dtype; on a link of pure latency they add that many broadcasts to the step.
    from cadence.sim.zero_graph import build_zero

    costs, link, p = _costs(), AlphaBeta(alpha_s=0.01, beta_s_per_byte=0.0), 2
    plan = ZeroSimPlan(stage=stage).zero_plan(costs, p)
    graph = build_zero(costs, plan, p, link, 1, buffer_bytes=4096, buffer_broadcasts=2).graph
    names = [t.name for t in graph.tasks]
    # The warm-up step's, the measured one's and the next one's (which the measured one
    # ends with).
    assert names.count("buffers0") == names.count("buffers1") == 3
    first = next(t for t in graph.tasks if t.name == "F0" and t.iteration == 1)
    sent = {i for i, t in enumerate(graph.tasks) if t.name.startswith("buffers")}
    assert sent & set(first.deps)
    without = simulate_zero(costs, plan, p, link).iteration_s
    with_buffers = simulate_zero(costs, plan, p, link, buffer_bytes=4096, buffer_broadcasts=2)
    messages = link.terms("broadcast", "binomial", 2048, p).messages
    assert with_buffers.iteration_s - without == pytest.approx(2 * messages * 0.01)
