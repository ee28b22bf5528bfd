"""Adam vs 1-bit Adam under ZeRO, trained side by side with `cadence train`; writes a JSON
summary and a loss-curve PNG.

    python -m cadence.zero.compare --model gpt_mini --steps 400 --freeze-steps 100 \\
        --out results/zero-onebit-gpt_mini
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cadence.config import TrainConfig
from cadence.train.run import train


def compare(
    model: str,
    stage: int,
    steps: int | None,
    epochs: int,
    freeze_steps: int,
    workers: int,
    out: Path,
    lr: float,
) -> dict[str, Any]:
    """Train the same job with compression none and onebit; return both summaries."""
    out.mkdir(parents=True, exist_ok=True)
    runs_dir = tempfile.mkdtemp(prefix="cadence-zero-compare-")  # checkpoints stay out of out/
    runs: dict[str, Any] = {}
    for compression in ("none", "onebit"):
        config = TrainConfig(
            model=model,
            strategy="zero",
            zero_stage=stage,
            compression=compression,
            freeze_steps=freeze_steps,
            steps=steps,
            epochs=epochs,
            workers=workers,
            lr=lr,
            out=runs_dir,
            name=compression,
        )
        metrics, _ = train(config)
        runs[compression] = {
            "final_test_accuracy": metrics["final_test_accuracy"],
            "final_test_loss": metrics["final_test_loss"],
            "final_train_loss_last10": sum(metrics["step_loss"][-10:]) / 10,
            "median_iteration_s": metrics["median_iteration_s"],
            "step_loss": metrics["step_loss"],
        }
    adam, onebit = runs["none"], runs["onebit"]
    summary = {
        "command": " ".join(["python -m cadence.zero.compare", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()} ({platform.processor() or platform.machine()})",
        "model": model,
        "stage": stage,
        "workers": workers,
        "freeze_steps": freeze_steps,
        "steps": len(adam["step_loss"]),
        "accuracy_points_lost": 100 * (adam["final_test_accuracy"] - onebit["final_test_accuracy"]),
        "test_loss_ratio": onebit["final_test_loss"] / adam["final_test_loss"],
        "runs": runs,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot(out / "loss.png", summary)
    return summary


def _plot(path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, label in (("none", "Adam"), ("onebit", "1-bit Adam")):
        ax.plot(summary["runs"][name]["step_loss"], label=label, linewidth=1)
    ax.axvline(summary["freeze_steps"], color="grey", linestyle=":", label="variance frozen")
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(f"{summary['model']}, ZeRO stage {summary['stage']}, {summary['workers']} ranks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp")
    p.add_argument("--stage", type=int, default=2)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--freeze-steps", type=int, default=100)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    summary = compare(
        args.model,
        args.stage,
        args.steps,
        args.epochs,
        args.freeze_steps,
        args.workers,
        Path(args.out),
        args.lr,
    )
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
