"""Optimizer-step cost where no profile carries it (profiles made before they timed it): timed
on this machine's CPU, as a training rank runs it (see `cadence.profile.optimizer_step`)."""

from __future__ import annotations

import math

from cadence.errors import UserError

OPTIMIZERS = ("adam", "adamw", "sgd", "none")
# TCP over Ethernet at MTU 1500 carries 1448 payload bytes per 1514-byte frame.
TCP_PAYLOAD_FRACTION = 1448 / 1514


def check_step(optimizer: str, step_s: float | None) -> None:
    """One-line UserErrors for an unknown optimizer or a bad `--optimizer-step`."""
    if optimizer not in OPTIMIZERS:
        raise UserError(f"unknown optimizer {optimizer!r}; accepted: {', '.join(OPTIMIZERS)}")
    if step_s is not None and not (math.isfinite(step_s) and step_s >= 0):
        raise UserError(f"--optimizer-step must be >= 0 seconds, got {step_s}")


def chosen_step_s(
    optimizer: str, given_s: float | None, recorded: dict[str, float] | None
) -> float | None:
    """The whole-model step to price: `given_s` (`--optimizer-step`) if set, else the one the
    profile recorded for `optimizer` (as it ran where the profile was made, so the same files
    give the same prediction at any time), else None (time it now)."""
    if given_s is not None or not recorded:
        return given_s
    return recorded.get(optimizer)


def step_s_per_byte(model_name: str, optimizer: str, repeats: int = 5) -> float:
    """Seconds per parameter byte of one `optimizer` step over zoo `model_name`'s parameters,
    on one CPU thread (as a training rank runs): the least of `repeats` timed steps after an
    untimed one, since a busy machine only ever adds time; 0 for "none". Timed with this
    process's heap thresholds fixed, as `cadence profile` times it (see there)."""
    check_step(optimizer, None)
    if optimizer == "none":
        return 0.0
    import torch

    from cadence.heap import keep_heap
    from cadence.models import get_model_spec
    from cadence.profile.optimizer_step import optimizer_step_s

    keep_heap()

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = get_model_spec(model_name).build()
        seconds = optimizer_step_s(model, optimizer, repeats)
    finally:
        torch.set_num_threads(previous)
    return seconds / max(sum(p.nbytes for p in model.parameters()), 1)
