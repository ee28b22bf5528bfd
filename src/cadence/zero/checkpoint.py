"""Checkpoints of sharded state: one file per rank, never resharded.

A rank's state is its parameter pieces, its optimizer state, its error buffers and 1-bit
Adam's encoded momentum. Loading checks the world size and the layout and refuses a mismatch
with one line (resharding would need every rank's file on every rank; we chose to refuse).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from cadence.errors import UserError
from cadence.safe_load import load_checkpoint
from cadence.zero.engine import ZeroEngine

FORMAT = "cadence.zero/1"


def optimizer_state(engine: ZeroEngine) -> dict[str, Any]:
    """This rank's share of the optimizer state, as plain tensors (cloned): the inner
    optimizer's state over this rank's pieces, and 1-bit Adam's error buffers and momentum."""

    def opt(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach().clone()

    return {
        "format": FORMAT,
        "world_size": engine.p,
        "rank": engine.rank,
        "stage": engine.config.stage,
        "compression": engine.config.compression,
        "layout": engine.layout.fingerprint(),
        "steps_done": engine.steps_done,
        "optimizer": engine.inner.state_dict(),
        "sender_error": [opt(st.sender_error) for st in engine.states],
        "reducer_error": [opt(st.reducer_error) for st in engine.states],
        "momentum_wire": [opt(st.momentum_wire) for st in engine.states],
    }


def sharded_state(engine: ZeroEngine) -> dict[str, Any]:
    """`optimizer_state` plus this rank's master pieces of the parameters."""
    return {
        **optimizer_state(engine),
        "shards": [st.shard.detach().clone() for st in engine.states],
    }


def _check(engine: ZeroEngine, state: dict[str, Any]) -> None:
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError("not a cadence.zero checkpoint (missing format tag)")
    if state["world_size"] != engine.p:
        raise UserError(
            f"ZeRO checkpoint was saved by {state['world_size']} ranks but this job has "
            f"{engine.p}; shards are not resharded, resume with {state['world_size']} workers"
        )
    if state["rank"] != engine.rank:
        raise UserError(f"ZeRO checkpoint of rank {state['rank']} loaded on rank {engine.rank}")
    if [tuple(x) for x in state["layout"]] != [tuple(x) for x in engine.layout.fingerprint()]:
        raise UserError("ZeRO checkpoint was saved from a different model (bucket sizes differ)")
    if state["compression"] != engine.config.compression:
        raise UserError(
            f"ZeRO optimizer state was saved with compression {state['compression']}; this "
            f"job runs {engine.config.compression}: resume with the same compression"
        )


def load_optimizer_state(engine: ZeroEngine, state: dict[str, Any]) -> None:
    """Restore `optimizer_state` output; the parameters are left as they are."""
    _check(engine, state)
    for st, se, re, mw in zip(
        engine.states,
        state["sender_error"],
        state["reducer_error"],
        state["momentum_wire"],
        strict=True,
    ):
        st.sender_error, st.reducer_error, st.momentum_wire = se, re, mw
        st.denominator = None  # made again from the loaded variance
    try:
        engine.inner.load_state_dict(state["optimizer"])
    except ValueError as exc:  # torch: groups or sizes differ
        raise UserError(f"ZeRO optimizer state does not fit this optimizer: {exc}") from None
    engine.steps_done = state["steps_done"]


def load_sharded_state(engine: ZeroEngine, state: dict[str, Any]) -> None:
    """Restore `sharded_state` output; every rank must call it (parameters are re-gathered)."""
    _check(engine, state)
    with torch.no_grad():
        for st, shard in zip(engine.states, state["shards"], strict=True):
            st.shard.copy_(shard)
    load_optimizer_state(engine, state)
    engine.after_update()
    engine.wait_gathers()


def _rank_file(directory: Path, rank: int, world_size: int) -> Path:
    return directory / f"zero-rank{rank}-of-{world_size}.pt"


def save(directory: str | os.PathLike[str], optimizer: Any) -> Path:
    """Write this rank's state to `directory/zero-rank{r}-of-{p}.pt`; every rank calls it."""
    engine: ZeroEngine = optimizer.engine
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    target = _rank_file(path, engine.rank, engine.p)
    tmp = target.with_name(f".{target.name}.tmp")
    torch.save(sharded_state(engine), tmp)
    os.replace(tmp, target)
    return target


def load(directory: str | os.PathLike[str], optimizer: Any) -> None:
    """Load this rank's file from `directory`; a world-size mismatch is a one-line UserError."""
    engine: ZeroEngine = optimizer.engine
    path = Path(directory)
    target = _rank_file(path, engine.rank, engine.p)
    if not target.exists():
        saved = sorted(path.glob("zero-rank*-of-*.pt"))
        if not saved:
            raise UserError(f"no ZeRO checkpoint in '{path}'")
        world = saved[0].stem.rsplit("-of-", 1)[1]
        raise UserError(
            f"ZeRO checkpoint in '{path}' was saved by {world} ranks but this job has "
            f"{engine.p}; shards are not resharded, resume with {world} workers"
        )
    load_sharded_state(engine, load_checkpoint(target))
    optimizer.param_groups, optimizer.state = engine.inner.param_groups, engine.inner.state
