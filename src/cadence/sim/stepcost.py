"""Optimizer-step cost, which the profile does not time but training pays every iteration
(Adam over vgg16's 61 MB costs about a third of its forward + backward on one CPU thread)."""

from __future__ import annotations

import time

from cadence.errors import UserError

OPTIMIZERS = ("adam", "adamw", "sgd", "none")
# TCP over Ethernet at MTU 1500 carries 1448 payload bytes per 1514-byte frame.
TCP_PAYLOAD_FRACTION = 1448 / 1514


def step_s_per_byte(model: str, optimizer: str, repeats: int = 5) -> float:
    """Seconds per parameter byte of one `optimizer` step over zoo `model`'s parameters, on one
    thread (as a training rank runs): the least of `repeats` timed steps after an untimed one,
    since a busy machine only ever adds time; 0 for "none"."""
    if optimizer not in OPTIMIZERS:
        raise UserError(f"unknown optimizer {optimizer!r}; accepted: {', '.join(OPTIMIZERS)}")
    if optimizer == "none":
        return 0.0
    import torch

    from cadence.models import get_model_spec

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        params = list(get_model_spec(model).build().parameters())
        for p in params:
            p.grad = torch.randn_like(p)
        opt: torch.optim.Optimizer
        if optimizer == "sgd":
            opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
        elif optimizer == "adamw":
            opt = torch.optim.AdamW(params, lr=1e-3)
        else:
            opt = torch.optim.Adam(params, lr=1e-3)
        samples = []
        for i in range(repeats + 1):
            start = time.perf_counter()
            opt.step()
            if i:
                samples.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    nbytes = sum(p.nbytes for p in params)
    return min(samples) / max(nbytes, 1)
