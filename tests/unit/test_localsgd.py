"""Local SGD / DiLoCo pieces that need no processes: settings, the streaming schedule and
fragments, int8 quantisation, and the outer Nesterov step against a hand computation (a world
of one: the mean over ranks is the rank's own pseudo-gradient)."""

import pytest
import torch
from torch import nn

import cadence
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.localsgd.config import LocalSGDConfig
from cadence.localsgd.fragments import model_fragments, split_sizes
from cadence.localsgd.wire import dequantize_int8, quantize_int8, start_mean


def test_schedule_staggers_fragments_over_h_steps():
    config = LocalSGDConfig(sync_every=8, fragments=4)
    starts = {t: config.due(t) for t in range(1, 17) if config.due(t)}
    assert starts == {2: [1], 4: [2], 6: [3], 8: [0], 10: [1], 12: [2], 14: [3], 16: [0]}
    assert config.delay == 1 and LocalSGDConfig(sync_every=8).delay == 0
    assert LocalSGDConfig(sync_every=8, fragments=2, overlap_steps=0).delay == 0


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"sync_every": 0}, "--sync-every must be at least 1"),
        ({"fragments": 5, "sync_every": 4}, "exceeds --sync-every 4"),
        ({"overlap_steps": 4, "sync_every": 4}, "--overlap-steps must be within 0..3"),
        ({"outer_dtype": "fp8"}, "unknown outer dtype 'fp8'"),
        ({"outer_momentum": 1.0}, "--outer-momentum must be within"),
    ],
)
def test_bad_settings_are_refused_in_one_line(kwargs, needle):
    with pytest.raises(UserError, match=needle):
        LocalSGDConfig(**kwargs)


def test_fragments_are_contiguous_and_balanced():
    assert split_sizes([10, 10, 10, 10], 2) == [0, 0, 1, 1]
    assert split_sizes([100, 1, 1, 100], 2) == [0, 0, 1, 1]
    with pytest.raises(UserError, match="use fewer --fragments"):
        split_sizes([100, 1], 3)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 8), nn.Linear(8, 2))
    first, second = model_fragments(model, 2)
    assert [p.shape for p in first.params] == [(8, 4), (8,), (8,), (8,)]
    assert [b.shape for b in first.buffers] == [(8,), (8,)]  # BatchNorm's mean and variance
    assert [p.shape for p in second.params] == [(8, 8), (8,), (2, 8), (2,)]


def test_int8_error_is_within_half_a_step_of_each_chunk():
    flat = torch.randn(5000) * torch.linspace(0.01, 10, 5000)
    q, scales = quantize_int8(flat, chunk=1000)
    assert q.dtype == torch.int8 and scales.numel() == 5
    back = dequantize_int8(q, scales, flat.numel())
    bound = (flat.view(5, 1000).abs().amax(dim=1) / 254).repeat_interleave(1000)
    assert torch.all((back - flat).abs() <= bound * 1.0001)
    assert not torch.equal(back, flat)
    assert torch.equal(start_mean(flat, "int8", 1, None).wait(), dequantize_int8(
        *quantize_int8(flat), flat.numel()))


def _two_syncs(momentum: float, nesterov: bool, lr_outer: float) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = cadence.diloco(
        model, inner, sync_every=2, outer_lr=lr_outer, outer_momentum=momentum, nesterov=nesterov
    )
    snapshots = [torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])]
    x = torch.randn(4, 3)
    for _ in range(4):
        optimizer.zero_grad()
        model(x).square().sum().backward()
        optimizer.step()
        snapshots.append(torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()]))
    return snapshots


def test_outer_nesterov_step_matches_a_hand_computation():
    lr, mu = 0.7, 0.9
    s = _two_syncs(mu, True, lr)
    # Reference: replay the inner steps from each outer point with plain SGD.
    torch.manual_seed(0)
    ref = nn.Linear(3, 2)
    x = torch.randn(4, 3)

    def inner_two(theta: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # copies: vector_to_parameters would alias `theta`
            torch.nn.utils.vector_to_parameters(theta.clone(), ref.parameters())
        opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            ref(x).square().sum().backward()
            opt.step()
        return torch.nn.utils.parameters_to_vector(ref.parameters()).detach()

    theta0 = s[0]
    delta1 = theta0 - inner_two(theta0)
    buf = delta1.clone()
    theta1 = theta0 - lr * (delta1 + mu * buf)
    torch.testing.assert_close(s[2], theta1)
    delta2 = theta1 - inner_two(theta1)
    buf = mu * buf + delta2
    theta2 = theta1 - lr * (delta2 + mu * buf)
    torch.testing.assert_close(s[4], theta2)
    assert not torch.allclose(s[4], inner_two(s[2]))  # the outer step did something


def test_state_dict_carries_the_outer_state_and_loads_back():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    model, optimizer = cadence.diloco(model, torch.optim.Adam(model.parameters()), sync_every=2)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        optimizer.step()
    state = optimizer.state_dict()
    assert state["localsgd"]["step"] == 3 and len(state["localsgd"]["outer"]) == 1
    assert state["localsgd"]["outer_optimizer"]["state"]  # the momentum buffer
    fresh = nn.Linear(3, 2)
    fresh, again = cadence.diloco(fresh, torch.optim.Adam(fresh.parameters()), sync_every=2)
    again.load_state_dict(state)
    assert again.outer.step == 3
    torch.testing.assert_close(again.outer.outer[0], optimizer.outer.outer[0])
    plain = torch.optim.Adam(nn.Linear(3, 2).parameters())
    plain.load_state_dict(state)  # a torch optimizer ignores the extra key


def test_alone_streaming_local_sgd_is_the_plain_optimizer():
    """In a world of one the mean is the rank's own weights, so averaging must change nothing,
    also when a fragment's result lands an inner step after it was sent (the step made
    meanwhile is kept)."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    wrapped = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    wrapped.load_state_dict(plain.state_dict())
    opt_plain = torch.optim.Adam(plain.parameters(), lr=0.01)
    wrapped, opt = cadence.local_sgd(
        wrapped, torch.optim.Adam(wrapped.parameters(), lr=0.01), sync_every=4, fragments=2
    )
    assert opt.outer.config.delay == 1
    x = torch.randn(16, 3)
    for _ in range(10):
        for model, optimizer in ((plain, opt_plain), (wrapped, opt)):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    assert opt.outer.syncs == 4 and len(opt.outer.in_flight) == 1
    opt.sync()
    for a, b in zip(plain.parameters(), wrapped.parameters(), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        ({"strategy": "ddp", "sync_every": 4}, "--sync-every is for --strategy local-sgd or"),
        ({"strategy": "zero", "outer_dtype": "int8"}, "--outer-dtype is for --strategy"),
        ({"strategy": "local-sgd", "outer_lr": 0.5}, "--outer-lr sets DiLoCo's outer step"),
        ({"strategy": "diloco", "fragments": 9, "sync_every": 8}, "exceeds --sync-every 8"),
    ],
)
def test_train_config_refuses_settings_that_would_be_ignored(keys, needle):
    with pytest.raises(UserError, match=needle):
        TrainConfig.from_flat(**keys)


def test_train_config_gives_each_strategy_its_outer_step():
    section = TrainConfig.from_flat(strategy="diloco", sync_every=8, outer_dtype="bf16").localsgd
    diloco = section.to_config()
    assert (diloco.sync_every, diloco.outer_lr, diloco.outer_momentum) == (8, 0.7, 0.9)
    assert diloco.nesterov and diloco.outer_dtype == "bf16"
    local = section.to_config(averaging=True)
    assert (local.outer_lr, local.outer_momentum, local.nesterov) == (1.0, 0.0, False)


def test_weights_loaded_after_wrapping_are_where_the_outer_steps_start():
    torch.manual_seed(0)
    saved = nn.Linear(3, 2).state_dict()
    x = torch.randn(4, 3)
    finals = []
    for load_after in (False, True):
        model = nn.Linear(3, 2)
        if not load_after:
            model.load_state_dict(saved)
        model, optimizer = cadence.diloco(
            model, torch.optim.SGD(model.parameters(), lr=0.1), sync_every=2
        )
        if load_after:  # e.g. a checkpoint restored into the wrapped model
            model.load_state_dict(saved)
        for _ in range(4):
            optimizer.zero_grad()
            model(x).square().sum().backward()
            optimizer.step()
        finals.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    torch.testing.assert_close(finals[1], finals[0])


def test_non_persistent_buffers_are_not_synced():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model[1].register_buffer("cache", torch.ones(2), persistent=False)
    (fragment,) = model_fragments(model, 1)
    assert [b is model[1].cache for b in fragment.buffers] == [False, False]
    assert len(fragment.buffers) == 2  # running mean and variance
