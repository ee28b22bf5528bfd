"""What a run leaves behind: metrics JSON, a loss/accuracy plot and a checkpoint.

Files are written atomically (temporary file + rename) after every epoch, so a crash or Ctrl-C
never leaves a half-written file and loses at most the current epoch.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path
from typing import Any

import torch


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def plot_training(path: Path, metrics: dict[str, Any]) -> None:
    """Train loss per step and test accuracy per epoch, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step_losses = metrics["step_loss"]
    epochs = metrics["epochs"]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(range(1, len(step_losses) + 1), step_losses, lw=1, label="train (per step)")
    ends = [e["step"] for e in epochs]
    ax_loss.plot(ends, [e["test_loss"] for e in epochs], "o-", label="test (per epoch)")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss")
    ax_loss.set_yscale("log")
    ax_loss.legend()
    ax_acc.plot([e["epoch"] for e in epochs], [100 * e["test_accuracy"] for e in epochs], "o-")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("test accuracy (%)")
    ax_acc.grid(alpha=0.3)
    cfg = metrics["config"]
    fig.suptitle(
        f"{cfg['model']} on {metrics['dataset']}, {cfg['strategy']}, "
        f"{metrics['world_size']} workers"
    )
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    # A figure is a web of reference cycles (about 4 MB here) that only the cyclic collector
    # frees, and its oldest generation runs rarely: rank 0 plots after every epoch, so dead
    # figures would pile up between collections. Free this one now: long runs stay flat.
    del fig, ax_loss, ax_acc
    gc.collect()
    os.replace(tmp, path)
