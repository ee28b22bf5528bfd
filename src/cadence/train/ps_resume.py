"""The parameter servers' part of a resumable checkpoint (`--strategy ps`, bsp).

The servers own the parameters and the optimizer state. The loop points them at
`<run>/ps-servers/` with a period that divides every step the loop checkpoints at, so each
server has written its file of exactly that version (`cadence.ps.checkpoint`: one consistent
version per file) before its last answer of the step reaches the workers; the loop's checkpoint
then copies those files in. On resume the copies go back to `<run>/ps-servers/` before the
servers start, and the servers restore from them.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

from cadence.comm.ops import barrier
from cadence.config import TrainConfig
from cadence.errors import UserError

SERVER_DIR = "ps-servers"


def check(config: TrainConfig) -> None:
    """One line for a parameter-server job whose servers cannot be checkpointed with the run."""
    if config.ps.consistency != "bsp":
        raise UserError(
            f"--resume with --strategy ps needs --consistency bsp (with {config.ps.consistency} "
            "no step is the same on every worker to checkpoint at)"
        )
    if config.ps.checkpoint_dir is not None:
        raise UserError(
            "--ps-checkpoint-dir keeps the servers' files apart from the run's checkpoint: "
            "drop it to use --resume and --checkpoint-every"
        )


def server_config(config: TrainConfig, run_dir: Path, per_epoch: int, total: int) -> TrainConfig:
    """`config` with the servers writing into `<run>/ps-servers/` at every step the loop may
    checkpoint at (epoch ends, every --checkpoint-every steps, the last step)."""
    every = math.gcd(config.job.checkpoint_every, per_epoch, total)
    ps = replace(config.ps, checkpoint_dir=str(run_dir / SERVER_DIR), checkpoint_every=every)
    return replace(config, ps=ps)


def prepare(run_dir: Path, rank: int, restore_from: Path | None) -> None:
    """Before the servers start: `<run>/ps-servers/` empty, or holding the checkpoint's files
    (every rank calls it; rank 0 does the work)."""
    if rank == 0:
        live = run_dir / SERVER_DIR
        shutil.rmtree(live, ignore_errors=True)
        live.mkdir(parents=True)
        if restore_from is not None:
            for saved in sorted(restore_from.glob("server*.npz")):
                shutil.copyfile(saved, live / saved.name)
    barrier()


def server_files(run_dir: Path, step: int) -> list[Path]:
    """The servers' files, each checked to hold version `step` (what the loop checkpoints)."""
    files = sorted((run_dir / SERVER_DIR).glob("server*.npz"))
    for path in files:
        with np.load(path, allow_pickle=False) as data:
            versions = {int(data[f"{int(k)}.meta"][0]) for k in data["keys"]}
        if versions != {step}:
            raise RuntimeError(f"{path} holds versions {sorted(versions)}, not step {step}")
    return files
