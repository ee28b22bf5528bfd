"""Seconds per step of each method (`cadence.sim.methods`) and `cadence plan tta`'s ranking by
predicted time to a target loss (`cadence.sim.tta`)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.errors import UserError
from cadence.sim.methods import (
    DEFAULT_METHODS,
    Method,
    StepEstimate,
    ddp_powersgd_elements,
    method_step_s,
    outer_sync_bytes,
    parse_method,
    parse_methods,
)
from cadence.sim.tta import (
    AS_DDP,
    BEYOND_TARGET,
    FORECAST,
    NEEDS_PILOT,
    NOT_REACHED,
    PILOT,
    PILOT_TOO_SHORT,
    TARGET_STEPS,
    UNRESOLVED,
    USER,
    Steps,
    convergence,
    forecast,
    parse_steps,
    rank,
    read_pilot,
    steps_to_target,
    table_lines,
    why,
)
from tests.cli_helpers import assert_one_line_error, run_cadence
from tests.unit.test_sim_cli import zoo_profile
from tests.unit.test_sim_strategies import _setup

MB = 1_000_000


def test_method_names_round_trip_and_select_train_flags() -> None:
    for name in DEFAULT_METHODS:
        assert parse_method(name).name == name
    assert parse_method("diloco:H16:K4") == Method("diloco", "none", 16, 4)
    assert parse_method("ddp+fp16").train_flags() == {"strategy": "ddp", "ddp_comm_hook": "fp16"}
    assert parse_method("zero+onebit").train_flags() == {"strategy": "zero",
                                                         "compression": "onebit"}  # fmt: skip
    flags = parse_method("local-sgd:H8").train_flags()
    assert flags == {"strategy": "local-sgd", "sync_every": 8, "fragments": 1}
    flags = parse_method("diloco+bf16:H8:K2").train_flags()
    assert flags == {"strategy": "diloco", "sync_every": 8, "fragments": 2, "outer_dtype": "bf16"}
    flags = parse_method("torchft-diloco:H16:K4").train_flags()
    assert flags == {"strategy": "torchft-diloco", "sync_every": 16, "fragments": 4}
    bad_names = ("ddp+sign", "diloco", "local-sgd+sign:H4", "ddp:H4", "cadence-dp:K2", "fsdp",
                 "diloco:H0", "x:H1", "torchft-diloco+bf16:H4", "torchft-diloco")  # fmt: skip
    for bad in bad_names:
        with pytest.raises(UserError):
            parse_method(bad)
    with pytest.raises(UserError, match="twice"):
        parse_methods("ddp,ddp")


def test_local_sgd_spreads_one_model_sync_over_h_steps() -> None:
    setup = _setup(4, 100e6)  # 4 blocks of 4 MB, 30 ms compute each
    params = sum(p.nbytes for p in setup.params)
    compute = 4 * 0.03 + setup.update_s_per_byte * params
    sync = setup.link.time("allreduce", "ring", params, 4)
    for h in (4, 16):
        est = method_step_s(setup, parse_method(f"local-sgd:H{h}"))
        assert est.step_s == pytest.approx(compute + sync / h)
        assert est.wire_bytes == pytest.approx(1.5 * params / h)
    diloco = method_step_s(setup, parse_method("diloco:H4"))  # + the outer step, 1 in 4
    assert diloco.step_s == pytest.approx(compute + (sync + setup.update_s_per_byte * params) / 4)
    peer = method_step_s(setup, parse_method("torchft-diloco:H4"))  # the same bytes and step
    assert peer.step_s == pytest.approx(diloco.step_s)
    streamed = method_step_s(setup, parse_method("local-sgd:H4:K4"))
    hidden = 4 * max(0.0, sync / 4 - compute)  # each quarter hides behind one step
    assert streamed.step_s == pytest.approx(compute + hidden / 4)
    assert streamed.step_s < method_step_s(setup, parse_method("local-sgd:H4")).step_s
    int8 = method_step_s(setup, parse_method("local-sgd:H4"), outer_dtype="int8")
    assert int8.step_s < method_step_s(setup, parse_method("local-sgd:H4")).step_s
    named = method_step_s(setup, parse_method("local-sgd+int8:H4"))  # the method's own dtype
    assert named.step_s == int8.step_s
    assert named.wire_bytes == int8.wire_bytes
    assert outer_sync_bytes(1000, "int8") < outer_sync_bytes(1000, "bf16") < 4000


def test_compressed_methods_step_faster_on_a_slow_link_and_warm_up_first() -> None:
    setup = _setup(2, 20e6)
    ddp = method_step_s(setup, parse_method("ddp"))
    fp16 = method_step_s(setup, parse_method("ddp+fp16"))
    assert fp16.step_s < ddp.step_s and fp16.wire_bytes == pytest.approx(ddp.wire_bytes / 2)
    sign = method_step_s(setup, parse_method("cadence-dp+sign"))
    assert sign.step_s < method_step_s(setup, parse_method("cadence-dp")).step_s
    shapes = [(1000, 1000)] * 4  # 4 MB each, as the setup's blocks
    psgd = method_step_s(setup, parse_method("ddp+powersgd"), shapes=shapes, powersgd_start=7)
    assert psgd.step_s < ddp.step_s
    assert psgd.warmup_steps == 7 and psgd.warmup_step_s == pytest.approx(ddp.step_s)
    assert psgd.seconds_for(10) == pytest.approx(7 * ddp.step_s + 3 * psgd.step_s)
    onebit = method_step_s(setup, parse_method("zero+onebit"), freeze_steps=5)
    assert onebit.warmup_steps == 5 and onebit.step_s < onebit.warmup_step_s
    with pytest.raises(UserError, match="parameter shapes"):
        method_step_s(setup, parse_method("cadence-dp+powersgd"))


def test_ddp_powersgd_elements_follow_torchs_hook() -> None:
    assert ddp_powersgd_elements((100, 50), 2) == 2 * 150  # factors 6x smaller
    assert ddp_powersgd_elements((4, 4), 2) == 16  # factors not 2x smaller: sent whole
    assert ddp_powersgd_elements((10,), 2) == 10  # a vector: 10 x 1, sent whole


def test_steps_to_target_reads_curves_and_user_figures() -> None:
    curve = [[0, 3.0], [50, 2.2], [100, 1.9], [150, 1.7]]
    assert steps_to_target(curve, 2.0) == 100
    assert steps_to_target(curve, 1.0) is None
    assert steps_to_target([[0, 3.0], [50, 1.9], [100, 2.1]], 2.0) is None  # a dip, ends above
    assert steps_to_target([[0, 3.0], [50, 1.9], [100, 2.01]], 2.0) == 50  # within 1%: held
    assert parse_steps("ddp=400, diloco:H16=520") == {"ddp": 400, "diloco:H16": 520}
    for bad in ("ddp", "ddp=0", "ddp=x", "nope=3"):
        with pytest.raises(UserError):
            parse_steps(bad)
    methods = {"ddp": {"curve": curve}, "diloco:H16": {"curve": [[0, 3.0], [80, 1.95]]},
               "local-sgd:H4": {"curve": [[0, 3.0]]}}  # fmt: skip
    target, pilot = read_pilot({"target_loss": 2.0, "methods": methods}, None)
    assert target == 2.0
    assert pilot == {"ddp": Steps(100, PILOT), "diloco:H16": Steps(80, PILOT),
                     "local-sgd:H4": Steps(None, NOT_REACHED)}  # fmt: skip
    with pytest.raises(UserError, match="not 1.5"):  # counted for another target
        read_pilot({"target_loss": 2.0, "methods": {"ddp": {"steps_to_target": 9}}}, 1.5)
    with pytest.raises(UserError, match="target-loss"):
        read_pilot({"methods": {"ddp": {"curve": curve}}}, None)


def _log_curve(pace: float, steps: Sequence[int], noise: float = 0.0) -> list[list[float]]:
    """(step, loss) of a run whose loss at step s is ddp's at pace x s (ddp: 4 - 0.5 ln s)."""
    return [[s, (4.0 - 0.5 * math.log(pace * s)) * (1 + noise * (-1) ** i)]
            for i, s in enumerate(steps)]  # fmt: skip


def test_a_short_pilot_is_forecast_by_each_methods_pace_against_ddps() -> None:
    evals = range(10, 101, 10)  # a 100-step pilot of a 400-step target
    curves = {
        "ddp": _log_curve(1.0, evals),
        "local-sgd:H16": _log_curve(2.0, range(16, 97, 16)),  # twice ddp's pace
        "ddp+fp16": _log_curve(1.05, evals),  # 381 steps
        "ddp+powersgd": _log_curve(0.995, evals),  # 402 steps: ddp's, as far as one can tell
        "cadence-dp": _log_curve(0.5, evals),  # ddp's update: ddp's steps, whatever its noise
        "cadence-dp+sign": _log_curve(0.5, evals),  # half the pace: 800 steps
        "diloco:H64": _log_curve(2.0, [40]),  # nothing in the pilot's second half
    }
    target, steps = forecast(curves, 400)
    assert target is None  # beyond the pilot: only forecast
    assert steps["ddp"] == Steps(400, TARGET_STEPS)
    assert steps["local-sgd:H16"] == Steps(200, FORECAST)
    assert steps["ddp+fp16"] == Steps(381, FORECAST)
    assert steps["ddp+powersgd"] == Steps(400, FORECAST)
    assert steps["cadence-dp"] == Steps(400, AS_DDP)
    # A noisy ddp (its evaluations 2% about its fit): paces within that are not resolved.
    noisy = {**curves, "ddp": _log_curve(1.0, evals, noise=0.02)}
    _, steps = forecast(noisy, 400)
    assert steps["ddp+fp16"] == Steps(None, UNRESOLVED)
    fast = steps["local-sgd:H16"]  # twice the pace: well outside it (the fit moved with it)
    assert fast.source == FORECAST and fast.steps is not None and fast.steps < 250
    assert steps["cadence-dp+sign"] == Steps(None, BEYOND_TARGET)  # not in ddp's samples
    assert steps["diloco:H64"] == Steps(None, PILOT_TOO_SHORT)
    # A pilot that gets to the target's steps is read at ddp's loss there, not forecast.
    target, steps = forecast(curves, 80)
    assert target == pytest.approx(4.0 - 0.5 * math.log(80))
    assert steps["ddp"] == Steps(80, PILOT) and steps["local-sgd:H16"] == Steps(48, PILOT)
    assert steps["cadence-dp+sign"] == Steps(None, NOT_REACHED)
    flat = {"ddp": [[10, 3.0], [60, 2.0], [80, 2.0], [100, 2.1]]}
    with pytest.raises(UserError, match="too short to forecast"):
        forecast(flat, 400)
    with pytest.raises(UserError, match="needs a ddp curve"):
        forecast({"local-sgd:H16": curves["local-sgd:H16"]}, 400)
    pilot = {"methods": {k: {"curve": v} for k, v in curves.items()}}
    assert read_pilot(pilot, None, 400)[1]["local-sgd:H16"] == Steps(200, FORECAST)
    with pytest.raises(UserError, match="not both"):
        read_pilot(pilot, 2.0, 400)
    with pytest.raises(UserError, match="reads curves"):
        read_pilot({"methods": {"ddp": {"steps_to_target": 9}}}, None, 400)


def _est(name: str, step_s: float, wire: float = MB) -> StepEstimate:
    return StepEstimate(name, step_s, wire, "test")


def test_rank_by_steps_times_seconds_and_never_invent_convergence() -> None:
    names = ["ddp", "cadence-dp", "cadence-dp+sign", "diloco:H16", "local-sgd:H4"]
    steps = convergence(names, {"ddp": Steps(100, PILOT), "diloco:H16": Steps(150, PILOT)},
                        {"cadence-dp+sign": 300})  # fmt: skip
    assert steps["cadence-dp"] == Steps(100, AS_DDP)  # DDP's update: DDP's steps
    assert steps["cadence-dp+sign"] == Steps(300, USER)
    assert steps["local-sgd:H4"] == Steps(None, NEEDS_PILOT)
    estimates = [_est("ddp", 1.0), _est("cadence-dp", 0.9), _est("cadence-dp+sign", 0.4),
                 _est("diloco:H16", 0.3), _est("local-sgd:H4", 0.1)]  # fmt: skip
    rows = rank(estimates, steps)
    assert [r.estimate.method for r in rows] == [
        "diloco:H16",
        "cadence-dp",
        "ddp",
        "cadence-dp+sign",
        "local-sgd:H4",
    ]  # 45 s, 90 s, 100 s, 120 s, unknown (though its step is the fastest)
    assert rows[0].seconds == pytest.approx(45.0) and rows[-1].seconds is None
    line = why(rows, 2.0)
    assert line.startswith("pick diloco:H16: 150 steps x 300.0 ms = 45.0 s to loss 2")
    assert "2.22x faster than ddp" in line and "1.50x ddp's steps" in line
    assert line.endswith("not ranked without a pilot: local-sgd:H4")
    assert "\n" not in line
    table = table_lines(rows)
    assert "needs pilot" in table[-1] and table[-1].rstrip().endswith("-")
    assert why(rank([_est("ddp", 1.0)], convergence(["ddp"], {}, {})), 2.0).startswith(
        "no method has steps"
    )
    slow = rank([_est("ddp", 1.0), _est("diloco:H16", 0.5)],
                convergence(["ddp", "diloco:H16"], {}, {"ddp": 10, "diloco:H16": 30}))  # fmt: skip
    assert why(slow, 1.0).startswith("pick ddp:") and "no faster step pays" in why(slow, 1.0)


def test_ddp_stays_the_pick_unless_a_method_beats_it_beyond_the_simulators_error() -> None:
    names = ["ddp", "ddp+fp16", "cadence-dp"]
    steps = convergence(names, {"ddp": Steps(100, PILOT), "ddp+fp16": Steps(100, PILOT)}, {})
    close = rank([_est("ddp", 1.0), _est("ddp+fp16", 0.97), _est("cadence-dp", 0.99)], steps)
    assert [r.estimate.method for r in close] == ["ddp", "ddp+fp16", "cadence-dp"]
    line = why(close, 1.0)
    assert "ddp+fp16 is predicted 3.1% faster, within the simulator's error (5%)" in line
    far = rank([_est("ddp", 1.0), _est("ddp+fp16", 0.9), _est("cadence-dp", 0.99)], steps)
    assert [r.estimate.method for r in far] == ["ddp+fp16", "cadence-dp", "ddp"]
    assert why(far, 1.0).startswith("pick ddp+fp16:")


@pytest.fixture(scope="module")
def cnn_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prof") / "cnn.json"
    zoo_profile("cnn").save(path)
    return path


def _args(profile: Path) -> list[str]:
    return ["plan", "tta", "--model", "cnn", "--profile", str(profile), "--optimizer-step",
            "0.001", "--workers", "2", "--bandwidth", "20mbit"]  # fmt: skip


def test_plan_tta_ranks_from_a_pilot_file(
    cnn_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pilot = tmp_path / "pilot.json"
    curve = [[0, 2.3], [40, 1.0], [80, 0.5]]
    pilot.write_text(json.dumps({"target_loss": 0.6, "global_batch": 64, "methods": {
        "ddp": {"curve": curve}, "cadence-dp+powersgd": {"curve": curve},
        "diloco:H8": {"curve": [[0, 2.3], [40, 0.55]]}, "diloco:H64": {"curve": curve}}}))
    out = tmp_path / "tta.json"
    methods = "ddp,cadence-dp,cadence-dp+powersgd,local-sgd:H4,diloco:H8"
    argv = [*_args(cnn_profile), "--pilot", str(pilot), "--methods", methods]
    assert main([*argv, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    by = {r["method"]: r for r in data["rows"]}  # the methods asked for: not the pilot's H64
    assert set(by) == {"ddp", "cadence-dp", "cadence-dp+powersgd", "local-sgd:H4", "diloco:H8"}
    assert by["ddp"]["steps_to_target"] == 80 and by["diloco:H8"]["steps_to_target"] == 40
    assert by["local-sgd:H4"]["steps_source"] == NEEDS_PILOT
    assert by["local-sgd:H4"]["seconds_to_target"] is None
    ranked = [r["seconds_to_target"] for r in data["rows"] if r["seconds_to_target"] is not None]
    assert ranked == sorted(ranked) and len(ranked) == 4
    assert data["why"].startswith(f"pick {data['rows'][0]['method']}:")
    assert "the pilot ran a global batch" not in capsys.readouterr().out  # 2 x 32 = 64
    argv[argv.index("--workers") + 1] = "4"  # 4 x 32: not the pilot's batch, and said so
    assert main(argv) == 0
    assert "pilot ran a global batch of 64, this prediction is for 128" in capsys.readouterr().out


def test_plan_tta_forecasts_a_short_pilot_to_ddps_steps(
    cnn_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pilot = tmp_path / "short.json"
    curves = {"ddp": _log_curve(1.0, range(10, 101, 10)),
              "local-sgd:H4": _log_curve(1.5, range(12, 101, 12))}  # fmt: skip
    methods = {k: {"curve": v} for k, v in curves.items()}
    pilot.write_text(json.dumps({"steps": 100, "global_batch": 64, "methods": methods}))
    out = tmp_path / "tta.json"
    argv = [*_args(cnn_profile), "--pilot", str(pilot), "--methods", "ddp,local-sgd:H4"]
    assert main([*argv, "--target-steps", "400", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "target: ddp's loss after 400 steps" in printed
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["local-sgd:H4"]["steps_source"] == FORECAST
    assert rows["local-sgd:H4"]["steps_to_target"] == pytest.approx(267, abs=1)
    assert rows["ddp"]["steps_to_target"] == 400
    proc = run_cadence(*argv[:-4], "--target-steps", "400", cwd=tmp_path)
    assert_one_line_error(proc, "--target-steps reads ddp's curve from a pilot")
    proc = run_cadence(*argv, "--target-steps", "400", "--target-loss", "2", cwd=tmp_path)
    assert_one_line_error(proc, "not both")


def test_plan_tta_prices_the_loop_costs_a_file_holds(cnn_profile: Path, tmp_path: Path) -> None:
    costs = tmp_path / "costs.json"
    step_s = {"cadence-dp": 0.010, "cadence-dp+powersgd": 0.015}
    costs.write_text(json.dumps({"model": "cnn", "workers": 2, "batch_size": 64,
                                 "step_s": step_s}))  # fmt: skip
    argv = [*_args(cnn_profile), "--steps-to-target", "ddp=10,cadence-dp+powersgd=10",
            "--target-loss", "1", "--methods", "ddp,cadence-dp+powersgd"]  # fmt: skip
    priced = {}
    for extra in ([], ["--loop-costs", str(costs)]):
        out = tmp_path / f"tta{len(extra)}.json"
        assert main([*argv, *extra, "--json", str(out)]) == 0
        rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
        priced[len(extra)] = rows["cadence-dp+powersgd"]
    assert "5.00 ms measured in the loop" in priced[2]["assumed"]
    assert priced[2]["step_s"] > priced[0]["step_s"] + 0.004  # products alone: far less
    # Profiled beside one neighbour: 2 workers per host, as the probes ran, so a probe's
    # step is a floor (a slow one here: at 20 mbit the simulated step is well under 9 s).
    beside = tmp_path / "beside.json"
    beside.write_text(json.dumps({**json.loads(cnn_profile.read_text()), "neighbours": 1}))
    slow = {"model": "cnn", "workers": 2, "batch_size": 64, "step_s": {**step_s, "ddp": 9.0}}
    costs.write_text(json.dumps(slow))
    out = tmp_path / "floor.json"
    floor_argv = [*argv, "--loop-costs", str(costs), "--json", str(out)]
    floor_argv[floor_argv.index(str(cnn_profile))] = str(beside)
    assert main(floor_argv) == 0
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["ddp"]["step_s"] == 9.0 and "9000.0 ms its loop took" in rows["ddp"]["assumed"]
    other = [*argv, "--workers", "4", "--loop-costs", str(costs)]
    proc = run_cadence(*other, cwd=tmp_path)
    assert_one_line_error(proc, "not cnn on 4 at 128")


def test_plan_tta_refuses_in_one_line(cnn_profile: Path, tmp_path: Path) -> None:
    proc = run_cadence(*_args(cnn_profile), cwd=tmp_path)
    assert_one_line_error(proc, "needs convergence data")
    proc = run_cadence(*_args(cnn_profile), "--steps-to-target", "ddp=10", cwd=tmp_path)
    assert_one_line_error(proc, "--target-loss")
    proc = run_cadence(*_args(cnn_profile), "--steps-to-target", "ddp=10", "--target-loss", "1",
                       "--methods", "ddp,warp", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(proc, "unknown method 'warp'")
