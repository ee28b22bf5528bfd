"""The separate-run `cadence bench dp` matrices predicted two ways, with the contention charge:
from the row's median compute-only iteration (what `cadence bench sim --from-bench-dp` does)
and round by round, each variant's run from the compute-only run of the same round (as the
in-turns files are), the row's error then the median over its rounds. No new runs.

    python results/dp_matrix_per_round.py > results/dp-matrix-per-round.txt
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

FILES = (
    "bench-dp-small-keep-heap-20261125.json",
    "bench-dp-small-one-chunk-rule-20261125.json",
    "bench-dp-small-one-chunk-rule-20261125b.json",
    "bench-dp-small-20261125c.json",
    "bench-dp-small-20261125d.json",
    "bench-dp-small-long-20261126.json",
    "bench-dp-small-long-20261126b.json",
)
MODELS = ("vgg16", "gpt_mini", "resnet32", "cnn_lstm")


def main() -> None:
    import cadence.sim.bench_dp as bench_dp
    from cadence.bench.contention import ContentionFit
    from cadence.profile import Profile
    from cadence.sim.bench_dp_records import VARIANTS
    from cadence.sim.options import SimOptions
    from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION

    if not Path("results", Path(__file__).name).is_file():
        sys.exit("run from the repository root")
    profiles = {}
    for name in MODELS:
        profile = Profile.load(f"results/{name}-profile-b32-forward.json")
        profiles[profile.model] = profile
    fit = ContentionFit.load("results/contention-gpt_mini-400mbit.json")
    options = SimOptions(
        comm_cpu_s_per_message=fit.cpu_s_per_message,
        comm_cpu_s_per_byte=fit.cpu_s_per_byte,
        ddp_first_bucket_bytes=None,
    )
    # The case `predict_bench_dp` builds for a row, caught as it predicts, to predict the row's
    # rounds with the very same settings.
    cases: list[Any] = []
    predict = bench_dp._Case.predict

    def catching(case: Any, compute_s: float, co_run: float) -> Any:
        cases.append(case)
        return predict(case, compute_s, co_run)

    bench_dp._Case.predict = catching  # type: ignore[method-assign]
    print(f"{'file':<46}{'median compute':>22}{'per round':>22}")
    for name in FILES:
        path = f"results/{name}"
        cases.clear()
        rows, _ = bench_dp.predict_bench_dp(
            [path], profiles, TCP_PAYLOAD_FRACTION, None, options, fit.co_run_slowdown
        )
        data = bench_dp.read_bench_dp(path)
        capped = [r for r in data["rows"] if r["cap"] != "none"]
        by_row = {(r["model"], r["bandwidth"], r["strategy"]): r["error"] for r in rows}
        median_errors, round_errors = [], []
        for row, case in zip(capped, list(cases), strict=True):
            per_round = [predict(case, c, fit.co_run_slowdown) for c in row["compute_runs_s"]]
            for variant, strategy in VARIANTS.items():
                measured = row["runs_s"][variant]
                errors = [(p[variant].iteration_s - m) / m
                          for p, m in zip(per_round, measured, strict=True)]  # fmt: skip
                round_errors.append(abs(statistics.median(errors)))
                median_errors.append(abs(by_row[(row["model"], row["cap"], strategy)]))
        print(f"{name:<46}{_summary(median_errors):>22}{_summary(round_errors):>22}")
    bench_dp._Case.predict = predict  # type: ignore[method-assign]


def _summary(errors: list[float]) -> str:
    return f"{100 * statistics.mean(errors):.1f}% / {100 * max(errors):.1f}%"


if __name__ == "__main__":
    main()
