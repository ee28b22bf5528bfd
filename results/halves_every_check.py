"""Every check the README's simulator figures come from, scored on all its runs (or rounds)
and on each alternate half of them (`cadence bench sim`'s halves line), under one folder of
charges.

Rows that timed no optimizer step of their own (files from before 2026-11-27) price it as the
share of the compute that the checks' other files timed (`bench sim --step-shares`, since
2026-11-28; before, a step timed at scoring, which moved with the scoring machine).

With a HEAP_COST_FILE (`cadence bench heap-cost`, since 2026-11-28), DDP's separate runs,
whose processes left glibc's heap thresholds dynamic, are charged its factor (`--heap-cost`).

Run from the repository root:
    python results/halves_every_check.py [COSTS_FOLDER [HEAP_COST_FILE]] \
        > results/halves-every-check-DATE.txt
(default folder: results/costs-20261126; no heap charge). About 1 minute.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cadence.cli import main

PROFILES = [f"results/{m}-profile-b32-forward.json" for m in ("vgg16", "cnn_lstm", "resnet32",
                                                               "gpt_mini")]  # fmt: skip
LONG = "results/bench-dp-small-long-probe-{}.json"
CHECKS = {  # name -> the benchmark files one `bench sim` call reads
    **{f"long {s}": [LONG.format("20261126" + ("" if s == "a" else s))] for s in "abcdefgh"},
    "long i": [LONG.format("20261127i")],
    "long j": [LONG.format("20261127j")],
    "long k": [LONG.format("20261127k")],
    "long m": [LONG.format("20261127m")],
    # cadence-dp's runs priced from the blocks between their steps (`--compute-basis auto`).
    "long o (between the steps)": ["results/bench-dp-small-long-interleaved-20261127o.json"],
    "long p (between the steps)": ["results/bench-dp-small-long-interleaved-20261127p.json"],
    # With DDP's runs beside a copy of them with cadence-dp's heap (`--ddp-fixed-heap`).
    "long q (between the steps, ddp-heap)": ["results/bench-dp-small-long-heap-20261127q.json"],
    "short s (between the steps, ddp-heap, 3 runs)": [
        "results/bench-dp-small-heap-20261128s.json"],
    "short t (between the steps, ddp-heap, 3 runs, 400mbit)": [
        "results/bench-dp-small-400mbit-heap-20261128t.json"],
    "short u (between the steps, ddp-heap, 3 runs, after heap-cost)": [
        "results/bench-dp-small-heap-20261128u.json"],
    "in turns a": ["results/bench-dp-paired-small-defaults-20261126.json",
                   "results/bench-dp-paired-vgg16-400mbit-defaults-20261126.json"],
    "in turns b": ["results/bench-dp-paired-small-defaults-20261126b.json",
                   "results/bench-dp-paired-vgg16-400mbit-defaults-20261126b.json"],
    "in turns c": ["results/bench-dp-paired-small-defaults-20261126c.json"],
    "in turns d": ["results/bench-dp-paired-small-defaults-20261127d.json",
                   "results/bench-dp-paired-vgg16-400mbit-defaults-20261127d.json"],
    "in turns e": ["results/bench-dp-paired-small-defaults-20261127e.json",
                   "results/bench-dp-paired-vgg16-400mbit-defaults-20261127e.json"],
    "in turns f (10 rounds)": [
        "results/bench-dp-paired-small-defaults-10rounds-20261127f.json",
        "results/bench-dp-paired-vgg16-400mbit-defaults-10rounds-20261127f.json"],
    "in turns g (twins)": ["results/bench-dp-paired-small-twins-20261127g.json",
                           "results/bench-dp-paired-vgg16-400mbit-twins-20261127g.json"],
    "in turns h (twins)": ["results/bench-dp-paired-small-twins-20261127h.json",
                           "results/bench-dp-paired-vgg16-400mbit-twins-20261127h.json"],
    "in turns i (twins, 10 rounds, no vgg16)": [
        "results/bench-dp-paired-small-twins-10rounds-20261127i.json"],
    "in turns j (twins, small 10 rounds, vgg16 5)": [
        "results/bench-dp-paired-small-twins-10rounds-20261127j.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261127j.json"],
    "in turns l (twins, small 10 rounds, vgg16 5)": [
        "results/bench-dp-paired-small-twins-10rounds-20261127l.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261127l.json"],
    "in turns n (twins, small 10 rounds, vgg16 5)": [
        "results/bench-dp-paired-small-twins-10rounds-20261127n.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261127n.json"],
    "in turns v (twins, small 10 rounds, vgg16 5)": [
        "results/bench-dp-paired-small-twins-10rounds-20261128v.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261128v.json"],
    "in turns w (twins, small 10 rounds, vgg16 5)": [
        "results/bench-dp-paired-small-twins-10rounds-20261128w.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261128w.json"],
    "in turns x (twins, small 10 rounds, vgg16 5)": [
        "results/bench-dp-paired-small-twins-10rounds-20261128x.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261128x.json"],
    # Unit tests, ruff and mypy ran beside the small part from 18:33 to 18:44 UTC (its
    # cnn_lstm 400mbit and resnet32 rows); its gpt_mini rows and vgg16's part ran alone.
    "in turns y (twins, small 10 rounds, vgg16 5)": [
        "results/bench-dp-paired-small-twins-10rounds-20261128y.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261128y.json"],
    "in turns z (twins, vgg16 alone, 10 rounds)": [
        "results/bench-dp-paired-vgg16-400mbit-twins-10rounds-20261128z.json"],
    # The first matrix whose rows measured the wire beside the compute (comm_rate_while_computing).
    "in turns aa (twins, vgg16 5, small 10 rounds)": [
        "results/bench-dp-paired-small-twins-10rounds-20261128aa.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261128aa.json"],
    # Two back-to-back pairs (2026-11-28 23:51 to 2026-11-29 00:38 UTC), the same commands
    # but for `--host-cpus` (`results/pin_hosts_dp_paired.py`): each emulated host's threads
    # left to the kernel (bb) or pinned to one core (cc).
    "in turns bb (twins, resnet32 and gpt_mini 1gbit 10 rounds, vgg16 5, hosts shared)": [
        "results/bench-dp-paired-pin-exp-shared-20261129.json",
        "results/bench-dp-paired-vgg16-pin-exp-shared-20261129.json"],
    "in turns cc (twins, resnet32 and gpt_mini 1gbit 10 rounds, vgg16 5, hosts pinned)": [
        "results/bench-dp-paired-pin-exp-pinned-20261129.json",
        "results/bench-dp-paired-vgg16-pin-exp-pinned-20261129.json"],
    # Out of sample after bb and cc, nothing else running (2026-11-29 00:42-01:16 UTC).
    "in turns dd (twins, vgg16 5, small 10 rounds)": [
        "results/bench-dp-paired-small-twins-10rounds-20261129dd.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261129dd.json"],
    # Out of sample after dd, nothing else running (2026-11-29 01:37-02:08 UTC).
    "in turns ee (twins, vgg16 5, small 10 rounds)": [
        "results/bench-dp-paired-small-twins-10rounds-20261129ee.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261129ee.json"],
    # Out of sample after ee, nothing else running (2026-11-29 02:43-03:13 UTC).
    "in turns ff (twins, vgg16 5, small 10 rounds)": [
        "results/bench-dp-paired-small-twins-10rounds-20261129ff.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261129ff.json"],
    # Out of sample after ff, nothing else running (2026-11-29 03:28-03:59 UTC).
    "in turns gg (twins, vgg16 5, small 10 rounds)": [
        "results/bench-dp-paired-small-twins-10rounds-20261129gg.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261129gg.json"],
    # The same again on 2026-11-29 05:39-06:10 UTC, measured before the simulator's changes of
    # that morning (gradients ready layer by layer, collectives in issue order) and scored after.
    "in turns hh (twins, vgg16 5, small 10 rounds)": [
        "results/bench-dp-paired-small-twins-10rounds-20261129hh.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261129hh.json"],
    # Out of sample after this morning's changes, at c279aed (2026-11-29 07:14-07:44 UTC).
    "in turns ii (twins, vgg16 5, small 10 rounds)": [
        "results/bench-dp-paired-small-twins-10rounds-20261129ii.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261129ii.json"],
    # Out of sample again, simulator unchanged since ii, at 9b45871 (2026-11-29 09:23-09:54 UTC).
    "in turns jj (twins, vgg16 5, small 10 rounds)": [
        "results/bench-dp-paired-small-twins-10rounds-20261129jj.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-20261129jj.json"],
    # With the aligned compute turns (`--aligned-compute`), at b38c108, nothing else running
    # (2026-11-29 11:48-12:24 and 12:25-13:00 UTC); scored here as `bench sim` scores by
    # default, from the free-running turns.
    "in turns kk (twins, vgg16 5, small 10 rounds, aligned turns)": [
        "results/bench-dp-paired-small-twins-10rounds-aligned-20261129kk.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-aligned-20261129kk.json"],
    "in turns ll (twins, vgg16 5, small 10 rounds, aligned turns)": [
        "results/bench-dp-paired-small-twins-10rounds-aligned-20261129ll.json",
        "results/bench-dp-paired-vgg16-400mbit-twins-aligned-20261129ll.json"],
    # The same without twins, at 1b60b72, nothing else running (2026-11-29 13:17-13:42 UTC).
    "in turns mm (vgg16 5, small 10 rounds, aligned turns)": [
        "results/bench-dp-paired-small-10rounds-aligned-20261129mm.json",
        "results/bench-dp-paired-vgg16-400mbit-aligned-20261129mm.json"],
    # Twice the rounds (vgg16 10, small 20), no twins, at f553d23, nothing else running
    # (2026-11-29 14:16-15:01 UTC): each alternate half as many rounds as a whole earlier matrix.
    "in turns nn (vgg16 10, small 20 rounds, aligned turns)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261129nn.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261129nn.json"],
    # The same again at f553d23 (15:15-16:00 UTC), after a rule for it was set (5f4e9e2).
    "in turns oo (vgg16 10, small 20 rounds, aligned turns)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261129oo.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261129oo.json"],
    # Two more the same way at 373d794, after the rule in 7da3896 (16:38-17:24, 17:24-18:09 UTC).
    "in turns pp (vgg16 10, small 20 rounds, aligned turns)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261129pp.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261129pp.json"],
    "in turns qq (vgg16 10, small 20 rounds, aligned turns)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261129qq.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261129qq.json"],
    # One more the same way at be6cb74's code, after the rule in a1aa136 (18:57-19:42 UTC).
    "in turns rr (vgg16 10, small 20 rounds, aligned turns)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261129rr.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261129rr.json"],
    # One more the same way at 263f1da's code (no simulator change since rr), after the rule in
    # 263f1da (21:57-22:37 UTC), on a machine whose compute ran ~1.8x faster than in nn-rr.
    "in turns ss (vgg16 10, small 20 rounds, aligned turns)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261129ss.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261129ss.json"],
    # And tt at f60454d's code on the same faster machine, after the rule in f60454d (23:07-23:48).
    "in turns tt (vgg16 10, small 20 rounds, aligned turns)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261129tt.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261129tt.json"],
    # uu at d84f5f4's code (dp-paired's workers flush subnormal floats), after the rule in
    # 577ffdd's parent (2026-11-30 00:45-01:25 UTC).
    "in turns uu (vgg16 10, small 20 rounds, aligned turns, subnormals flushed)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261130uu.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261130uu.json"],
    # And vv the same way at d67e36f's code, after the rule in bfefd89 (01:31-02:11 UTC).
    "in turns vv (vgg16 10, small 20 rounds, aligned turns, subnormals flushed)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261130vv.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261130vv.json"],
    # And ww the same way, after the rule in 5607f4b (02:26-03:06 UTC).
    "in turns ww (vgg16 10, small 20 rounds, aligned turns, subnormals flushed)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261130ww.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261130ww.json"],
    # And xx the same way on 2026-12-01, after the rule in d0a3de0.
    "in turns xx (vgg16 10, small 20 rounds, aligned turns, subnormals flushed)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261201xx.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261201xx.json"],
    # And yy the same way, after the rule in 48f747a.
    "in turns yy (vgg16 10, small 20 rounds, aligned turns, subnormals flushed)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261201yy.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261201yy.json"],
    # And zz the same way, after the rule in 7470c12 (21:58-22:40 UTC).
    "in turns zz (vgg16 10, small 20 rounds, aligned turns, subnormals flushed)": [
        "results/bench-dp-paired-small-20rounds-aligned-20261201zz.json",
        "results/bench-dp-paired-vgg16-400mbit-10rounds-aligned-20261201zz.json"],
    "vgg16 long": ["results/bench-dp-vgg16-long-defaults-20261126.json"],
    "vgg16 long r (between the steps, ddp-heap)": [
        "results/bench-dp-vgg16-400mbit-heap-20261127r.json"],
}  # fmt: skip


def checks_starting(prefixes: tuple[str, ...]) -> dict[str, list[str]]:
    """The checks whose names start with one of `prefixes`."""
    return {name: files for name, files in CHECKS.items() if name.startswith(prefixes)}


def score(s: dict[str, float]) -> str:
    return f"{s['mean_abs_error'] * 100:.1f}/{s['worst_abs_error'] * 100:.1f}"


def meets(report: dict) -> bool:
    """Whether a `bench sim` report meets the target: mean |error| <= 5%, worst <= 10%."""
    return report["mean_abs_error"] <= 0.05 and report["worst_abs_error"] <= 0.10


def row_errors(scored: dict[str, list[tuple[str, dict]]]) -> dict[tuple, dict[str, list[float]]]:
    """Per row (model, strategy, cap), per variant of `scored` (variant -> its checks'
    reports): the row's signed errors in % over the checks that have it."""
    errors: dict[tuple, dict[str, list[float]]] = {}
    for variant, reports in scored.items():
        for _, report in reports:
            for row in report["rows"]:
                key = (row["model"], row.get("variant", row["strategy"]), row["bandwidth"])
                per = errors.setdefault(key, {v: [] for v in scored})
                per[variant].append(row["error"] * 100)
    return errors


def print_row_changes(scored: dict[str, list[tuple[str, dict]]]) -> None:
    """Per row (model, strategy, cap) over the checks that have it, from the first variant of
    `scored` to the second: checks predicted low, mean signed error, mean |error|."""
    first, second = scored
    errors = row_errors(scored)
    print()
    print("# per row over the checks that have it: checks predicted low, mean signed error, "
          f"mean |error| (%): {first} -> {second}")  # fmt: skip
    print("| row | checks | low | signed | abs |")
    print("| --- | --- | --- | --- | --- |")
    for key in sorted(errors):
        old, new = errors[key][first], errors[key][second]
        low = f"{sum(e < 0 for e in old)} -> {sum(e < 0 for e in new)}"
        signed = f"{statistics.mean(old):+.1f} -> {statistics.mean(new):+.1f}"
        size = (f"{statistics.mean(abs(e) for e in old):.1f} -> "
                f"{statistics.mean(abs(e) for e in new):.1f}")  # fmt: skip
        print(f"| {' '.join(key)} | {len(old)} | {low} | {signed} | {size} |")


def print_side_by_side(
    scored: dict[str, list[tuple[str, dict]]], costs: str, what: str, suffix: str = ""
) -> None:
    """Two variants' scores (`scored`: variant -> its checks' reports) check by check, then
    how many checks each meets the target on. `what` names the columns in the heading."""
    first, second = scored
    print(f"# charges from {costs}; mean/worst |error| in %: {what}")
    print(f"| check | {first} | {second} |")
    print("| --- | --- | --- |")
    for (name, a), (_, b) in zip(scored[first], scored[second], strict=True):
        print(f"| {name} | {score(a)} | {score(b)} |")
    for variant, reports in scored.items():
        met = sum(meets(r) for _, r in reports)
        print(f"{variant}{suffix}: target met on {met} of {len(reports)} checks")


def bench_sim(
    files: list[str], costs: str, out: Path, extra: tuple[str, ...] = (),
    profiles: list[str] = PROFILES,
) -> tuple[str, dict]:  # fmt: skip
    """`cadence bench sim` of `files` with `profiles`, the charges in `costs` and `extra`
    arguments: its printed text and its `--json` report (written to `out`)."""
    args = ["bench", "sim", "--from-bench-dp", *files, "--costs", costs, "--json", str(out),
            *extra]  # fmt: skip
    for profile in profiles:
        args += ["--profile", profile]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(args) == 0
    return text.getvalue(), json.loads(out.read_text())


def check_reports(
    costs: str, extra: tuple[str, ...] = (), profiles: list[str] = PROFILES,
    checks: dict[str, list[str]] = CHECKS,
) -> Iterator[tuple[str, dict]]:  # fmt: skip
    """(check name, `bench sim --json` report, with `extra` arguments and `profiles`) for
    every check of `checks` whose files are here."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, files in checks.items():
            if all(Path(f).exists() for f in files):
                out = Path(tmp) / "sim.json"
                yield name, bench_sim(files, costs, out, extra, profiles)[1]


def share_files() -> list[str]:
    """The checks' files whose every row timed the optimizer step beside its compute: the
    `--step-shares` the checks are priced with."""
    from cadence.sim.step_share import row_step_shares

    files = sorted({f for fs in CHECKS.values() for f in fs if Path(f).exists()})
    return [f for f in files if all(row_step_shares(r) for r in json.loads(Path(f).read_text())[
        "rows"])]  # fmt: skip


def main_(costs: str, heap_cost: str | None = None) -> None:
    shares = share_files()
    heap = ("--heap-cost", heap_cost) if heap_cost else ()
    print(f"# mean/worst |error| in %, charges from {costs}: all runs | odd runs | even runs; "
          "the row whose halves differ most")  # fmt: skip
    print(f"# optimizer step where a row timed none: its share of the compute in {len(shares)} "
          "files (" + ", ".join(Path(f).name for f in shares) + ")")  # fmt: skip
    if heap_cost:
        print(f"# DDP's runs with glibc's heap dynamic charged from {heap_cost}")
    print("| check | all | odd | even | widest row (odd / even) |")
    print("| --- | --- | --- | --- | --- |")
    met = split = half_over = 0
    for name, report in check_reports(costs, ("--step-shares", *shares, *heap)):
        met += meets(report)
        h = report["halves"]
        if h is None:  # each row from one figure (compute-only runs): nothing to split
            print(f"| {name} | {score(report)} | - | - | - |")
            continue
        split += 1
        half_over += max(h[k]["worst_abs_error"] for k in ("odd_samples", "even_samples")) > 0.10
        w = h["widest"]
        print(f"| {name} | {score(report)} | {score(h['odd_samples'])} | "
              f"{score(h['even_samples'])} | {w['model']} {w['strategy']} {w['bandwidth']} "
              f"{w['odd_error'] * 100:+.1f} / {w['even_error'] * 100:+.1f} |")  # fmt: skip
    print(f"target met on {met} of {len(CHECKS)} checks")
    print(f"{half_over} of the {split} checks that split into alternate halves have a half whose "
          "worst row is over 10%")  # fmt: skip


if __name__ == "__main__":
    main_(
        sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126",
        sys.argv[2] if len(sys.argv) > 2 else None,
    )
