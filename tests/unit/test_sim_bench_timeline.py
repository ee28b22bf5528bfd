"""`cadence bench sim --from-timeline`: replaying traced dp-timeline iterations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.sim.bench_timeline import predict_timelines, read_timeline, traced_profile
from tests.unit.test_sim_cli import zoo_profile


def _timeline(tmp_path: Path, cap: str, forward: float, backward: float, measured: float) -> str:
    parts = {"forward_s": forward, "backward_s": backward, "updates_s": 0.0}
    runs = {name: {"iteration_s": measured, "breakdown": parts} for name in ("ddp", "cadence")}
    config = {"model": "cnn", "cap": cap, "workers": 2, "batch_size": 64, "threshold_mb": 4.0}
    path = tmp_path / f"tl-{cap}.json"
    path.write_text(json.dumps({"config": config, "runs": runs}))
    return str(path)


def test_profile_takes_the_traced_forward_and_backward() -> None:
    profile = zoo_profile("cnn")
    traced = traced_profile(profile, 0.3, 0.5)
    assert sum(b.forward_s for b in traced.blocks) + traced.loss_s == pytest.approx(0.3)
    assert sum(b.input_grad_s + b.weight_grad_s for b in traced.blocks) == pytest.approx(0.5)
    assert traced.param_bytes == profile.param_bytes


def test_compute_bound_step_is_its_compute_and_wire_bound_step_its_wire(tmp_path: Path) -> None:
    profile = {"cnn": zoo_profile("cnn")}
    # 116264 B of gradients; at 10gbit the wire is ~0.1 ms: the step is forward + backward.
    fast, skipped = predict_timelines([_timeline(tmp_path, "10gbit", 0.3, 0.5, 0.8)], profile)
    assert not skipped and [r["strategy"] for r in fast] == ["ddp", "cadence-dp"]
    for r in fast:
        assert r["predicted_s"] == pytest.approx(0.8, rel=0.01)
        assert r["error"] == pytest.approx((r["predicted_s"] - 0.8) / 0.8)
    # At 100kbit the wire (116264 B at 12.5 kB/s) dwarfs the compute.
    slow, _ = predict_timelines([_timeline(tmp_path, "100kbit", 0.3, 0.5, 10.0)], profile, 1.0)
    for r in slow:
        assert r["wire_s"] == pytest.approx(116264 / 12500, rel=1e-6)
        assert r["predicted_s"] >= r["wire_s"]


def test_the_slowest_ranks_compute_sets_the_step(tmp_path: Path) -> None:
    path = Path(_timeline(tmp_path, "10gbit", 0.3, 0.5, 1.0))
    data = json.loads(path.read_text())
    slow = {"forward_s": 0.4, "backward_s": 0.6, "updates_s": 0.0}
    for run in data["runs"].values():
        run["rank_breakdowns"] = [run["breakdown"], slow]
    path.write_text(json.dumps(data))
    rows, _ = predict_timelines([str(path)], {"cnn": zoo_profile("cnn")})
    for r in rows:
        assert r["compute_s"] == pytest.approx(1.0)
        assert r["predicted_s"] == pytest.approx(1.0, rel=0.01)


def test_uncapped_and_bad_files(tmp_path: Path) -> None:
    rows, skipped = predict_timelines(
        [_timeline(tmp_path, "none", 0.3, 0.5, 0.8)], {"cnn": zoo_profile("cnn")}
    )
    assert rows == [] and "without a cap" in skipped[0]
    bad = tmp_path / "x.json"
    bad.write_text('{"config": {"model": "cnn"}}')
    with pytest.raises(UserError, match="not a `cadence bench dp-timeline` file"):
        read_timeline(str(bad))
    with pytest.raises(UserError, match="no profile"):
        predict_timelines([_timeline(tmp_path, "1gbit", 0.3, 0.5, 0.8)], {})
