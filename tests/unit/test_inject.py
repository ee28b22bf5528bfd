"""`CADENCE_INJECT_FAILURE`: which rank, step, way and place a test's fault strikes."""

from __future__ import annotations

import pytest

from cadence.errors import UserError
from cadence.inject import INJECT_ENV, injected_fault


def test_a_spec_names_rank_step_mode_and_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INJECT_ENV, "1:3:kill:allreduce")
    fault = injected_fault(1, "allreduce")
    assert fault is not None and (fault.step, fault.mode, fault.phase) == (3, "kill", "allreduce")
    assert injected_fault(0, "allreduce") is None  # another rank
    assert injected_fault(1, "forward") is None  # another place


def test_the_short_form_raises_between_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INJECT_ENV, "0:5")
    fault = injected_fault(0, "step")
    assert fault is not None and (fault.mode, fault.phase) == ("raise", "step")
    with pytest.raises(RuntimeError, match="injected failure at step 5"):
        fault.fire("between steps")


@pytest.mark.parametrize("spec", ["1:3:explode", "1", "1:3:kill:nowhere", "1:3:kill:step:x"])
def test_a_bad_spec_is_one_line(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv(INJECT_ENV, spec)
    with pytest.raises(UserError, match=r"expected RANK:STEP\[:MODE\[:PHASE\]\]") as err:
        injected_fault(0, "step")
    assert "\n" not in str(err.value)
