"""`cadence.ps.serving_cost`: a parameter server's processor time per message and per byte,
measured on the runtime itself and recorded by `cadence profile`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.profile.record import Profile
from cadence.ps.serving_cost import (
    MESSAGES_PER_SLICE,
    ServingCost,
    profile_serving,
    recorded_serving,
)


def test_a_slice_costs_its_messages_and_bytes_for_every_worker() -> None:
    cost = ServingCost(s_per_message=1e-4, s_per_byte=1e-9)
    assert cost.slice_s(1000, workers=3) == pytest.approx(3 * (MESSAGES_PER_SLICE * 1e-4 + 1e-6))
    assert cost.as_dict() == {"message": 1e-4, "byte": 1e-9}


def test_cadence_profile_records_what_serving_costs_here(tmp_path: Path) -> None:
    from cadence.cli import main

    out = tmp_path / "mlp.json"
    args = ["profile", "--model", "mlp", "--micro-batch-size", "4", "--profile-iterations", "1"]
    assert main([*args, "--device", "cpu", "--out", str(out)]) == 0
    profile = Profile.load(out, expected_model="mlp")
    serving = recorded_serving(profile)
    assert serving is not None
    # A message is parsed, signed or verified and queued in Python: tens to hundreds of
    # microseconds; a byte is copied, hashed and updated: nanoseconds.
    assert 1e-6 < serving.s_per_message < 1e-2, serving
    assert 0 <= serving.s_per_byte < 1e-6, serving
    assert profile_serving(profile) == serving
    data = json.loads(profile.to_json())
    data["ps_serving_s"] = {"message": 1e-4}
    out.write_text(json.dumps(data))
    with pytest.raises(UserError, match="ps_serving_s needs message and byte"):
        Profile.load(out)
    del data["ps_serving_s"]  # a profile made before it was recorded
    out.write_text(json.dumps(data))
    assert recorded_serving(Profile.load(out)) is None
