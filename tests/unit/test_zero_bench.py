"""`cadence bench zero`'s pure parts: job names, interface counters, ratios and targets."""

import socket

import pytest

from cadence.errors import UserError
from cadence.netem.counters import read_iface_bytes
from cadence.zero.bench import ALL_JOBS, job_spec, payload_bytes
from cadence.zero.bench_report import table_lines, targets
from cadence.zero.bench_worker import JobSpec

BASE = JobSpec(name="", kind="ddp", model="mlp", steps=20, window_start=6, freeze_steps=4)


def test_a_job_cadence_zero_would_refuse_fails_at_its_name():
    # bf16 gathers with every block replicated: no gathers left to make bf16.
    with pytest.raises(UserError, match="replicated_update needs .* fp32 parameters"):
        job_spec("zero2-onebit-bf16-replicated", BASE)


def test_job_names_map_to_specs():
    assert job_spec("fsdp2", BASE).kind == "fsdp2"
    ds = job_spec("deepspeed-zero2", BASE)
    assert (ds.kind, ds.stage) == ("deepspeed", 2)
    z = job_spec("zero2-onebit-bf16-overlap", BASE)
    assert (z.kind, z.stage, z.compression, z.gather_dtype, z.overlap_gather) == (
        "zero", 2, "onebit", "bf16", True,
    )  # fmt: skip
    assert job_spec("zero3-none", BASE).gather_dtype == "fp32"
    assert z.forward_gather_share == 1 / 3  # the default: front blocks gathered in forward order
    assert job_spec("zero1-onebit-overlap-backorder", BASE).forward_gather_share == 0.0
    assert job_spec("zero2-onebit-overlap-fwdorder", BASE).forward_gather_share == 1.0
    assert job_spec("zero2-onebit-overlap-front55", BASE).forward_gather_share == 0.55
    assert z.gather_lane and not job_spec("zero1-onebit-onelane", BASE).gather_lane
    assert job_spec("zero2-onebit-replicated", BASE).replicated_update
    assert job_spec("zero2-onebit-replicated", BASE).replicated_share == 1.0
    part = job_spec("zero1-onebit-overlap-replicated55", BASE)
    assert part.replicated_update and part.replicated_share == 0.55 and part.overlap_gather
    assert not z.replicated_update
    assert all(job_spec(name, BASE).name == name for name in ALL_JOBS)


@pytest.mark.parametrize(
    "bad",
    ["zero4-none", "zero1-gzip", "zero1-none-bf16-bf16", "ddp2", "zero1-onebit-backorder-fwdorder",
     "zero2-onebit-front55-fwdorder", "zero2-onebit-front101", "zero2-onebit-front",
     "zero2-onebit-replicated101", "zero2-onebit-replicated-replicated50"],
)
def test_unknown_job_is_a_user_error(bad):
    with pytest.raises(UserError, match="unknown zero bench job"):
        job_spec(bad, BASE)


def test_payload_halves_the_gather_with_bf16_and_peers_are_not_modelled():
    fp32 = payload_bytes(job_spec("zero1-onebit", BASE), 2)
    bf16 = payload_bytes(job_spec("zero1-onebit-bf16", BASE), 2)
    assert fp32 is not None and bf16 is not None and bf16 < fp32
    assert payload_bytes(job_spec("fsdp2", BASE), 2) is None
    # Replicated updates gather no parameters: only the 1-bit momentum is left.
    replicated = payload_bytes(job_spec("zero1-onebit-replicated", BASE), 2)
    assert replicated is not None and 0 < replicated < bf16 / 8
    part = payload_bytes(job_spec("zero1-onebit-replicated50", BASE), 2)
    assert part is not None and replicated < part < fp32
    ddp = payload_bytes(job_spec("ddp", BASE), 2)
    from cadence.models import get_model_spec

    params = sum(p.numel() for p in get_model_spec("mlp").build().parameters())
    assert ddp == 4 * params  # ring all-reduce at p = 2: 2 (p-1)/p of fp32 gradients


def test_interface_counters_see_real_traffic_on_loopback():
    rx0, tx0 = read_iface_bytes("lo")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx_sock:
        rx_sock.bind(("127.0.0.1", 0))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx_sock:
            tx_sock.sendto(b"x" * 50_000, rx_sock.getsockname())
        rx_sock.recv(65536)
    rx1, tx1 = read_iface_bytes("lo")
    assert tx1 - tx0 >= 50_000 and rx1 - rx0 >= 50_000
    with pytest.raises(RuntimeError, match="no interface"):
        read_iface_bytes("nosuchif0")


def _row(job, seconds, tx, losses):
    return {"job": job, "median_iteration_s": seconds, "iface_tx_bytes_per_step_per_rank": tx,
            "iface_rx_bytes_per_step_per_rank": tx,
            "payload_bytes_per_step_per_rank": None, "iface_wire_s": tx * 8 / 2e8,
            "step_loss": losses, "final_train_loss": losses[-1]}  # fmt: skip


def test_targets_compare_onebit_with_ddp_time_and_its_stage_bytes():
    rows = [
        _row("ddp", 2.0, 60e6, [3.0, 2.0, 1.5]),
        _row("zero1-none", 2.2, 90e6, [3.0, 2.0, 1.4]),
        _row("zero1-onebit", 1.1, 40e6, [3.0, 2.1, 1.6]),
        _row("zero2-onebit", 1.3, 20e6, [3.0, 2.0, 1.6]),
    ]
    summary = {"rows": rows, "freeze_steps": 2, "skipped": {"fsdp2": "why"}, "model": "m",
               "bandwidth": "200mbit", "workers": 2, "batch_size": 64, "steps": 3,
               "timed_steps": 1}  # fmt: skip
    checks = {c["target"]: c for c in targets(summary)}
    summary["targets"] = list(checks.values())
    assert checks["zero1-onebit time <= 0.6x DDP+Adam"]["value"] == pytest.approx(0.55)
    assert checks["zero1-onebit time <= 0.6x DDP+Adam"]["met"]
    assert not checks["zero2-onebit time <= 0.6x DDP+Adam"]["met"]  # 0.65
    byte_check = checks["zero1-onebit iface bytes <= 0.55x zero1-none"]
    assert byte_check["value"] == pytest.approx(40 / 90) and byte_check["met"]
    assert not any("zero2-onebit iface" in t for t in checks)  # no zero2-none to compare with
    assert rows[2]["loss_max_abs_diff_vs_ddp_first_steps"] == pytest.approx(0.1)
    text = "\n".join(table_lines(summary))
    assert "fsdp2: skipped (why)" in text and "MISSED" in text and "| zero1-onebit |" in text
    # Stage 3 is reported, not checked; other caps than 200mbit are reported, not checked.
    rows.append(_row("zero3-onebit", 1.0, 20e6, [3.0, 2.0, 1.6]))
    rows.append(_row("zero3-none", 1.0, 60e6, [3.0, 2.0, 1.6]))
    assert not any(c["target"].startswith("zero3") for c in targets(summary))
    assert rows[-2]["iface_bytes_vs_uncompressed"] == pytest.approx(1 / 3)
    assert targets({**summary, "bandwidth": "1gbit"}) == []


def test_rounds_merge_into_medians_with_paired_ratios_by_round():
    from cadence.zero.bench import _merge_rounds

    ddp = _merge_rounds([_row("ddp", s, 60e6, [3.0, 2.0]) for s in (2.0, 2.4, 1.8)])
    zero = _merge_rounds(
        [
            _row("zero2-onebit", s, tx, [3.0, 2.0])
            for s, tx in ((1.0, 20e6), (1.5, 24e6), (1.2, 22e6))
        ]
    )
    assert ddp["median_iteration_s"] == 2.0 and zero["median_iteration_s"] == 1.2
    assert zero["round_iteration_s"] == [1.0, 1.5, 1.2]
    assert zero["iface_tx_bytes_per_step_per_rank"] == pytest.approx(22e6)
    summary = {"rows": [ddp, zero], "freeze_steps": 1, "skipped": {}, "model": "m",
               "bandwidth": "200mbit", "workers": 2, "batch_size": 16, "steps": 3,
               "timed_steps": 1, "repeats": 3}  # fmt: skip
    summary["targets"] = targets(summary)
    assert zero["vs_ddp"] == pytest.approx(0.6)  # median over median, not a mean of ratios
    assert zero["round_vs_ddp"] == pytest.approx([0.5, 1.5 / 2.4, 1.2 / 1.8])
    text = "\n".join(table_lines(summary))
    assert "median of 3 rounds in alternating order" in text
    assert "| 0.50 / 0.62 / 0.67 |" in text and text.count("| --- ") == 9


def test_zero_bench_refuses_zero_repeats():
    from pathlib import Path

    from cadence.zero.bench import run_bench

    with pytest.raises(UserError, match="--repeats must be at least 1"):
        run_bench("mlp", "200mbit", 30, 8, 2, Path("unused"), repeats=0)


def test_each_zero_job_is_simulated_as_its_config_runs_it():
    from cadence.zero.bench_predict import sim_plan

    plan = sim_plan(job_spec("zero2-onebit-overlap-replicated30-front55-onelane", BASE))
    assert (plan.stage, plan.compression, plan.gather_bytes_per_param) == (2, "onebit", 4)
    assert plan.overlap_gather and plan.replicated_update and not plan.gather_lane
    assert (plan.replicated_share, plan.forward_gather_share) == (0.3, 0.55)
    assert sim_plan(job_spec("zero1-onebit-bf16", BASE)).gather_bytes_per_param == 2
    plain = sim_plan(job_spec("zero3-none", BASE))
    assert (plain.stage, plain.compression, plain.gather_bytes_per_param) == (3, "none", 4)
    assert not (plain.overlap_gather or plain.replicated_update)


def test_rows_get_the_simulators_prediction_where_a_job_has_an_adapter(tmp_path):
    from cadence.zero.bench_predict import attach_predictions, predict_jobs
    from tests.unit.test_sim_cli import zoo_profile

    profile = tmp_path / "profile.json"
    zoo_profile("mlp").save(profile)
    names = ["ddp", "zero2-none", "zero2-onebit", "fsdp2"]
    rows = [_row(name, 0.5, 1e6, [3.0, 2.0]) for name in names]
    predicted = predict_jobs([job_spec(name, BASE) for name in names], profile, 2, "10mbit")
    attach_predictions(rows, predicted)
    ddp, plain, onebit, fsdp2 = rows
    assert fsdp2["predicted_iteration_s"] is None and fsdp2["prediction_error"] is None
    for r in (ddp, plain, onebit):
        assert r["prediction_error"] == pytest.approx(r["predicted_iteration_s"] / 0.5 - 1)
    # On a 10 Mbit link the wire decides: 1-bit momentum ahead of fp32 gradients.
    assert onebit["predicted_iteration_s"] < plain["predicted_iteration_s"]
    assert onebit["predicted_iteration_s"] < ddp["predicted_iteration_s"]
    summary = {"rows": rows, "freeze_steps": 1, "skipped": {}, "model": "mlp",
               "bandwidth": "10mbit", "workers": 2, "batch_size": 16, "steps": 3,
               "timed_steps": 1}  # fmt: skip
    summary["targets"] = targets(summary)
    text = "\n".join(table_lines(summary))
    assert "| predicted (error) |" in text and text.count("| --- ") == 9
    assert f"({onebit['prediction_error'] * 100:+.0f}%)" in text
    assert "| fsdp2 | 0.500 s | - |" in text
