"""Timeline PNG of a simulated schedule: one row per resource, memory of worker 0 below."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cadence.sim.metrics import SimResult

MAX_WORKERS = 4  # rows of more workers would only repeat them (data parallel is symmetric)
COLORS = {
    "input": "#64b5cd",
    "forward": "#4c72b0",
    "loss": "#8172b2",
    "input_grad": "#dd8452",
    "weight_grad": "#c44e52",
    "allreduce": "#55a868",
    "collective": "#55a868",
    "update": "#937860",
    "issue": "#999999",
    "complete": "#999999",
}


def plot_timeline(result: SimResult, path: str | Path) -> None:
    """Draw every task as a bar on its resource's row (the first `MAX_WORKERS` workers);
    flows sharing a link overlap translucently."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schedule = result.schedule
    graph = schedule.graph
    shown = [r for r, res in enumerate(graph.resources) if res.worker < MAX_WORKERS]
    row = {r: i for i, r in enumerate(shown)}
    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for t in graph.tasks:
        width = schedule.end_s[t.id] - schedule.start_s[t.id]
        for r in t.resources:
            if r in row:
                bars[(row[r], t.kind)].append((schedule.start_s[t.id], max(width, 0.0)))
    rows = len(shown)
    fig, (ax, mem_ax) = plt.subplots(
        2,
        1,
        figsize=(12, 1.2 + 0.45 * rows + 1.6),
        sharex=True,
        gridspec_kw={"height_ratios": [max(rows, 1), 2.5]},
    )
    for (r, kind), spans in bars.items():
        ax.broken_barh(
            spans,
            (r - 0.4, 0.8),
            facecolors=COLORS.get(kind, "#cccccc"),
            alpha=0.55 if kind in ("allreduce", "collective") else 0.9,
            linewidth=0,
        )
    ax.set_yticks(range(rows), [graph.resources[r].name for r in shown])
    ax.invert_yaxis()
    lo, hi = result.window
    for axis in (ax, mem_ax):
        axis.axvspan(lo, hi, color="#f2f2f2", zorder=-1)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()][:6]
    ax.legend(
        handles,
        list(COLORS)[:6],
        ncol=6,
        loc="lower right",
        fontsize=7,
        bbox_to_anchor=(1.0, 1.0),
        frameon=False,
    )
    ax.set_title(
        f"{result.strategy}, {result.world_size} workers: "
        f"{result.iteration_s * 1e3:.1f} ms/iteration "
        f"(bound {result.bound_s * 1e3:.1f} ms, overlap {result.overlap_ratio:.2f}, "
        f"E {result.efficiency:.2f}); shaded: measured iterations",
        fontsize=9,
        loc="left",
        pad=18,
    )
    timeline = result.memory_timeline(0)
    mem_ax.step([t for t, _ in timeline], [b / 1e6 for _, b in timeline], where="post")
    mem_ax.set_ylabel("w0 MB")
    mem_ax.set_xlabel("simulated seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
