"""Stage balancing on profiled block costs, and per-stage memory under a schedule."""

import dataclasses
import itertools

import pytest
import torch

from cadence.errors import UserError
from cadence.models import get_model_spec
from cadence.pipeline import (
    balance,
    even_split,
    gpipe,
    kfkb,
    one_f_one_b,
    peak_in_flight,
    plan_stages,
    stage_memory,
    stage_module,
)
from cadence.profile import BlockProfile, Profile


def _brute_force_bottleneck(costs: list[float], stages: int) -> float:
    best = float("inf")
    for cuts in itertools.combinations(range(1, len(costs)), stages - 1):
        bounds = (0, *cuts, len(costs))
        best = min(best, max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


def test_balance_is_optimal_contiguous_and_covers_every_block() -> None:
    gen = torch.Generator().manual_seed(0)
    for n, stages in [(6, 2), (7, 3), (9, 4), (5, 5)]:
        costs = torch.rand(n, generator=gen).tolist()
        ranges = balance(costs, stages)
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(a < b for a, b in ranges)
        assert all(ranges[i][1] == ranges[i + 1][0] for i in range(stages - 1))
        got = max(sum(costs[a:b]) for a, b in ranges)
        assert got == pytest.approx(_brute_force_bottleneck(costs, stages))


def test_balance_golden_and_bad_input() -> None:
    assert balance([1, 1, 1, 3], 2) == ((0, 3), (3, 4))
    assert even_split(5, 2) == ((0, 3), (3, 5))
    needle = r"6 blocks cannot be split into 7 stages: use --stages 1..6"
    with pytest.raises(UserError, match=needle):
        balance([1.0] * 6, 7)


def _profile(times: list[float], batch: int = 4) -> Profile:
    blocks = tuple(
        BlockProfile(f"b{i}", t, t, t, 1000 * (i + 1), 400 * (i + 1), 40 * (i + 1), 0)
        for i, t in enumerate(times)
    )
    return Profile(
        "toy", batch, (1, 2, 2), blocks, 0.0, 0.0, 1, 0, "cpu", 1, "x", 0, "cpu_accounted"
    )


def test_plan_stages_sums_per_stage() -> None:
    plan = plan_stages(_profile([0.01, 0.01, 0.01, 0.03]), 2)
    assert plan.ranges == ((0, 3), (3, 4))
    assert plan.param_bytes == (6000, 4000)
    assert plan.compute_s(0) == pytest.approx(0.09) == plan.compute_s(1)  # F + dI + dW
    assert plan.activation_bytes_per_sample == (600.0, 400.0)
    assert plan.input_bytes_per_sample == (16.0, 30.0)  # input 1x2x2 floats; b2's output / 4
    assert plan.output_bytes_per_sample == (30.0, 40.0)
    assert "stage 1: blocks 3..3 (b3)" in plan.summary()


def test_peak_in_flight() -> None:
    assert peak_in_flight(gpipe(3, 4)) == (4, 4, 4)
    assert peak_in_flight(one_f_one_b(3, 4)) == (3, 2, 1)
    assert peak_in_flight(kfkb(3, 8, 2)) == (6, 4, 2)


def test_stage_memory_counts_params_state_and_activations() -> None:
    plan = plan_stages(_profile([0.01, 0.01, 0.01, 0.03]), 2)
    mem = stage_memory(plan, one_f_one_b(2, 4), microbatch_size=2, optimizer="adam")
    assert mem[0].params == 6000 and mem[0].grads == 6000 and mem[0].optimizer_state == 12000
    # Peak at B2 (F0 F1 B0 F2 B1 F3 B2 B3): 2 micro-batches held (600 B/sample x 2), the 4
    # activation messages sent so far (30 B/sample x 2 each; kept until the step ends), the
    # receive buffers of the 2 gradient messages still to come (B2's and B3's, posted at the
    # step's start), the largest block's (3000 B) weights repacked by the kernel, and, after
    # the first backward, that block's new weight gradients being added into the others.
    assert plan.grad_transient_bytes == (3000, 4000) == plan.workspace_bytes
    mine = 2 * 600 * 2 + 4 * 60 + 2 * 60 + 3000 + 3000
    assert mem[0].in_flight == 2 and mem[0].activations == mine
    # Last stage at B3: one micro-batch, 3 gradient messages sent (stage 0's output size).
    assert mem[1].activations == 1 * 400 * 2 + 3 * 60 + 4000 + 4000
    assert mem[0].total == 6000 + 6000 + 12000 + mine
    recomputed = stage_memory(plan, one_f_one_b(2, 4, recompute=True), 2, "sgd", momentum=0)
    # inputs of 2 micro-batches + messages + one rebuilt micro-batch + workspace + grads
    assert recomputed[0].activations == 2 * 16 * 2 + 4 * 60 + 2 * 60 + 600 * 2 + 3000 + 3000
    assert recomputed[0].optimizer_state == 0


def test_forward_workspace_and_sent_messages_count_without_any_backward() -> None:
    plan = plan_stages(_profile([0.01, 0.01, 0.01, 0.03]), 2)
    # GPipe stage 0 peaks in its second backward: 3 still held, all 4 messages sent, 3
    # gradient receive buffers, workspace, and the new weight gradients (its first backward:
    # 4 held and 4 buffers, no new gradients).
    mem = stage_memory(plan, gpipe(2, 4), microbatch_size=1)
    assert mem[0].activations == 3 * 600 + 4 * 30 + 3 * 30 + 3000 + 3000
    # Without workspace or gradient transients, the last stage peaks at the end of its last
    # forward: 4 held and that forward's 30 B receive buffer (each is freed once forwarded;
    # each gradient message, 30 B, is sent as a micro-batch's 400 B are freed).
    bare = dataclasses.replace(plan, workspace_bytes=(), grad_transient_bytes=())
    assert stage_memory(bare, gpipe(2, 4), microbatch_size=1)[1].activations == 4 * 400 + 30


def test_stage_module_shares_parameters() -> None:
    model = get_model_spec("mlp").build()
    piece = stage_module(model, even_split(len(model.blocks()), 2), 1)
    assert piece.block_names() == ["head"]  # fc1, fc2 | head
    assert piece[0][0].weight is model.blocks()[2][0].weight  # type: ignore[index]


def test_stage_times_scale_with_samples() -> None:
    plan = plan_stages(_profile([0.01, 0.01, 0.01, 0.03]), 2)  # profiled at batch 4
    assert plan.forward_time(0, 2) == pytest.approx(0.015)
    assert plan.backward_time(1, 8) == pytest.approx(0.12)
