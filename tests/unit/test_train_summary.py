"""The training loop's summary: which steps the median iteration time is taken over."""

from __future__ import annotations

from cadence.train.loop import _summarise


def _metrics(times: list[float], tuned: int | None = None) -> dict:
    m: dict = {"iteration_times_s": times, "epochs": []}
    if tuned is not None:
        m["dp_autotune"] = {"iterations": tuned}
    return m


def test_the_first_step_is_left_out() -> None:
    m = _metrics([9.0, 1.0, 2.0, 3.0])
    _summarise(m, 15.0)
    assert m["median_iteration_s"] == 2.0 and m["timed_from_step"] == 1


def test_steps_spent_autotuning_are_left_out() -> None:
    m = _metrics([9.0, 5.0, 5.0, 5.0, 1.0, 1.0, 2.0], tuned=4)
    _summarise(m, 28.0)
    assert m["median_iteration_s"] == 1.0 and m["timed_from_step"] == 4


def test_too_few_steps_after_tuning_keep_all_but_the_first() -> None:
    m = _metrics([9.0, 5.0, 5.0, 1.0], tuned=3)
    _summarise(m, 20.0)
    assert m["median_iteration_s"] == 5.0 and m["timed_from_step"] == 1


def test_one_chunk_steps_before_a_chunked_plan_are_left_out() -> None:
    times = [9.0, 5.0, 5.0, 5.0, 1.0, 1.0, 2.0]
    m = _metrics(times)
    m["dp_one_chunk_probe"] = {"iterations": 4, "one_chunk": False}
    _summarise(m, 28.0)
    assert m["median_iteration_s"] == 1.0 and m["timed_from_step"] == 4
    # Kept one chunk: those steps ran the plan that stayed, so they count.
    m = _metrics(times)
    m["dp_one_chunk_probe"] = {"iterations": 4, "one_chunk": True}
    _summarise(m, 28.0)
    assert m["median_iteration_s"] == 3.5 and m["timed_from_step"] == 1
