"""`cadence bench collectives`' accuracy summary (gloo's rows only, the 10% count, the worst),
its link models, and the size of the drain before each timed block."""

from __future__ import annotations

from cadence.bench.collectives import (
    BenchRow,
    CollectivesBenchConfig,
    accuracy,
    accuracy_line,
    link_kind,
)
from cadence.bench.collectives_fit import link_models
from cadence.comm.cost import AlphaBeta
from cadence.netem._bandwidth import FRAME_BUCKET_BYTES, tbf_burst_bytes


def row(collective: str, implementation: str, nbytes: int, ratio: float) -> BenchRow:
    return BenchRow(
        collective=collective, implementation=implementation,
        algorithm="gloo" if implementation == "gloo" else "ring", nbytes=nbytes,
        measured_s=ratio * 1e-3, predicted_s=1e-3, bound_s=1e-4, measured_over_predicted=ratio,
    )  # fmt: skip


def test_counts_gloo_rows_within_ten_percent_and_names_the_worst() -> None:
    rows = [
        row("all_reduce", "gloo", 1024, 0.96),
        row("all_reduce", "gloo", 4096, 0.80),
        row("all_gather", "gloo", 64 << 20, 1.54),
        row("broadcast", "gloo", 1 << 20, 1.10),  # on the line: counts as within
        row("all_reduce", "cadence", 1024, 3.0),  # cadence's own rows do not count
    ]
    summary = accuracy(rows)
    assert summary["rows"] == 4 and summary["rows_within"] == 2
    assert summary["worst"] == {
        "collective": "all_gather", "nbytes": 64 << 20, "measured_over_predicted": 1.54,
    }  # fmt: skip
    assert accuracy_line(summary) == (
        "gloo within 10% of the prediction: 2 of 4 rows; worst all_gather 64MB at 1.54x"
    )


def test_no_gloo_rows() -> None:
    summary = accuracy([row("all_reduce", "cadence", 1024, 1.0)])
    assert summary["rows"] == 0 and summary["worst"] is None
    assert accuracy_line(summary) == "gloo within 10% of the prediction: 0 of 0 rows"


def test_the_link_model_follows_the_bucket_and_both_are_fitted() -> None:
    assert link_kind(CollectivesBenchConfig()) == "token-bucket"
    assert link_kind(CollectivesBenchConfig(frame_bucket=True)) == "serialising"
    truth = AlphaBeta(0.2e-3, 20e-9, overlap=True)  # a tbf link's all-reduces, 2 ranks
    sizes = [1024 * 4**i for i in range(9)]
    seconds = [truth.time("allreduce", "ring", n, 2) for n in sizes]
    models = link_models(sizes, seconds, 2)
    assert models["token-bucket"] == truth
    # The links' bucket rides along as the token-bucket model's burst, and only there.
    bucketed = link_models(sizes, seconds, 2, bucket_bytes=250_000)
    assert bucketed["token-bucket"].burst_bytes == 250_000
    assert bucketed["serialising"].burst_bytes == 0
    serial = models["serialising"]
    assert not serial.overlap
    # Where latency and bytes are alike (16 KB here), only the token-bucket model fits.
    t16k = truth.time("allreduce", "ring", 16 << 10, 2)
    assert abs(serial.time("allreduce", "ring", 16 << 10, 2) / t16k - 1) > 0.3


def test_sizes_of_one_regime_leave_only_the_serialising_model() -> None:
    latency_bound = link_models([1024, 4096], [4e-4, 4e-4], 2)
    assert set(latency_bound) == {"serialising"}


def test_drain_is_twice_the_bucket_the_cluster_gives_the_links() -> None:
    config = CollectivesBenchConfig(bandwidth_bps=400e6)
    assert config.drain_bytes() == 2 * tbf_burst_bytes(400e6) == 500_000
    framed = CollectivesBenchConfig(bandwidth_bps=400e6, frame_bucket=True)
    assert framed.drain_bytes() == 2 * FRAME_BUCKET_BYTES
    assert CollectivesBenchConfig(drain_bucket=False).drain_bytes() == 0


def test_config_reads_back_from_the_json_the_worker_gets() -> None:
    import json
    from dataclasses import asdict

    config = CollectivesBenchConfig(sizes=(1024, 4096), bandwidth_bps=400e6, hosts=4)
    raw = json.loads(json.dumps(asdict(config)))
    assert CollectivesBenchConfig.from_json_dict(raw) == config
    assert config.bucket_bytes() == tbf_burst_bytes(400e6)
    assert config.drain_bytes() == 2 * config.bucket_bytes()
