"""Pure parts of `cadence bench dp-autotune` and the balanced cap of `cadence bench dp`."""

import pytest

from cadence.bench.dp import balanced_cap
from cadence.bench.dp_autotune import (
    exhaustive_iterations,
    summarise,
    table_lines,
    tuning_steps,
)
from cadence.comm.cost import ring_allreduce_wire_s
from cadence.dp.autotune import Autotuner, Candidate, k_trials, threshold_trials
from cadence.netem import parse_bandwidth


@pytest.mark.parametrize(("trials", "layers"), [(3, 3), (7, 5)])
def test_exhaustive_iteration_count_matches_the_real_tuner(trials, layers):
    thresholds = [Candidate(t, None) for t in threshold_trials(1000, trials, 1.1)]
    tuner = Autotuner(
        "exhaustive",
        Candidate(1000, None),
        thresholds,
        lambda best: [Candidate(best.threshold_bytes, k) for k in k_trials(layers)],
        apply=lambda c: None,
        waited_s=iter(range(0, 10**6, 10)).__next__,  # forwards always waited: not hidden
        broadcast=False,
        clock=iter(range(10**6)).__next__,
    )
    steps = 0
    while not tuner.done:
        tuner.before_forward()
        steps += 1
    assert tuner.result is not None
    assert tuner.result.iterations == exhaustive_iterations(trials, layers)
    assert tuning_steps("exhaustive", trials, layers) >= exhaustive_iterations(trials, layers) + 1
    # guided times 5 thresholds and 3 reorder points at most, then its winner and the starting
    # setting twice each to confirm
    assert tuning_steps("guided", trials, layers) == 2 + 3 * (5 + 3 + 2 * 2) + 2


def test_summary_ratios_and_table():
    tuned = {
        "exhaustive": {
            "iterations": 200,
            "trials": 66,
            "threshold_bytes": 2**22,
            "reorder_k": None,
        },
        "guided": {"iterations": 27, "trials": 8, "threshold_bytes": 2**23, "reorder_k": 3},
    }
    summary = summarise(tuned, {"exhaustive": [1.0, 1.2, 1.1], "guided": [1.21, 1.0]})
    assert summary["time_ratio"] == pytest.approx(1.105 / 1.1)
    assert summary["iteration_ratio"] == pytest.approx(27 / 200)
    text = "\n".join(table_lines(tuned, summary))
    assert "| guided | 27 | 8 | 8.00 MB | 3 | 1.105 s |" in text
    assert "iteration time 1.005" in text and "warm-up iterations 0.135" in text


def test_balanced_cap_makes_wire_time_equal_compute_time():
    cap = balanced_cap(1.16, 61_014_312, 2)
    assert cap == "421mbit"
    wire = ring_allreduce_wire_s(61_014_312, 2, parse_bandwidth(cap))
    assert wire == pytest.approx(1.16, rel=0.01)


def test_guided_run_length_covers_the_confirmation_rounds():
    initial, fast = Candidate(1000, None), Candidate(2000, None)
    thresholds = [initial, fast, *(Candidate(t, None) for t in (3000, 4000, 5000))]
    running = [initial]
    now = [0.0]

    def clock() -> float:  # every iteration of `fast` takes half as long: it wins and is confirmed
        now[0] += 0.5 if running[0].threshold_bytes == fast.threshold_bytes else 1.0
        return now[0]

    tuner = Autotuner(
        "guided",
        initial,
        thresholds,
        lambda best: [Candidate(best.threshold_bytes, k) for k in (1, 2, 3)],
        apply=lambda c: running.__setitem__(0, c),
        waited_s=iter(range(0, 10**6, 10)).__next__,  # forwards always waited: not hidden
        broadcast=False,
        clock=clock,
        confirm_rounds=2,
    )
    steps = 0
    while not tuner.done:
        tuner.before_forward()
        steps += 1
    assert tuner.result is not None and tuner.result.threshold_bytes == fast.threshold_bytes
    assert tuner.result.trials > len(thresholds) + 3  # the confirmation rounds ran
    assert steps + 1 <= tuning_steps("guided", 100, 10)  # as exhaustive: one step to spare
