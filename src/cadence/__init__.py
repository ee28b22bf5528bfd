"""cadence: faster distributed PyTorch training by scheduling computation and communication.

Kept import-light (no torch at import) so `cadence --help` answers at once; the public names
below load their modules on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "TrainConfig": ("cadence.config", "TrainConfig"),
    "UserError": ("cadence.errors", "UserError"),
    "train": ("cadence.train.run", "train"),
    "run_ranks": ("cadence.testing", "run_ranks"),
    "EmulatedCluster": ("cadence.netem", "EmulatedCluster"),
    "data_parallel": ("cadence.dp", "data_parallel"),
    "DPConfig": ("cadence.dp", "DPConfig"),
    "simulate_dp": ("cadence.sim", "simulate_dp"),
    "simulate_ddp": ("cadence.sim", "simulate_ddp"),
    "SimResult": ("cadence.sim", "SimResult"),
    "zero": ("cadence.zero", "zero"),
    "local_sgd": ("cadence.localsgd", "local_sgd"),
    "diloco": ("cadence.localsgd", "diloco"),
    "LocalSGDConfig": ("cadence.localsgd", "LocalSGDConfig"),
    "parallelize_gpt": ("cadence.tp", "parallelize_gpt"),
    # `cadence.pipeline` is the subpackage, so its entry point is exported as pipeline_parallel.
    "pipeline_parallel": ("cadence.pipeline.wrap", "pipeline_parallel"),
    "PipelineParallel": ("cadence.pipeline.wrap", "PipelineParallel"),
    "model_parallel": ("cadence.pipeline", "model_parallel"),
    "parameter_server": ("cadence.ps.api", "parameter_server"),
    "PSConfig": ("cadence.ps", "PSConfig"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'cadence' has no attribute '{name}'")
    import importlib

    module_name, attr = _LAZY[name]
    return getattr(importlib.import_module(module_name), attr)
