"""ZeRO stages 1-3 with optional fp16 or 1-bit (1-bit Adam) compression, on any backend.

    model, optimizer = cadence.zero(model, stage=3, optimizer=torch.optim.AdamW(model.parameters()))
    for x, y in data:
        optimizer.zero_grad(); loss_fn(model(x), y).backward()
        optimizer.clip_grad_norm_(1.0); optimizer.step()

    model, optimizer = cadence.zero(model, stage=2, compression="onebit", freeze_steps=100, lr=1e-3)

`plan.py` is the plan (pure: units, shard layout from `layout.py`, per-unit collectives; the
simulator reads it too), `engine.py` carries it out, `params3.py` adds stage 3's
gather/release hooks, `onebit.py`/`compress.py` the 1-bit collectives, `checkpoint.py` sharded
save/load.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from cadence._lazy import lazy_names

# Names load on first use: the layout, config and codec cost are plain data the simulator
# reads, and importing them should not wait for torch.
if TYPE_CHECKING:
    from cadence.zero.api import optimizer_name, zero, zero_from_config
    from cadence.zero.checkpoint import load, save
    from cadence.zero.config import ZeroConfig
    from cadence.zero.layout import ZeroLayout, build_layout, comm_bytes_per_step, state_bytes
    from cadence.zero.optim import ZeroOptimizer
    from cadence.zero.plan import ZeroPlan, build_zero_plan, describe_model

_HOMES = {
    "ZeroConfig": "cadence.zero.config",
    "ZeroLayout": "cadence.zero.layout",
    "ZeroOptimizer": "cadence.zero.optim",
    "ZeroPlan": "cadence.zero.plan",
    "build_layout": "cadence.zero.layout",
    "build_zero_plan": "cadence.zero.plan",
    "comm_bytes_per_step": "cadence.zero.layout",
    "describe_model": "cadence.zero.plan",
    "load": "cadence.zero.checkpoint",
    "optimizer_name": "cadence.zero.api",
    "save": "cadence.zero.checkpoint",
    "state_bytes": "cadence.zero.layout",
    "zero": "cadence.zero.api",
    "zero_from_config": "cadence.zero.api",
}

__all__ = [
    "ZeroConfig",
    "ZeroLayout",
    "ZeroOptimizer",
    "ZeroPlan",
    "build_layout",
    "build_zero_plan",
    "comm_bytes_per_step",
    "describe_model",
    "load",
    "optimizer_name",
    "save",
    "state_bytes",
    "zero",
    "zero_from_config",
]

__getattr__ = lazy_names(__name__, _HOMES)


class _CallableModule(types.ModuleType):
    """`cadence.zero` is both this package and the function: importing any submodule binds the
    package as the attribute `cadence.zero`, so the package itself must be callable."""

    def __call__(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        from cadence.zero.api import zero

        return zero(model, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
