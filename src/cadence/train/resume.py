"""Resumable checkpoints of `cadence train`: `<run>/checkpoint/`, one file per rank.

A checkpoint is a directory holding `rank{r}.pt` (what rank r alone holds: its model copy or
stage, its optimizer state or shard, its RNG states, its figures so far) and `manifest.json`
(where training stands: step, epoch, steps done in that epoch; the world size and the settings
that decide the trajectory). Every rank writes its file into `.checkpoint.tmp/` and syncs it to
disk; rank 0 then writes the manifest and swaps the directory in by renames, keeping the
previous one as `.checkpoint.prev/` until the new one is in place. A crash at any point leaves
either the new checkpoint or the previous one complete, and `find` picks whichever is.

Rank files load with `torch.load(weights_only=True)` (`cadence.safe_load`), the manifest is
JSON: reading a checkpoint runs no code it carries.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cadence.comm.ops import barrier
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.safe_load import load_checkpoint

DIRNAME = "checkpoint"
TMP_DIRNAME = ".checkpoint.tmp"
PREV_DIRNAME = ".checkpoint.prev"
MANIFEST = "manifest.json"
FORMAT = "cadence.train-checkpoint/1"

FREE_KEYS = frozenset(
    {
        "epochs", "steps", "out", "name", "eval_every_epoch", "checkpoint_every", "resume",
        "workers", "threads", "device", "emulate_bandwidth", "master_port", "autotune_file",
        "ps_checkpoint_dir", "ps_checkpoint_every", "ps_dead_after", "straggler", "timeout",
        "keep_heap",
    }
)  # fmt: skip
"""Settings that may change on resume: how long to train, where outputs go, how the workers
run. The world size is checked on its own (under torchrun, WORLD_SIZE decides, not
--workers); every other setting changes the trajectory and must match."""


def fingerprint(config: TrainConfig) -> dict[str, Any]:
    """The settings a resumed run must share with the checkpoint's."""
    return {k: v for k, v in config.to_json().items() if k not in FREE_KEYS}


def check_resumable(config: TrainConfig) -> None:
    """Refuse, in one line, a job whose resumed run could not continue exactly."""
    if config.job.strategy == "ps":
        from cadence.train.ps_resume import check

        check(config)
    pipe = config.pipeline
    if config.job.strategy == "pipeline" and pipe.auto and (pipe.replan_every or pipe.replan_file):
        raise UserError(
            "--resume cannot restore re-planning (--replan-every, --replan-file), which "
            "follows measurements: resume without them"
        )


def writes_checkpoints(config: TrainConfig) -> bool:
    """Whether the loop writes resumable checkpoints for this job."""
    try:
        check_resumable(config)
    except UserError:
        return False
    return True


def find(run_dir: Path) -> Path | None:
    """The complete checkpoint in `run_dir` (the last swap's, or the one before it when a
    crash came between its two renames), or None."""
    for name in (DIRNAME, PREV_DIRNAME):
        candidate = run_dir / name
        if (candidate / MANIFEST).is_file():
            return candidate
    return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _barrier() -> None:
    barrier()


def save(
    run_dir: Path,
    rank: int,
    manifest: dict[str, Any],
    state: dict[str, Any],
    before_swap: Callable[[], None] | None = None,
    extra: Callable[[], Sequence[Path]] = tuple,
) -> None:
    """Write this rank's `state` and (rank 0) the `manifest` as the run's new checkpoint.
    Every rank calls it at the same step. `before_swap` runs once every file is on disk (on
    rank 0: the manifest too), before rank 0 swaps the directory in (tests kill a worker there).
    `extra()` names files rank 0 copies in (the parameter servers' files)."""
    tmp = run_dir / TMP_DIRNAME
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a crashed earlier attempt's
        tmp.mkdir(parents=True)
    _barrier()
    with open(tmp / f"rank{rank}.pt", "wb") as stream:
        torch.save(state, stream)
        stream.flush()
        os.fsync(stream.fileno())
    _barrier()  # every rank's file is on disk
    if rank != 0:
        if before_swap is not None:
            before_swap()
        return
    for path in extra():
        with open(path, "rb") as source, open(tmp / path.name, "wb") as copy:
            shutil.copyfileobj(source, copy)
            copy.flush()
            os.fsync(copy.fileno())
    with open(tmp / MANIFEST, "w") as stream:
        json.dump({"format": FORMAT, **manifest}, stream, indent=2)
        stream.flush()
        os.fsync(stream.fileno())
    _fsync_dir(tmp)
    if before_swap is not None:
        before_swap()
    final, prev = run_dir / DIRNAME, run_dir / PREV_DIRNAME
    if final.exists():
        shutil.rmtree(prev, ignore_errors=True)
        os.replace(final, prev)
    os.replace(tmp, final)
    _fsync_dir(run_dir)
    shutil.rmtree(prev, ignore_errors=True)


def load_manifest(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The checkpoint directory in `run_dir` and its manifest; one-line UserError if none."""
    if not run_dir.is_dir():
        raise UserError(f"--resume {run_dir}: no such run directory")
    found = find(run_dir)
    if found is None:
        raise UserError(
            f"--resume {run_dir}: no checkpoint there (runs write {DIRNAME}/ at each epoch end "
            "and every --checkpoint-every steps)"
        )
    manifest = json.loads((found / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise UserError(f"--resume {run_dir}: {found} is not a cadence train checkpoint")
    return found, manifest


def check_matches(
    manifest: dict[str, Any], config: TrainConfig, world_size: int, where: Path
) -> None:
    """UserError naming the first setting (or the world size) the checkpoint differs in."""
    if manifest["world_size"] != world_size:
        raise UserError(
            f"the checkpoint in {where} was written by {manifest['world_size']} workers, this "
            f"job has {world_size}: resume with --workers {manifest['world_size']}"
        )
    saved, now = manifest["config"], fingerprint(config)
    for key in sorted(set(saved) | set(now)):
        if saved.get(key) != now.get(key):
            flag = "--" + key.replace("_", "-")
            raise UserError(
                f"the checkpoint in {where} was written with {flag} {saved.get(key)}, this job "
                f"has {now.get(key)}: resume with the checkpoint's settings (only --steps, "
                "--epochs, --checkpoint-every and outputs may change)"
            )


def load_rank(directory: Path, rank: int, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Rank `rank`'s file, its tensors on `device` (where this rank trains)."""
    state: dict[str, Any] = load_checkpoint(directory / f"rank{rank}.pt", map_location=device)
    return state


# --- random number generators ----------------------------------------------------------------
def rng_state(device: torch.device) -> dict[str, Any]:
    """Every generator the training may draw from on this rank (dropout, user code)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(np.asarray(keys).copy()), pos, has_gauss, gauss),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, cached))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
