"""`cadence bench sim --from-bench-dp`: predicting the rows of a `cadence bench dp` file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.profile.record import scaled_profile
from cadence.sim.bench_dp import predict_bench_dp, read_bench_dp
from tests.unit.test_sim_cli import zoo_profile


def _bench_file(tmp_path: Path) -> Path:
    rows = [
        {"model": "cnn", "cap": cap, "compute_s": 0.2, "iteration_s": {"ddp": t, "cadence": t}}
        for cap, t in (("none", 0.25), ("100kbit", 30.0))
    ]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": 4.0}, "rows": rows}))
    return path


def test_rows_with_a_cap_are_predicted_and_uncapped_ones_skipped(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    rows, skipped = predict_bench_dp(
        [str(_bench_file(tmp_path))], {"cnn": profile}, 1.0, optimizer_step_s=0.0
    )
    assert [r["strategy"] for r in rows] == ["ddp", "cadence-dp"]
    assert len(skipped) == 1 and "none" in skipped[0]
    for r in rows:
        assert r["compute_s"] == 0.2 and r["bandwidth"] == "100kbit"
        # 116264 B of gradients on a 2-worker ring at 12.5 kB/s: the wire dominates.
        assert r["wire_s"] == pytest.approx(116264 / 12500, rel=1e-6)
        assert r["predicted_s"] >= r["wire_s"]
        assert r["error"] == pytest.approx((r["predicted_s"] - 30.0) / 30.0)


def test_profile_times_are_scaled_to_the_runs_compute() -> None:
    profile = zoo_profile("cnn")
    twice = scaled_profile(profile, 2.0)
    assert twice.iteration_s == pytest.approx(2 * profile.iteration_s)
    assert twice.blocks[1].forward_s == pytest.approx(2 * profile.blocks[1].forward_s)
    assert twice.param_bytes == profile.param_bytes


def test_a_file_that_is_not_a_bench_dp_result_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": [{"model": "cnn"}]}')
    with pytest.raises(UserError, match="not a `cadence bench dp` file"):
        read_bench_dp(str(bad))


def test_charged_communication_slows_the_prediction(tmp_path: Path) -> None:
    from cadence.sim.options import SimOptions

    profile, files = zoo_profile("cnn"), [str(_bench_file(tmp_path))]
    plain, _ = predict_bench_dp(files, {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    charged, _ = predict_bench_dp(
        files, {"cnn": profile}, 1.0, optimizer_step_s=0.0,
        options=SimOptions(comm_cpu_s_per_message=20.0),  # more than the 9.3 s transfer
    )  # fmt: skip
    for p, c in zip(plain, charged, strict=True):
        assert c["predicted_s"] > 20.0 > p["predicted_s"] + 10.0  # one message per iteration
    # On a fast link compute decides: the 0.2 s the row measured alone.
    fast = tmp_path / "fast.json"
    data = json.loads(Path(files[0]).read_text())
    data["rows"] = [dict(data["rows"][1], cap="100gbit")]
    fast.write_text(json.dumps(data))
    alone, _ = predict_bench_dp([str(fast)], {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    for a in alone:
        assert a["predicted_s"] == pytest.approx(0.2, rel=0.02)


def test_a_calibration_gives_the_caps_links_their_alphas(tmp_path: Path) -> None:
    from cadence.comm.cost import AlphaBeta
    from cadence.sim.compute import cap_link

    fitted = AlphaBeta(
        alpha_s=1.0, beta_s_per_byte=1e-3, gamma_s_per_byte=1e-9,
        collective_alphas=(("broadcast", 0.25),),
    )  # fmt: skip
    link = cap_link(100e3, 1.0, fitted)
    assert link.beta_s_per_byte == pytest.approx(8e-5)  # the cap's, not the calibration's
    assert (link.alpha_s, link.gamma_s_per_byte) == (1.0, 1e-9)
    assert link.alpha_for("broadcast") == 0.25
    assert cap_link(100e3, 1.0) == AlphaBeta(alpha_s=0.0, beta_s_per_byte=8e-5)
    profile, files = zoo_profile("cnn"), [str(_bench_file(tmp_path))]
    plain, _ = predict_bench_dp(files, {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    timed, _ = predict_bench_dp(
        files, {"cnn": profile}, 1.0, optimizer_step_s=0.0, calibrated=fitted
    )
    for p, t in zip(plain, timed, strict=True):
        assert t["wire_s"] == pytest.approx(p["wire_s"])
        # At least the all-reduce's two messages of 1 s each on the critical path.
        assert t["predicted_s"] >= p["predicted_s"] + 2.0


def test_zoo_models_report_the_buffers_ddp_broadcasts() -> None:
    from torch import nn

    from cadence.models import get_model_spec
    from cadence.sim.command import zoo_layout

    params, buffers = zoo_layout("cnn_lstm")
    model = get_model_spec("cnn_lstm").build()
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    # Running mean and variance (float32 per channel) and a batch counter (int64) each.
    assert norms and buffers == sum(8 * m.num_features + 8 for m in norms)
    assert len(params) > 0
    assert zoo_layout("gpt_mini")[1] == 0
    from cadence.sim.command import zoo_buffer_broadcasts

    # torch broadcasts buffers one dtype at a time: float statistics, then the int64 counters.
    assert zoo_buffer_broadcasts("cnn_lstm") == 2
    assert zoo_buffer_broadcasts("gpt_mini") == 1  # nothing to send; one call at most


def test_a_profiles_recorded_optimizer_step_is_priced_unless_a_step_is_given(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    # Recorded with the profile, the step gives the same prediction whenever it is made;
    # --optimizer-step still wins; a profile without one has its step timed now (> 0).
    recorded = replace(zoo_profile("cnn"), optimizer_step_s={"adam": 0.05})
    bench = str(_bench_file(tmp_path))
    for profile, given, expected in ((recorded, None, 0.05), (recorded, 0.001, 0.001)):
        rows, _ = predict_bench_dp([bench], {"cnn": profile}, 1.0, optimizer_step_s=given)
        assert [r["optimizer_step_s"] for r in rows] == pytest.approx([expected, expected])
    rows, _ = predict_bench_dp([bench], {"cnn": zoo_profile("cnn")}, 1.0)
    assert all(0 < r["optimizer_step_s"] != 0.05 for r in rows)


