"""`torch.amp.GradScaler` on cadence's strategies: one hook where the scaler unscales.

GradScaler unscales an optimizer's gradients and looks for inf/NaN in one method,
`_unscale_grads_`, reached from `unscale_` and from `step` when `unscale_` was not called;
`step` skips `optimizer.step()` and `update()` backs the scale off from the found_inf tensors
it returns. `install()` wraps that method. An optimizer's `_cadence_wait_reduced()` is called
first (cadence-dp: the step's reductions may be in flight; its reduced gradients are the same
on every rank, so torch's own unscale follows). An optimizer with a method
`_cadence_unscale_grads(inv_scale, found_inf)` does the work itself (ZeRO: the reduced gradient
pieces live in its engine), and a resolver registered with `register` may claim a plain torch
optimizer (a pipeline stage's). Those two all-reduce found_inf (MAX) over the ranks that share
the model, so every rank skips the same steps and keeps the same scale, as under DDP. Every
other optimizer goes to torch unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

Handler = Callable[[torch.Tensor, torch.Tensor], None]
"""`(inv_scale, found_inf)`: unscale in place, set found_inf to 1 where any rank saw inf/NaN."""

_original: Callable[..., dict[torch.device, torch.Tensor]] = torch.amp.GradScaler._unscale_grads_
_resolvers: list[Callable[[torch.optim.Optimizer], Handler | None]] = []
_lock = threading.Lock()


def _unscale_grads_(
    scaler: torch.amp.GradScaler,
    optimizer: torch.optim.Optimizer,
    inv_scale: torch.Tensor,
    found_inf: torch.Tensor,
    allow_fp16: bool,
) -> dict[torch.device, torch.Tensor]:
    wait = getattr(optimizer, "_cadence_wait_reduced", None)
    if wait is not None:  # cadence-dp: its reductions may still be in flight
        wait()
    handler: Handler | None = getattr(optimizer, "_cadence_unscale_grads", None)
    for resolve in list(_resolvers) if handler is None else ():
        handler = resolve(optimizer)
        if handler is not None:
            break
    if handler is None:
        return _original(scaler, optimizer, inv_scale, found_inf, allow_fp16)
    handler(inv_scale, found_inf)
    return {found_inf.device: found_inf}


def install() -> None:
    """Route GradScaler's unscaling through `_unscale_grads_` (idempotent)."""
    with _lock:
        torch.amp.GradScaler._unscale_grads_ = _unscale_grads_  # type: ignore[method-assign,assignment]


def register(resolve: Callable[[torch.optim.Optimizer], Handler | None]) -> None:
    """Let `resolve(optimizer)` claim plain optimizers (once per resolver); installs the hook."""
    with _lock:
        if resolve not in _resolvers:
            _resolvers.append(resolve)
    install()


def unscale_local(inv_scale: torch.Tensor, found_inf: torch.Tensor, grads: list[Any]) -> None:
    """torch's own unscale and inf/NaN check over `grads` (float32 or float16 tensors)."""
    by_dtype: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault((g.device, g.dtype), []).append(g)
    with torch.no_grad():
        for (device, _), same in by_dtype.items():
            here = device == found_inf.device
            found = found_inf if here else torch.zeros_like(found_inf, device=device)
            torch._amp_foreach_non_finite_check_and_unscale_(same, found, inv_scale.to(device))
            if found is not found_inf:
                torch.maximum(found_inf, found.to(found_inf.device), out=found_inf)
