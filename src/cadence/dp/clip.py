"""Gradient readers between backward and step, made to wait for cadence-dp's reductions.

`torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` and `GradScaler.unscale_` read every
gradient; under cadence-dp the gradients are still being reduced by the communication thread
when `backward()` returns. Once an engine exists these torch functions are wrapped: given a
parameter of an engine, they first wait until that engine's reductions are complete (the
updates wait for `step()`, so nothing is applied before they run). Other parameters pass
straight through. A reference taken before (`from torch.nn.utils import clip_grad_norm_` at
import) is covered too: the helper those functions group gradients with, looked up in their
module at each call, waits for every live engine first. `GradScaler` waits through
`cadence.amp`, which calls the optimizer's `_cadence_wait_reduced` before it unscales.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch
import torch.nn.utils as nn_utils
from torch.nn.utils import clip_grad as clip_module

from cadence.amp import install as install_scaler_hook


class _Engine(Protocol):
    param_ids: frozenset[int]

    def wait_reduced(self) -> None: ...


_engines: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_installed = False

original_clip_grad_norm: Callable[..., torch.Tensor] = clip_module.clip_grad_norm_
_original_group: Callable[..., Any] | None = getattr(
    clip_module, "_group_tensors_by_device_and_dtype", None
)


def register(engine: _Engine) -> None:
    """Make torch's gradient readers wait for `engine` (installed on the first call)."""
    global _installed
    with _lock:
        _engines.add(engine)
        if not _installed:
            _install()
            _installed = True


def unregister(engine: _Engine) -> None:
    with _lock:
        _engines.discard(engine)


def wait_for(params: Iterable[Any]) -> None:
    """Wait for the reductions of every engine owning one of `params`."""
    if not _engines:
        return
    ids = {id(p) for p in params}
    for engine in list(_engines):
        if not ids.isdisjoint(engine.param_ids):
            engine.wait_reduced()


def _waiting(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(parameters: Any, *args: Any, **kwargs: Any) -> Any:
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        wait_for(params)
        return original(params, *args, **kwargs)

    return wrapper


def _group_after_reductions(*args: Any, **kwargs: Any) -> Any:
    for engine in list(_engines):
        engine.wait_reduced()
    assert _original_group is not None
    return _original_group(*args, **kwargs)


def _install() -> None:
    # Wrap what is installed now, not torch's own: another wrapper (ZeRO's route) keeps serving.
    norm = _waiting(clip_module.clip_grad_norm_)
    value = _waiting(clip_module.clip_grad_value_)
    for module in (nn_utils, clip_module):
        module.clip_grad_norm_ = norm  # type: ignore[attr-defined]
        module.clip_grad_value_ = value  # type: ignore[attr-defined]
    install_scaler_hook()  # GradScaler waits for `optimizer._cadence_wait_reduced` there
    if _original_group is not None:
        clip_module._group_tensors_by_device_and_dtype = _group_after_reductions
