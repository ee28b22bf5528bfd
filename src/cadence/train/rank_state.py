"""What each rank keeps in a resumable checkpoint, per strategy, and how it comes back.

- ddp, cadence-dp: the module's state and the optimizer's (every rank holds a full copy);
  cadence-dp's also the compression state (error feedback, PowerSGD's Q) of `--dp-compression`.
- zero: the rank's parameter pieces, optimizer shard and 1-bit Adam buffers
  (`cadence.zero.checkpoint`), plus the module's buffers.
- pipeline: the whole module (synced from the stages before saving) and the rank's optimizer,
  which holds state for its stage's parameters only. On resume each rank takes the state of
  its own stage's parameters, from whichever rank held them (the cut may differ: it is
  balanced on a fresh profile).
- ps (bsp): the module, like ddp; the servers' own files join the checkpoint (`ps_resume`).
cadence-dp's tuned threshold and reorder point are in the manifest (`dp_tuned`): a resumed
run applies them instead of tuning again.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from cadence.train.resume import load_rank


def capture(
    strategy: str, plain: nn.Module, optimizer: Optimizer, owner: Any
) -> dict[str, Any]:
    """This rank's model and optimizer state (the loop adds RNG and figures)."""
    if strategy == "zero":
        from cadence.zero.checkpoint import sharded_state

        return {
            "buffers": {name: b.detach().clone() for name, b in plain.named_buffers()},
            "zero": sharded_state(optimizer.engine),  # type: ignore[attr-defined]
        }
    state: dict[str, Any] = {"model": plain.state_dict(), "optimizer": optimizer.state_dict()}
    if strategy == "pipeline":
        state["ranges"] = [list(r) for r in owner.ranges]
        state["steps_done"] = owner.steps_done
    engine = getattr(plain, "_cadence_dp_engine", None)
    if engine is not None:  # --dp-compression's error feedback and PowerSGD's warm start
        state["dp_compression"] = engine.compression_state_dict()
    return state


def dp_tuned(plain: nn.Module) -> dict[str, Any] | None:
    """cadence-dp's tuning result, once tuning is over (None before, and for other strategies)."""
    engine = getattr(plain, "_cadence_dp_engine", None)
    result = getattr(engine, "tune_result", None)
    return None if result is None else dict(result.to_json())


def restore(
    strategy: str,
    plain: nn.Module,
    optimizer: Optimizer,
    owner: Any,
    state: dict[str, Any],
    directory: Path,
    rank: int,
    manifest: dict[str, Any],
) -> None:
    """Put this rank's saved state back (every rank calls it: ZeRO re-gathers parameters)."""
    if strategy == "zero":
        from cadence.zero.checkpoint import load_sharded_state

        engine = optimizer.engine  # type: ignore[attr-defined]
        load_sharded_state(engine, state["zero"])
        optimizer.param_groups, optimizer.state = engine.inner.param_groups, engine.inner.state
        with torch.no_grad():
            buffers = dict(plain.named_buffers())
            for name, value in state["buffers"].items():
                buffers[name].copy_(value)
        return
    plain.load_state_dict(state["model"])
    if strategy == "pipeline":
        optimizer.load_state_dict(_stage_optimizer_state(optimizer, owner, state, directory))
        owner.steps_done = state["steps_done"]
    else:
        optimizer.load_state_dict(state["optimizer"])
    tuned = manifest.get("dp_tuned")
    engine = getattr(plain, "_cadence_dp_engine", None)
    if engine is not None:
        engine.load_compression_state_dict(state.get("dp_compression", {}))
    if tuned is not None and engine is not None:
        from cadence.dp.autotune import TuneResult

        result = TuneResult.from_json(tuned)
        engine.tuner = None  # tuned before the checkpoint: not again
        engine.reconfigure(result.threshold_bytes, result.reorder_k)
        engine.tune_result = dataclasses.replace(result, method=f"resumed ({result.method})")


def _stage_optimizer_state(
    optimizer: Optimizer, owner: Any, state: dict[str, Any], directory: Path
) -> dict[str, Any]:
    """The optimizer state of this rank's stage parameters, from the ranks that held them."""
    ranges = [list(r) for r in owner.ranges]
    saved = state["optimizer"]
    first = next(iter(owner.stage.parameters()), None)
    device = first.device if first is not None else torch.device("cpu")
    if state["ranges"] != ranges:  # cut elsewhere: gather from every stage of replica 0
        merged: dict[Any, Any] = {}
        for stage in range(len(ranges)):
            merged.update(load_rank(directory, stage, device)["optimizer"]["state"])
        saved = {**saved, "state": merged}
    order = [id(p) for group in optimizer.param_groups for p in group["params"]]
    mine = {order.index(id(p)) for p in owner.stage.parameters()}
    return {**saved, "state": {k: v for k, v in saved["state"].items() if k in mine}}
