"""Parameter-server training: servers own shards of the parameters and apply the optimizer,
workers push gradients and pull parameters over ZeroMQ, in a planned priority order, under
BSP, ASP, SSP or backup-worker consistency.

`plan`, `priority`, `config` and `wire` are torch-free; `trace`, `server`, `worker` and
`runtime` run it.
"""

from typing import TYPE_CHECKING

from cadence._lazy import lazy_names
from cadence.ps.config import PSConfig, parse_consistency, parse_straggler
from cadence.ps.plan import ParamInfo, PSPlan, Slice, build_plan

if TYPE_CHECKING:
    from cadence.ps.api import PSOptimizer, parameter_server
    from cadence.ps.runtime import PSTrainer

# Lazy: servers import this package and must not pay for importing torch.
__getattr__ = lazy_names(
    __name__,
    {
        "PSTrainer": "cadence.ps.runtime",
        "PSOptimizer": "cadence.ps.api",
        "parameter_server": "cadence.ps.api",
    },
)


__all__ = [
    "PSConfig",
    "PSOptimizer",
    "PSPlan",
    "PSTrainer",
    "ParamInfo",
    "Slice",
    "build_plan",
    "parameter_server",
    "parse_consistency",
    "parse_straggler",
]
