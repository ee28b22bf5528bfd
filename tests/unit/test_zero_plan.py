"""`ZeroPlan`: pure cases small enough to check by hand (units, tied weights, bytes, flags)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cadence.zero.compress import SCALE_CHUNK
from cadence.zero.config import ZeroConfig
from cadence.zero.plan import build_zero_plan, describe_model, onebit_packed_bytes


class Tied(nn.Module):
    """An embedding tied to the head, two layers in a ModuleList, a norm outside it."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4, bias=False)])
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


def test_units_follow_the_module_tree_and_tied_weights_sit_in_their_common_unit() -> None:
    units = describe_model(Tied())
    assert [name for name, _ in units] == ["model", "layers.0", "layers.1"]
    model_params = dict(units[0][1])
    # The tied weight is registered once (as emb.weight) and lives in the model's own unit.
    assert model_params == {"emb.weight": (10, 4), "norm.weight": (4,), "norm.bias": (4,)}
    assert dict(units[1][1]) == {"layers.0.weight": (4, 4), "layers.0.bias": (4,)}
    assert dict(units[2][1]) == {"layers.1.weight": (4, 4)}


def test_units_bytes_and_plain_collectives() -> None:
    plan = build_zero_plan(describe_model(Tied()), ZeroConfig(stage=1), world_size=2)
    assert [u.numel for u in plan.units] == [48, 20, 16]
    assert [u.module for u in plan.units] == [0, 1, 2]
    assert all(u.bucket.padded == 2 * SCALE_CHUNK for u in plan.units)
    first = plan.units[0]
    assert [(op.collective, op.nbytes) for op in first.reduce] == [("allreduce", 48 * 4)]
    assert first.gather is not None and first.gather.nbytes == 48 * 4
    assert first.gather.lane == "comm" and not plan.gather_lane
    assert plan.step_bytes() == {"gradients": 84 * 4, "parameters": 84 * 4, "total": 168 * 4}
    half = build_zero_plan(
        describe_model(Tied()), ZeroConfig(stage=2, compression="fp16", gather_dtype="bf16"), 2
    )
    op = half.units[1].reduce[0]
    assert (op.collective, op.wire, op.nbytes) == ("reduce_scatter", "fp16", 20 * 2)
    assert half.units[1].gather is not None and half.units[1].gather.nbytes == 20 * 2


def test_a_flag_per_parameter_is_all_reduced_except_with_onebit_or_one_rank() -> None:
    units = describe_model(Tied())  # 6 parameters: emb (tied head), norm x2, layers 2 + 1
    flags = build_zero_plan(units, ZeroConfig(stage=2), world_size=2).used_flags
    assert flags is not None
    assert (flags.collective, flags.purpose, flags.nbytes) == ("allreduce", "flags", 6 * 4)
    assert build_zero_plan(units, ZeroConfig(stage=2, compression="onebit"), 2).used_flags is None
    assert build_zero_plan(units, ZeroConfig(stage=2), world_size=1).used_flags is None
    # Flags are not gradient or parameter traffic: `step_bytes` leaves them out.
    assert build_zero_plan(units, ZeroConfig(stage=1), 2).step_bytes()["total"] == 168 * 4


def test_stage3_holds_the_model_unit_and_the_last_one_and_gathers_the_others_twice() -> None:
    plan = build_zero_plan(describe_model(Tied()), ZeroConfig(stage=3), world_size=4)
    assert [u.held for u in plan.units] == [True, False, True]
    assert plan.prefetch and plan.reduces_in_backward
    assert plan.step_bytes()["parameters"] == (48 + 2 * 20 + 16) * 4


def test_onebit_collectives_replicated_units_and_the_gather_lane() -> None:
    units = [("model", []), ("a", [("a.w", (1000,))]), ("b", [("b.w", (3000,))])]
    stage1 = build_zero_plan(units, ZeroConfig(stage=1, compression="onebit"), world_size=4)
    packed = onebit_packed_bytes(4000, 4)
    assert packed == 4000 // 32 + 16
    ops = stage1.units[0].reduce
    assert [(op.name, op.collective, op.nbytes) for op in ops] == [
        ("a2a", "all_to_all", packed),
        ("ag1", "allgather", packed),
    ]
    assert [op.collective for op in stage1.units[0].warmup_reduce] == ["allreduce"]
    assert stage1.early_update and stage1.reduces_in_backward and stage1.gather_lane
    config = ZeroConfig(
        stage=2, compression="onebit", replicated_update=True, replicated_share=0.3
    )
    stage2 = build_zero_plan(units, config, world_size=4)
    front, back = stage2.units
    assert front.replicated and front.gather is None
    assert [(op.name, op.nbytes) for op in front.reduce] == [("ag-sent", packed * 4)]
    assert not back.replicated and back.gather is not None and back.gather.lane == "gather"
    everything = build_zero_plan(units, ZeroConfig(stage=2, compression="onebit",
                                                   replicated_update=True), 4)  # fmt: skip
    assert all(u.gather is None for u in everything.units) and not everything.gather_lane


def test_forward_gather_marks_the_front_units_with_overlap_only() -> None:
    units = [("model", []), ("a", [("a.w", (1024,))]), ("b", [("b.w", (3072,))])]
    plain = build_zero_plan(units, ZeroConfig(stage=2, compression="onebit"), 2)
    assert [u.forward_gather for u in plain.units] == [False, False]
    overlap = build_zero_plan(
        units, ZeroConfig(stage=2, compression="onebit", overlap_gather=True), 2
    )
    assert [u.forward_gather for u in overlap.units] == [True, False]


def test_no_trainable_parameters_is_refused() -> None:
    from cadence.errors import UserError

    with pytest.raises(UserError, match="no trainable parameters"):
        build_zero_plan([("model", [])], ZeroConfig(), 2)


def test_the_engine_runs_the_plan_it_was_given() -> None:
    import cadence

    model, optimizer = cadence.zero(Tied(), stage=3, lr=0.1)
    plan = optimizer.engine.plan
    assert plan.units[0].held and [u.bucket.name for u in plan.units] == [
        "model", "layers.0", "layers.1",
    ]  # fmt: skip
    assert optimizer.engine.layout is plan.layout
    loss = model(torch.tensor([[1, 2, 3]])).sum()
    loss.backward()
    optimizer.step()
