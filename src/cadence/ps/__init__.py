"""Parameter-server training: servers own shards of the parameters and apply the optimizer,
workers push gradients and pull parameters over ZeroMQ, in a planned priority order, under
BSP, ASP, SSP or backup-worker consistency.

`plan`, `priority`, `config` and `wire` are torch-free; `trace`, `server`, `worker` and
`runtime` run it.
"""

from typing import Any

from cadence.ps.config import PSConfig, parse_consistency, parse_straggler
from cadence.ps.plan import ParamInfo, PSPlan, Slice, build_plan


def __getattr__(name: str) -> Any:
    # Lazy: servers import this package and must not pay for importing torch.
    if name == "PSTrainer":
        from cadence.ps.runtime import PSTrainer

        return PSTrainer
    raise AttributeError(name)


__all__ = [
    "PSConfig",
    "PSPlan",
    "PSTrainer",
    "ParamInfo",
    "Slice",
    "build_plan",
    "parse_consistency",
    "parse_straggler",
]
