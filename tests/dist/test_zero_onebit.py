"""1-bit Adam under ZeRO at world size 2: bytes on the wire equal the layout's formula (warm-up
in fp32, then signs + scales at <= 1/16 of fp32; stage 1 all-reduces the momentum, stages 2-3
reduce-scatter it), error buffers are sharded with the stage,
and training on digits tracks plain Adam (loss and test accuracy)."""

import pytest
import torch

from cadence.testing import run_ranks
from cadence.zero import build_layout, comm_bytes_per_step
from cadence.zero.layout import front_buckets
from tests.dist.zero_helpers import digits_pair, make_model

STEPS, FREEZE = 40, 15


def _layout(world_size):
    from cadence.zero.layout import bucket_params

    entries = [e for e in bucket_params(make_model("mlp")) if e[2]]
    return build_layout(
        [(name, [(n, tuple(p.shape)) for n, p in params]) for name, _, params in entries],
        world_size,
    )


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_onebit_bytes_errors_and_accuracy_track_adam(stage):
    pairs = run_ranks(digits_pair, 2, stage, STEPS, FREEZE, timeout=180)
    base, onebit = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    layout = _layout(2)
    for rank in range(2):
        _, sent, _, errors = onebit[rank]
        warm = comm_bytes_per_step(layout, stage, "onebit", compressed_phase=False)
        hot = comm_bytes_per_step(layout, stage, "onebit", compressed_phase=True)
        assert sent[FREEZE - 1] == warm  # the last plain-Adam step
        assert all(s == hot for s in sent[FREEZE + 1 :]), sent[FREEZE + 1 :]
        # Switching over, each rank publishes its fp32 momentum piece once, encoded: an
        # all-gather, as large as stage 1's 1-bit all-reduce's half or stages 2-3's all-to-all.
        switch = hot["gradients"] + (hot["gradients"] // 2 if stage == 1 else hot["gradients"])
        assert sent[FREEZE]["gradients"] == switch
        # The momentum's share after warm-up (signs + one scale per 256 elements) is <= 1/16 of
        # the same stage's fp32 exchange (1/28: all-reduce in stage 1, reduce-scatter in 2-3).
        fp32 = comm_bytes_per_step(layout, stage, "none", False)["gradients"]
        assert hot["gradients"] * 16 <= fp32
        assert base[rank][1][-1] == comm_bytes_per_step(layout, stage, "none", False)
        # Sender error covers what this rank sends (all of it); stage 1's reducer error only
        # its piece; stages 2-3 do not re-encode what they reduced, so they keep none.
        assert errors["sender"] == layout.padded
        assert errors["reducer"] == (layout.padded // 2 if stage == 1 else 0)
    losses_adam, _, acc_adam, _ = base[0]
    losses_1bit, _, acc_1bit, _ = onebit[0]
    assert losses_1bit == onebit[1][0]  # every rank saw the same global loss
    tail_adam = sum(losses_adam[-10:]) / 10
    tail_1bit = sum(losses_1bit[-10:]) / 10
    assert tail_1bit < 0.5 * sum(losses_1bit[:5]) / 5  # it keeps learning after the freeze
    assert tail_1bit < tail_adam + 0.1, (tail_1bit, tail_adam)
    assert acc_1bit > acc_adam - 0.05, (acc_1bit, acc_adam)  # short run: 25 compressed steps


def _early_update_pair(rank, world_size, stage, overlap, share):
    """mlp with onebit: (losses, bytes per step, final state) with the engine's early update
    switched off (every bucket updated in step()), then as it runs by default."""
    import cadence
    from tests.dist.zero_helpers import make_model, opt_kwargs, train_steps

    out = []
    for early in (False, True):
        model, opt = cadence.zero(make_model("mlp"), stage=stage, compression="onebit",  # type: ignore[operator]
                                  freeze_steps=3, overlap_gather=overlap,
                                  forward_gather_share=share, **opt_kwargs("adam"))  # fmt: skip
        assert opt.engine.early_update
        deferred = [st.forward_gather for st in opt.engine.states]
        assert any(deferred) if overlap and share == 1.0 else not (all(deferred) and deferred)
        opt.engine.early_update = early
        losses, sent = train_steps(model, opt, "mlp", 7, rank, world_size)
        out.append((losses, sent, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    return out


@pytest.mark.parametrize(
    ("stage", "overlap", "share"), [(1, True, 1 / 3), (2, False, 1 / 3), (2, True, 1.0)]
)
def test_early_update_during_backward_is_the_same_training(stage, overlap, share):
    # After warm-up each bucket is updated and its gather started as soon as its momentum is
    # all-reduced: the same arithmetic as updating in step(), so the same model bit for bit.
    # share 1.0: every gather waits for step() and goes in forward order.
    for plain, early in run_ranks(_early_update_pair, 2, stage, overlap, share, timeout=180):
        assert plain[0] == early[0]  # losses
        # Gradient bytes per step match; overlapped gathers are counted in whichever step's
        # window they finish, so parameter bytes are compared step by step only without.
        assert [s["gradients"] for s in plain[1]] == [s["gradients"] for s in early[1]]
        assert overlap or plain[1] == early[1]
        for key, value in plain[2].items():
            torch.testing.assert_close(early[2][key], value, rtol=0, atol=0)


def _lane_pair(rank, world_size, stage, overlap):
    """mlp with onebit: (losses, bytes per step, final state, lanes) with the gathers on the
    reductions' thread, then on a thread and process group of their own (the default)."""
    import cadence
    from tests.dist.zero_helpers import make_model, opt_kwargs, train_steps

    out = []
    for lane in (False, True):
        model, opt = cadence.zero(make_model("mlp"), stage=stage, compression="onebit",  # type: ignore[operator]
                                  freeze_steps=3, overlap_gather=overlap, gather_lane=lane,
                                  **opt_kwargs("adam"))  # fmt: skip
        lanes = (opt.engine._gather_pool is not None, opt.engine.gather_group is opt.engine.group)
        losses, sent = train_steps(model, opt, "mlp", 7, rank, world_size)
        opt.engine.close()  # the last step's gathers land: their bytes count after it
        sent.append({"parameters": opt.engine._bytes["parameters"]})
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        out.append((losses, sent, state, lanes))
    return out


@pytest.mark.parametrize(("stage", "overlap"), [(1, False), (2, False), (2, True)])
def test_gather_lane_is_the_same_training_and_bytes(stage, overlap):
    # The gathers' own thread and group change when bytes move, not what moves or the maths.
    for one, two in run_ranks(_lane_pair, 2, stage, overlap, timeout=180):
        assert one[3] == (False, True) and two[3] == (True, False)
        assert one[0] == two[0]  # losses
        assert [s.get("gradients") for s in one[1]] == [s.get("gradients") for s in two[1]]
        # Without overlap every gather lands inside its own step: bytes match step by step;
        # with it a gather may finish in the next step's window, so compare the totals.
        if overlap:
            total = [sum(s["parameters"] for s in run[1]) for run in (one, two)]
            assert total[0] == total[1] > 0
        else:
            assert one[1] == two[1]
        for key, value in one[2].items():
            torch.testing.assert_close(two[2][key], value, rtol=0, atol=0)


def _replicated_pair(rank, world_size, stage, overlap, share):
    """mlp with onebit: (losses, bytes per step, final state, optimizer-state peak) with the
    parameters gathered from their owners, then with every rank updating every piece itself
    (of the front blocks within `share` of the parameters)."""
    import cadence
    from tests.dist.zero_helpers import make_model, opt_kwargs, train_steps

    out = []
    for replicated in (False, True):
        model, opt = cadence.zero(make_model("mlp"), stage=stage, compression="onebit",  # type: ignore[operator]
                                  freeze_steps=3, overlap_gather=overlap,
                                  replicated_update=replicated, replicated_share=share,
                                  **opt_kwargs("adam"))  # fmt: skip
        losses, sent = train_steps(model, opt, "mlp", 8, rank, world_size)
        opt.engine.close()
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        out.append((losses, sent, state, opt.peak_memory["optimizer_state"]))
    return out


@pytest.mark.parametrize(
    ("world_size", "stage", "overlap", "share"),
    [(2, 1, False, 1.0), (2, 2, True, 1.0), (4, 1, True, 1.0), (4, 2, False, 1.0),
     (2, 2, False, 0.5), (4, 1, False, 0.5), (2, 1, True, 0.5)],
)  # fmt: skip
def test_replicated_update_is_the_same_training_without_parameter_gathers(
    world_size, stage, overlap, share
):
    # Every rank forms every owner's momentum and applies its update with the owner's frozen
    # denominator: the same model bit for bit as gathering the owners' pieces, on every rank.
    # With share 0.5 only fc1 (a fifth of mlp's parameters) is replicated, fc2 and the head
    # are gathered: the two kinds of bucket in one step.
    results = run_ranks(_replicated_pair, world_size, stage, overlap, share, timeout=240)
    layout = _layout(world_size)
    front = front_buckets(layout, share)
    assert front == ([True] * 3 if share == 1 else [True, False, False])
    replicated_elems = sum(b.padded for b, f in zip(layout.buckets, front, strict=True) if f)
    gathered_elems = layout.padded - replicated_elems
    hot = comm_bytes_per_step(layout, stage, "onebit", True, replicated_share=share)
    gathered = comm_bytes_per_step(layout, stage, "onebit", True)
    assert hot["parameters"] == 4 * gathered_elems // world_size * (world_size - 1)
    assert hot["total"] < gathered["total"] * (1 / 4 if share == 1 else 0.9)
    for gather, replicated in results:
        assert gather[0] == replicated[0]  # losses
        for key, value in gather[2].items():
            torch.testing.assert_close(replicated[2][key], value, rtol=0, atol=0)
        if not overlap:  # every gather lands inside its own step: bytes match step by step
            assert all(s == hot for s in replicated[1][5:]), replicated[1][5:]
        else:
            assert all(s["gradients"] == hot["gradients"] for s in replicated[1][5:])
        if share == 1:
            # The switch-over (step 3) gathers the frozen denominator once (with overlap its
            # bytes may land in step 4's window); after it, only the 1-bit momentum moves.
            one_gather = 4 * layout.padded // world_size * (world_size - 1)
            assert sum(s["parameters"] for s in replicated[1]) == 4 * one_gather
        # The price: every rank keeps the replicated blocks' frozen denominator (the gathered
        # path makes its piece's for each update and keeps none).
        assert replicated[3] - gather[3] == 4 * replicated_elems
    for _, replicated in results[1:]:  # every rank holds the same parameters
        for key, value in results[0][1][2].items():
            torch.testing.assert_close(replicated[2][key], value, rtol=0, atol=0)
