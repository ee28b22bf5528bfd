"""Semi-synchronous data parallel: local SGD and DiLoCo (docs/local-sgd.md).

    model, optimizer = cadence.diloco(model, torch.optim.AdamW(model.parameters()), sync_every=500)
    for x, y in data:
        optimizer.zero_grad(); loss_fn(model(x), y).backward(); optimizer.step()
    optimizer.sync()  # every rank: the averaged model, before evaluating or saving

`config.py` holds the settings (torch-free), `fragments.py` cuts the model into streaming
fragments, `wire.py` averages a pseudo-gradient in fp32/bf16/int8, `runtime.py` runs the outer
loop, `optimizer.py` is the optimizer the user steps, `api.py` the entry points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadence._lazy import lazy_names

if TYPE_CHECKING:
    from cadence.localsgd.api import diloco, local_sgd
    from cadence.localsgd.config import LocalSGDConfig
    from cadence.localsgd.optimizer import LocalSGDOptimizer

_HOMES = {
    "LocalSGDConfig": "cadence.localsgd.config",
    "LocalSGDOptimizer": "cadence.localsgd.optimizer",
    "diloco": "cadence.localsgd.api",
    "local_sgd": "cadence.localsgd.api",
}
__all__ = ["LocalSGDConfig", "LocalSGDOptimizer", "diloco", "local_sgd"]
__getattr__ = lazy_names(__name__, _HOMES)
