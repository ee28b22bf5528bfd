"""Distribution strategies selectable with `--strategy`.

A strategy wraps a freshly built model and optimizer for the current process group and can give
back the plain module (for evaluation and checkpoints). Later strategies (cadence-dp, zero, ps,
pipeline) register here under the same interface.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer

from cadence.comm import DistContext
from cadence.config import TrainConfig, check_strategy_name
from cadence.errors import UserError

Wrap = Callable[[nn.Module, Optimizer, DistContext], tuple[nn.Module, Optimizer]]


@runtime_checkable
class OwnsStep(Protocol):
    """A wrapped model that runs the training step itself (pipeline: each rank holds a stage).

    The loop then calls `train_step` instead of zero_grad/forward/backward/step, and `sync`
    before each evaluation and checkpoint of the unwrapped module.
    """

    full_batch: bool
    """True: every rank reads the whole global batch instead of its 1/W share."""

    def train_step(self, x: Tensor, y: Tensor, optimizer: Optimizer) -> Tensor:
        """One optimizer step; returns this rank's share of the loss (the loop averages the
        shares over ranks)."""
        ...

    def sync(self) -> None:
        """Make the unwrapped module complete and current on every rank (a collective)."""
        ...


@dataclass(frozen=True)
class Strategy:
    """A named way to distribute training."""

    name: str
    """Value of `--strategy`."""
    description: str
    """One line for `--help` and error messages."""
    wrap: Wrap
    """Turns (model, optimizer) into their distributed versions for this rank."""
    unwrap: Callable[[nn.Module], nn.Module]
    """Returns the plain module whose parameters are the trained ones."""
    configure: Callable[[TrainConfig], Wrap] | None = None
    """Optional: the wrap for a given config (strategies with settings of their own)."""

    def wrap_for(self, config: TrainConfig) -> Wrap:
        return self.configure(config) if self.configure is not None else self.wrap


def _wrap_ddp(
    model: nn.Module, optimizer: Optimizer, ctx: DistContext
) -> tuple[nn.Module, Optimizer]:
    if not dist.is_initialized():  # a world of one: nothing to synchronise
        return model, optimizer
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids), optimizer


def _unwrap_ddp(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def _wrap_cadence_dp(
    model: nn.Module, optimizer: Optimizer, ctx: DistContext
) -> tuple[nn.Module, Optimizer]:
    from cadence.dp import data_parallel

    return data_parallel(model, optimizer)


def _ddp_bucket_mb(config: TrainConfig, model: nn.Module) -> float | None:
    """DDP's bucket cap: --bucket-mb, else torch's default (None), but one bucket for torch's
    PowerSGD hook on gloo. That hook issues each bucket's second all-reduce from a callback of
    its first, so with several buckets the ranks can issue them in different orders, which
    gloo cannot match (a "Received data size doesn't match" abort); one bucket keeps a
    step's collectives in one chain."""
    dp = config.dp
    if dp.ddp_comm_hook != "powersgd" or dist.get_backend() != "gloo":
        return dp.bucket_mb
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    whole = grad_bytes / 2**20 + 1.0
    if dp.bucket_mb is not None and dp.bucket_mb < whole:
        raise UserError(
            f"--ddp-comm-hook powersgd on gloo needs one bucket (torch's hook orders several "
            f"buckets' collectives differently on different ranks): leave --bucket-mb unset or "
            f"give at least {whole:.1f}"
        )
    return whole


def _ddp_for(config: TrainConfig) -> Wrap:
    def wrap(
        model: nn.Module, optimizer: Optimizer, ctx: DistContext
    ) -> tuple[nn.Module, Optimizer]:
        if not dist.is_initialized():
            return model, optimizer
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        ddp = DistributedDataParallel(
            model, device_ids=device_ids, bucket_cap_mb=_ddp_bucket_mb(config, model)
        )
        if config.dp.ddp_comm_hook != "none":
            from cadence.train.ddp_hooks import register_hook

            register_hook(ddp, config.dp)
        return ddp, optimizer

    return wrap


def _cadence_dp_for(config: TrainConfig) -> Wrap:
    def wrap(
        model: nn.Module, optimizer: Optimizer, ctx: DistContext
    ) -> tuple[nn.Module, Optimizer]:
        from cadence.dp import DPConfig, data_parallel
        from cadence.dp.config import mb_to_bytes

        dp_config = DPConfig(
            threshold_bytes=mb_to_bytes(config.dp.threshold_mb),
            reorder_k=config.dp.reorder_k,
            autotune=config.dp.autotune,
            autotune_file=config.dp.autotune_file,
            autotune_trials=config.dp.autotune_trials,
            compression=config.dp.compression,
            powersgd_rank=config.dp.powersgd_rank,
            powersgd_start_step=config.dp.powersgd_start_step,
            keep_heap=config.cluster.keep_heap,
        )
        profile = None
        if config.dp.autotune == "guided":
            from cadence.profile import profile_zoo_model

            # The simulator ranks candidates from this; each rank's batch share is profiled,
            # where the rank computes (its ranking uses no optimizer steps).
            profile = profile_zoo_model(
                config.model.name,
                batch_size=max(1, config.data.batch_size // ctx.world_size),
                device=ctx.device,
                optimizer_steps=False,
            )
        return data_parallel(model, optimizer, dp_config, profile)

    return wrap


# --- zero (cadence.zero) --------------------------------------------------------------------
def _zero_for(config: TrainConfig) -> Wrap:
    def wrap(
        model: nn.Module, optimizer: Optimizer, ctx: DistContext
    ) -> tuple[nn.Module, Optimizer]:
        from cadence.zero import ZeroConfig, zero_from_config

        zero_config = ZeroConfig.from_train_settings(config.to_flat())
        # The loop built the optimizer from the config; ZeRO builds its own over the shards.
        kwargs = {k: v for k, v in optimizer.defaults.items() if k in _ZERO_KWARGS}
        return zero_from_config(
            model, zero_config, keep_heap=config.cluster.keep_heap, **kwargs
        )

    return wrap


_ZERO_KWARGS = ("lr", "betas", "eps", "weight_decay", "momentum")


# --- pipeline (cadence.pipeline) -----------------------------------------------------------
def _pipeline_for(config: TrainConfig) -> Wrap:
    from cadence.pipeline.train import pipeline_wrap_for

    wrap: Wrap = pipeline_wrap_for(config)
    return wrap


def _unwrap_pipeline(model: nn.Module) -> nn.Module:
    full: nn.Module = getattr(model, "full_model", model)  # synced by the loop before use
    return full


# --- parameter server (cadence.ps) ---------------------------------------------------------
def _ps_for(config: TrainConfig) -> Wrap:
    def wrap(
        model: nn.Module, optimizer: Optimizer, ctx: DistContext
    ) -> tuple[nn.Module, Optimizer]:
        from cadence.ps.strategy import ps_wrap

        return ps_wrap(model, optimizer, ctx.rank, ctx.world_size, config)

    return wrap


def _unwrap_ps(model: nn.Module) -> nn.Module:
    from cadence.ps.strategy import ps_unwrap

    return ps_unwrap(model)


# --- local SGD and DiLoCo (cadence.localsgd) ----------------------------------------------
def _localsgd_for(config: TrainConfig) -> Wrap:
    def wrap(
        model: nn.Module, optimizer: Optimizer, ctx: DistContext
    ) -> tuple[nn.Module, Optimizer]:
        from cadence.localsgd.api import wrap as localsgd_wrap

        averaging = config.job.strategy == "local-sgd"
        return localsgd_wrap(
            model,
            optimizer,
            config.localsgd.to_config(averaging),
            keep_heap=config.cluster.keep_heap,
        )

    return wrap


def _localsgd_strategy(name: str, description: str) -> Strategy:
    return Strategy(
        name,
        description,
        lambda model, optimizer, ctx: _localsgd_for(TrainConfig.from_flat(strategy=name))(
            model, optimizer, ctx
        ),
        lambda model: model,  # the model itself; the loop syncs the optimizer before reading it
        _localsgd_for,
    )


def _torchft_for(config: TrainConfig) -> Wrap:
    def wrap(
        model: nn.Module, optimizer: Optimizer, ctx: DistContext
    ) -> tuple[nn.Module, Optimizer]:
        from cadence.localsgd.torchft_peer import wrap as torchft_wrap

        return torchft_wrap(model, optimizer, config.localsgd.to_config())

    return wrap


_STRATEGIES: dict[str, Strategy] = {
    "ddp": Strategy(
        "ddp",
        "PyTorch DistributedDataParallel (torch's buckets, or --bucket-mb: the baseline)",
        _wrap_ddp,
        _unwrap_ddp,
        configure=_ddp_for,
    ),
    "cadence-dp": Strategy(
        "cadence-dp",
        "scheduled data parallel: prioritised split/fused gradient sync, per-layer updates, "
        "next forward overlapping communication",
        _wrap_cadence_dp,
        lambda model: model,  # hooks in place: the model itself is the trained module
        configure=_cadence_dp_for,
    ),
    "zero": Strategy(
        "zero",
        "ZeRO stage 1/2/3 sharded optimizer state, gradients, parameters; --compression onebit "
        "for 1-bit Adam",
        lambda model, optimizer, ctx: _zero_for(TrainConfig.from_flat(strategy="zero"))(
            model, optimizer, ctx
        ),
        lambda model: model,  # stage 3 gathers full parameters on model.eval()
        _zero_for,
    ),
    "pipeline": Strategy(
        "pipeline",
        "pipeline parallel, one stage per worker: --stages, --microbatches, "
        "--schedule gpipe|1f1b|kfkb:K",
        lambda model, optimizer, ctx: _pipeline_for(TrainConfig.from_flat(strategy="pipeline"))(
            model, optimizer, ctx
        ),
        _unwrap_pipeline,
        _pipeline_for,
    ),
    "ps": Strategy(
        "ps",
        "parameter servers (--servers) over ZeroMQ: prioritised pulls (--ps-priority), "
        "--consistency bsp|asp|ssp:S|backup:K",
        lambda model, optimizer, ctx: _ps_for(TrainConfig.from_flat(strategy="ps"))(
            model, optimizer, ctx
        ),
        _unwrap_ps,
        _ps_for,
    ),
    "local-sgd": _localsgd_strategy(
        "local-sgd",
        "local SGD: each worker steps on its own gradients, the models averaged every "
        "--sync-every steps (--fragments K streams it, --outer-dtype bf16|int8 compresses it)",
    ),
    "diloco": _localsgd_strategy(
        "diloco",
        "DiLoCo: local steps, then every --sync-every steps an outer Nesterov SGD step "
        "(--outer-lr, --outer-momentum) on the averaged pseudo-gradient",
    ),
    "torchft-diloco": Strategy(
        "torchft-diloco",
        "torchft's DiLoCo (pip install torchft), a peer to compare with: --sync-every, "
        "--outer-lr, --outer-momentum, --fragments (its Streaming DiLoCo)",
        lambda model, optimizer, ctx: _torchft_for(
            TrainConfig.from_flat(strategy="torchft-diloco")
        )(model, optimizer, ctx),
        lambda model: model,
        _torchft_for,
    ),
}


def strategy_names() -> list[str]:
    return sorted(_STRATEGIES)


def get_strategy(name: str) -> Strategy:
    check_strategy_name(name)
    return _STRATEGIES[name]
