"""Draw `cadence plan map`'s result: one panel per model, workers down, bandwidth across, each
cell coloured by the predicted best strategy and labelled with its setting and speed-up over DDP."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLOURS = {
    "ddp": "#bdbdbd",
    "cadence-dp": "#4daf4a",
    "zero": "#377eb8",
    "ps": "#984ea3",
    "tp": "#ff7f00",
    "tp x dp": "#fdbf6f",
    "pipeline": "#e41a1c",
    None: "#ffffff",
}


def _panel(ax: Any, data: dict[str, Any]) -> set[str | None]:
    cells = data["cells"]
    workers = sorted({c["workers"] for c in cells})
    bandwidths = list(dict.fromkeys(c["bandwidth"] for c in cells))
    used: set[str | None] = set()
    for c in cells:
        x, y = bandwidths.index(c["bandwidth"]), workers.index(c["workers"])
        best = c["best"]
        strategy = None if best is None else best["strategy"]
        used.add(strategy)
        ax.add_patch(_rect(x, y, COLOURS.get(strategy, "#999999")))
        if best is None:
            label = "nothing\nfits"
        else:
            speed = c["ddp_iteration_s"] / best["iteration_s"]
            setting = _short(best["setting"]) if strategy != "ddp" else ""
            how = "simulated" if best["method"] == "simulated" else "estimated"
            label = f"{strategy}\n{setting}\n{speed:.2f}x ddp speed\n({how})"
            label = label.replace("\n\n", "\n")
        ax.text(x + 0.5, y + 0.5, label, ha="center", va="center", fontsize=6.5)
    ax.set_xlim(0, len(bandwidths))
    ax.set_ylim(0, len(workers))
    ax.set_xticks([i + 0.5 for i in range(len(bandwidths))], bandwidths)
    ax.set_yticks([i + 0.5 for i in range(len(workers))], [str(w) for w in workers])
    ax.set_xlabel("link bandwidth per worker")
    ax.set_ylabel("workers")
    limit = data.get("memory_limit_bytes")
    title = f"{data['model']}, batch {data['batch_per_worker']}/worker"
    if limit:
        title += f", <= {limit / 2**20:.0f} MiB/worker"
    ax.set_title(title, fontsize=9)
    return used


def _short(setting: str) -> str:
    """The first two parts of a setting, e.g. "stage 3, onebit", and a ZeRO replicated
    update if any ("replicated front 30%": it changes the memory), wrapped to fit a cell."""
    parts = [p.strip() for p in setting.split(",")]
    parts = parts[:2] + [p for p in parts[2:] if p.startswith("replicated")]
    return "\n".join(textwrap.fill(p, 20) for p in parts)


def _rect(x: int, y: int, colour: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white", linewidth=2)


def draw_map(data: dict[str, Any] | Sequence[dict[str, Any]], path: str | Path) -> None:
    """One panel per map (a `plan_map_command` JSON, or several side by side)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    maps = [data] if isinstance(data, dict) else list(data)
    fig, axes = plt.subplots(1, len(maps), figsize=(4.6 * len(maps), 4.2), squeeze=False)
    used: set[str | None] = set()
    for ax, one in zip(axes[0], maps, strict=True):
        used |= _panel(ax, one)
    handles = [Patch(facecolor=COLOURS[s], label=s or "nothing fits") for s in COLOURS if s in used]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)
    fig.suptitle("Predicted fastest strategy (cadence plan map)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)
