"""The autotuner's trial sequence and choice, driven by a scripted clock (one process)."""

import math

import pytest

from cadence.dp.autotune import (
    Autotuner,
    Candidate,
    TuneResult,
    k_trials,
    load_result,
    threshold_trials,
)
from cadence.dp.config import DPConfig


def test_threshold_trials_grow_ten_percent_per_trial():
    values = threshold_trials(1000, 100, 1.1)
    assert len(values) == 100 and values[0] == 1000
    assert values[1] == 1100 and values[2] == 1210
    assert values[-1] == round(1000 * 1.1**99)
    assert threshold_trials(1, 8, 1.1) == [1, 2]  # rounding collapses duplicates


def test_k_trials_cover_every_reorder_point():
    assert k_trials(4) == [None, 1, 2, 3]
    assert k_trials(1) == [None]


class ScriptedRun:
    """Feeds the tuner iteration boundaries whose spacing depends on the applied candidate."""

    def __init__(self, seconds_of, waited_per_iteration=0.1):
        self.seconds_of = seconds_of
        self.now = 0.0
        self.waited = 0.0
        self.current = Candidate(100, None)
        self.applied = []
        self.waited_per_iteration = waited_per_iteration

    def apply(self, candidate):
        self.current = candidate
        self.applied.append(candidate)

    def iterate(self, tuner, count):
        for _ in range(count):
            tuner.before_forward()
            self.now += self.seconds_of(self.current)
            self.waited += self.waited_per_iteration


def _tuner(run, thresholds, ks, **kwargs):
    return Autotuner(
        "exhaustive",
        Candidate(100, None),
        [Candidate(t, None) for t in thresholds],
        lambda best: [Candidate(best.threshold_bytes, k) for k in ks],
        apply=run.apply,
        waited_s=lambda: run.waited,
        broadcast=False,
        clock=lambda: run.now,
        **kwargs,
    )


def test_tries_every_threshold_then_every_k_at_the_best_and_keeps_the_fastest():
    # 121 is fastest among thresholds; with it, K=2 is fastest overall.
    def seconds(c):
        base = {100: 1.0, 110: 0.9, 121: 0.5, 133: 0.8}[c.threshold_bytes]
        return base - (0.2 if c.reorder_k == 2 else 0.0)

    run = ScriptedRun(seconds)
    done: list[TuneResult] = []
    tuner = _tuner(run, [100, 110, 121, 133], [None, 1, 2], on_done=done.append)
    run.iterate(tuner, 60)
    result = tuner.result
    assert result is not None and done == [result]
    assert (result.threshold_bytes, result.reorder_k) == (121, 2)
    assert result.best_iteration_s == pytest.approx(0.3)
    # 4 thresholds, then K=1 and K=2 (K=None at 121 was already timed), each timed once.
    assert [(t, k) for t, k, _ in result.timings] == [
        (100, None),
        (110, None),
        (121, None),
        (133, None),
        (121, 1),
        (121, 2),
    ]
    assert run.applied[-1] == Candidate(121, 2)  # the winner is what keeps running
    # 2 warm-up iterations + 6 trials x (1 settling + 2 timed) iterations, then the decision.
    assert result.iterations == 2 + 6 * 3 + 1


def test_skips_tuning_when_forwards_never_waited_for_communication():
    run = ScriptedRun(lambda c: 1.0, waited_per_iteration=0.0)
    tuner = _tuner(run, [100, 110], [None, 1])
    run.iterate(tuner, 10)
    assert tuner.result is not None and tuner.result.method == "skipped"
    assert tuner.result.trials == 0 and math.isnan(tuner.result.best_iteration_s)
    assert run.applied == [Candidate(100, None)]


def test_result_round_trips_through_a_file(tmp_path):
    result = TuneResult("guided", 4096, 3, 8, 30, 0.25, ((4096, None, 0.3), (4096, 3, 0.25)))
    path = tmp_path / "tuned.json"
    result.save(path)
    assert load_result(path) == result
    assert load_result(tmp_path / "missing.json") is None


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"autotune": "fast"}, "autotune must be"),
        ({"autotune_growth": 1.0}, "growth"),
        ({"autotune_trials": 0}, "at least 1"),
        ({"reorder_k": 0}, "reorder_k"),
        ({"autotune_confirm_rounds": -1}, "confirm_rounds"),
    ],
)
def test_bad_dp_config_is_refused(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        DPConfig(**kwargs)


def test_hidden_communication_times_the_running_and_the_cheapest_plan_and_keeps_the_faster():
    cheap = Candidate(5000, None)
    for cheap_s, winner in ((0.8, cheap), (1.2, Candidate(100, None))):
        run = ScriptedRun(lambda c, s=cheap_s: s if c == cheap else 1.0, waited_per_iteration=0.0)
        tuner = _tuner(run, [100, 110], [None, 1], cheapest=cheap)
        run.iterate(tuner, 12)
        result = tuner.result
        assert result is not None and result.method == "hidden"
        assert [(t, k) for t, k, _ in result.timings] == [(100, None), (5000, None)]
        assert (result.threshold_bytes, result.reorder_k) == (winner.threshold_bytes, None)
        assert run.applied[-1] == winner
        # 2 warm-up iterations + 2 trials x (1 settling + 2 timed), then the decision.
        assert result.iterations == 2 + 2 * 3 + 1


def test_a_wire_too_fast_to_matter_counts_as_hidden_even_if_forwards_waited():
    cheap = Candidate(5000, None)
    run = ScriptedRun(lambda c: 1.0, waited_per_iteration=0.5)
    tuner = _tuner(run, [100, 110], [None, 1], cheapest=cheap, wire_s=0.01,
                   cheap_wire_fraction=0.05)  # fmt: skip
    run.iterate(tuner, 12)
    assert tuner.result is not None and tuner.result.method == "hidden"
    slow_run = ScriptedRun(lambda c: 1.0, waited_per_iteration=0.5)
    slow = _tuner(slow_run, [100, 110], [None], cheapest=cheap, wire_s=0.2,
                  cheap_wire_fraction=0.05)  # fmt: skip
    slow_run.iterate(slow, 12)
    assert slow.result is not None and slow.result.method == "exhaustive"  # worth tuning


@pytest.mark.parametrize("cheap_again_s", [1.2, 0.8])
def test_a_winner_is_timed_again_against_the_starting_setting_before_it_is_kept(cheap_again_s):
    cheap, initial = Candidate(5000, None), Candidate(100, None)
    run = ScriptedRun(lambda c: 1.0, waited_per_iteration=0.0)

    def seconds(c):  # the one-all-reduce plan's first trial is 0.8 s; later ones cheap_again_s
        if c != cheap:
            return 1.0
        return 0.8 if run.applied.count(cheap) == 1 else cheap_again_s

    run.seconds_of = seconds
    tuner = _tuner(run, [100, 110], [None, 1], cheapest=cheap, confirm_rounds=2)
    run.iterate(tuner, 30)
    result = tuner.result
    assert result is not None and result.method == "hidden"
    # Both timed once, then twice more each, alternately.
    assert [(t, k) for t, k, _ in result.timings] == [(100, None), (5000, None)] * 3
    winner = initial if cheap_again_s > 1.0 else cheap
    assert run.applied[-1] == winner and result.threshold_bytes == winner.threshold_bytes
    # The chosen setting's figure is the median of its timings.
    assert result.best_iteration_s == pytest.approx(1.0 if winner == initial else 0.8)
    assert result.iterations == 2 + 6 * 3 + 1


def test_exhaustive_tuning_is_not_confirmed():
    run = ScriptedRun(lambda c: {100: 1.0, 110: 0.5}[c.threshold_bytes])
    tuner = _tuner(run, [100, 110], [None], confirm_rounds=2)
    run.iterate(tuner, 20)
    result = tuner.result
    assert result is not None and result.method == "exhaustive"
    assert [(t, k) for t, k, _ in result.timings] == [(100, None), (110, None)]
    assert result.threshold_bytes == 110
