"""`torch.nn.utils.clip_grad_norm_` on a ZeRO model: routed to the engine's global-norm clip.

Under ZeRO the reduced gradients live as pieces in the engine, not in the parameters' .grad
(stages 2-3 free them; stage 1 keeps only this rank's local, unreduced ones), so torch's own
function would see no gradients or the wrong ones and clip nothing. `install()` wraps it: a
call over exactly the parameters of one ZeRO model clips by the global norm through the
engine (the same result as torch on an unsharded model); a call over part of a ZeRO model's
parameters is refused in one line; any other call goes to torch unchanged. A reference to
torch's function taken before `install()` (`from torch.nn.utils import clip_grad_norm_` at
import) would clip the wrong gradients: the helper it scales them with, looked up in torch's
module at each call, refuses ZeRO parameters in one line instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.utils
import torch.nn.utils.clip_grad

from cadence.errors import UserError

_previous: Any = torch.nn.utils.clip_grad.clip_grad_norm_
_scale_with_norm: Any = torch.nn.utils.clip_grad._clip_grads_with_norm_
_installed = False
"""What `torch.nn.utils.clip_grad_norm_` was when `install()` replaced it (torch's, or another
wrapper of it): every call that is not about a ZeRO model goes there."""


def engine_of(p: torch.Tensor) -> Any:
    """The live ZeRO engine that shards `p`, or None."""
    ref = getattr(p, "_cadence_zero", None)
    return ref() if ref is not None else None


def clip_grad_norm_(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    """torch's `clip_grad_norm_`, correct on the parameters of a ZeRO model (see the module)."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    engines = {id(e): e for p in params if (e := engine_of(p)) is not None}
    if not engines:
        return _previous(params, max_norm, norm_type, error_if_nonfinite, foreach)
    (engine,) = engines.values() if len(engines) == 1 else (None,)
    given = {id(p) for p in params if engine_of(p) is not None}
    whole = {id(p) for st in engine.states for p in st.params} if engine is not None else set()
    others = [p for p in params if engine_of(p) is None and p.grad is not None]
    if engine is None or given != whole or others:
        raise UserError(
            "clip_grad_norm_ over part of a ZeRO model's parameters (or several models) cannot "
            "be computed from sharded gradients: pass all of model.parameters(), or call "
            "optimizer.clip_grad_norm_(max_norm)"
        )
    return engine.clip_grad_norm_(max_norm, norm_type, error_if_nonfinite)


def _clip_grads_with_norm_(parameters: Any, *args: Any, **kwargs: Any) -> None:
    """torch's scaling step, refused on a ZeRO model's parameters: reached only through a
    clip function bound before the model was wrapped, whose norm saw no reduced gradients."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    if any(engine_of(p) is not None for p in params):
        raise UserError(
            "this clip_grad_norm_ was imported before cadence.zero wrapped the model and cannot "
            "see its sharded gradients: call torch.nn.utils.clip_grad_norm_(...) through the "
            "module, or optimizer.clip_grad_norm_(max_norm)"
        )
    _scale_with_norm(params, *args, **kwargs)


def install() -> None:
    """Route `torch.nn.utils.clip_grad_norm_` through `clip_grad_norm_`, once per process;
    whatever was installed there before keeps serving every other call. Installing once keeps
    the chain acyclic when cadence-dp later wraps this route in its own."""
    global _previous, _installed
    if _installed:
        return
    _installed = True
    _previous = torch.nn.utils.clip_grad.clip_grad_norm_
    torch.nn.utils.clip_grad_norm_ = clip_grad_norm_
    torch.nn.utils.clip_grad.clip_grad_norm_ = clip_grad_norm_
    torch.nn.utils.clip_grad._clip_grads_with_norm_ = _clip_grads_with_norm_
