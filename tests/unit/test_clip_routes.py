"""cadence-dp and ZeRO both route torch's clip_grad_norm_ (each for its own parameters): in one
process, wrapped in any order and any number of times, every call still reaches torch's result."""

import torch
from torch import nn

import cadence


def test_zero_and_cadence_dp_routes_chain_without_a_loop() -> None:
    for kind in ["zero", "dp", "zero", "dp"]:
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        plain = nn.Linear(4, 2)
        plain.load_state_dict(model.state_dict())
        if kind == "zero":
            wrapped, optimizer = cadence.zero(
                model, stage=2, optimizer=lambda ps: torch.optim.SGD(ps, 0.1)
            )
        else:
            wrapped, optimizer = cadence.data_parallel(
                model, torch.optim.SGD(model.parameters(), 0.1)
            )
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
        wrapped(x).sum().backward()
        plain(x).sum().backward()
        got = torch.nn.utils.clip_grad_norm_(wrapped.parameters(), 0.1)
        want = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.1)
        torch.testing.assert_close(got, want)
        optimizer.step()
