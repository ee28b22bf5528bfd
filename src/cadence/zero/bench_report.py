"""Ratios, targets, the table and the PNGs of `cadence bench zero` (pure: rows in, text out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cadence.netem import parse_bandwidth

TIME_TARGET = 0.6
"""Stages 1 and 2 with onebit: iteration time at most this fraction of DDP + Adam's."""
BYTES_TARGET = 0.55
"""onebit: interface bytes per step at most this fraction of the same stage uncompressed."""
TARGET_BANDWIDTH_BPS = 200e6
"""The link cap both targets are set at (other caps report the ratios, not target checks)."""


def _by_job(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["job"]: r for r in rows}


def targets(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Add vs-DDP ratios and early loss agreement to the rows; return the target checks."""
    rows = summary["rows"]
    jobs = _by_job(rows)
    ddp = jobs.get("ddp")
    early = summary["freeze_steps"]  # before the switch-over every job is plain Adam
    for r in rows:
        r["vs_ddp"] = None if ddp is None else r["median_iteration_s"] / ddp["median_iteration_s"]
        if ddp is not None and "round_iteration_s" in r:  # the same round's DDP, paired
            r["round_vs_ddp"] = [
                a / b
                for a, b in zip(r["round_iteration_s"], ddp["round_iteration_s"], strict=True)
            ]
        r["loss_max_abs_diff_vs_ddp_first_steps"] = None
        if ddp is not None:
            pairs = zip(r["step_loss"][:early], ddp["step_loss"][:early], strict=True)
            r["loss_max_abs_diff_vs_ddp_first_steps"] = max(abs(a - b) for a, b in pairs)
        base = jobs.get(r["job"].split("-")[0] + "-none")
        r["iface_bytes_vs_uncompressed"] = (
            None
            if base is None or not r["job"].startswith("zero") or r["job"].endswith("-none")
            else r["iface_tx_bytes_per_step_per_rank"] / base["iface_tx_bytes_per_step_per_rank"]
        )
    checks: list[dict[str, Any]] = []
    if parse_bandwidth(summary["bandwidth"]) != TARGET_BANDWIDTH_BPS:
        return checks
    for r in rows:
        if "-onebit" not in r["job"] or not r["job"].startswith(("zero1", "zero2")):
            continue  # the targets are set for stages 1 and 2
        if r["vs_ddp"] is not None:
            checks.append({"target": f"{r['job']} time <= {TIME_TARGET}x DDP+Adam",
                           "value": r["vs_ddp"], "met": r["vs_ddp"] <= TIME_TARGET})  # fmt: skip
        ratio = r["iface_bytes_vs_uncompressed"]
        if ratio is not None:
            base = r["job"].split("-")[0] + "-none"
            checks.append({"target": f"{r['job']} iface bytes <= {BYTES_TARGET}x {base}",
                           "value": ratio, "met": ratio <= BYTES_TARGET})  # fmt: skip
    return checks


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f}"


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table_lines(summary: dict[str, Any]) -> list[str]:
    repeats = summary.get("repeats", 1)
    rounds = f", median of {repeats} rounds in alternating order" if repeats > 1 else ""
    # The simulator's figure per job (`bench_predict`), where the bench made them.
    predicted = any("predicted_iteration_s" in r for r in summary["rows"])
    lines = [
        f"{summary['model']} at {summary['bandwidth']}, {summary['workers']} emulated hosts, "
        f"batch {summary['batch_size']}, median of {summary['timed_steps']} steps after "
        f"{summary['steps'] - summary['timed_steps']}{rounds}",
        "| job | iteration | " + ("predicted (error) | " if predicted else "") + "vs DDP | "
        + ("vs DDP by round | " if repeats > 1 else "")
        + "payload MB/step | iface tx MB/step | iface wire time "
        "| max loss diff vs DDP (Adam steps) | final loss |",
        "| --- " * (8 + (repeats > 1) + predicted) + "|",
    ]
    for r in summary["rows"]:
        by_round = ""
        if repeats > 1:
            by_round = " / ".join(f"{v:.2f}" for v in r.get("round_vs_ddp", [])) or "-"
            by_round = f"| {by_round} "
        guess = ""
        if predicted:
            guess = "| - " if r.get("predicted_iteration_s") is None else (
                f"| {r['predicted_iteration_s']:.3f} s ({r['prediction_error'] * 100:+.0f}%) "
            )
        lines.append(
            f"| {r['job']} | {r['median_iteration_s']:.3f} s {guess}| {_f(r['vs_ddp'], '.2f')} "
            f"{by_round}| {_mb(r['payload_bytes_per_step_per_rank'])} "
            f"| {_mb(r['iface_tx_bytes_per_step_per_rank'])} | {r['iface_wire_s']:.3f} s "
            f"| {_f(r['loss_max_abs_diff_vs_ddp_first_steps'], '.1e')} "
            f"| {r['final_train_loss']:.4f} |"
        )
    for name, reason in summary["skipped"].items():
        lines.append(f"{name}: skipped ({reason})")
    for check in summary["targets"]:
        lines.append(
            f"target {check['target']}: {check['value']:.2f} "
            f"{'met' if check['met'] else 'MISSED'}"
        )
    return lines


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_times(path: Path, summary: dict[str, Any]) -> None:
    plt = _pyplot()
    rows = summary["rows"]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(rows)), 4.0))
    xs = range(len(rows))
    ax.bar(xs, [r["median_iteration_s"] for r in rows], label="median iteration")
    ax.plot(xs, [r["iface_wire_s"] for r in rows], "k_", markersize=18,
            label="interface bytes / cap")  # fmt: skip
    guesses = [(x, r["predicted_iteration_s"]) for x, r in zip(xs, rows, strict=True)
               if r.get("predicted_iteration_s") is not None]  # fmt: skip
    if guesses:
        ax.plot(*zip(*guesses, strict=True), "rD", markersize=5,
                label="simulator (a core per rank)")  # fmt: skip
    ax.set_xticks(list(xs), [r["job"] for r in rows], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("seconds per step")
    ax.set_title(f"cadence bench zero: {summary['model']} at {summary['bandwidth']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_losses(path: Path, summary: dict[str, Any]) -> None:
    """Adam vs 1-bit Adam (stages 1 and 2), with DDP + Adam, from the benchmark's own runs."""
    plt = _pyplot()
    jobs = _by_job(summary["rows"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, label in (
        ("ddp", "DDP + Adam"),
        ("zero1-none", "ZeRO-1 Adam"),
        ("zero1-onebit", "ZeRO-1 1-bit Adam"),
        ("zero2-onebit", "ZeRO-2 1-bit Adam"),
        ("zero2-onebit-bf16", "ZeRO-2 1-bit Adam, bf16 gather"),
    ):
        if name in jobs:
            ax.plot(jobs[name]["step_loss"], label=label, linewidth=1)
    ax.axvline(summary["freeze_steps"], color="grey", linestyle=":", label="variance frozen")
    ax.set_xlabel("step")
    ax.set_ylabel("train loss (mean over ranks)")
    ax.set_title(f"{summary['model']} at {summary['bandwidth']}: Adam vs 1-bit Adam")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
