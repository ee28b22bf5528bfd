"""`cadence bench soak`: growth rows and the table from rank records, and bad input as one
line. The real run is `tests/dist/test_bench_soak.py` (short) and the benchmark itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cadence.bench.soak import _process_rows, plot, table_lines
from tests.cli_helpers import assert_one_line_error, run_cadence


def _sample(step: int, rss_mib: float, threads: int, fds: int, sockets: int,
            children: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"step": step, "rss_bytes": int(rss_mib * 2**20), "threads": threads, "fds": fds,
            "sockets": sockets, "children": children or {}}  # fmt: skip


def _server(rss_mib: float, fds: int) -> dict[str, Any]:
    return {"command": "-m cadence.ps.server", "rss_bytes": int(rss_mib * 2**20),
            "threads": 3, "fds": fds, "sockets": 2}  # fmt: skip


def test_rows_say_how_much_each_process_grew() -> None:
    start = _sample(100, 100.0, 10, 30, 8, {"41": _server(30.0, 20)})
    end = _sample(2000, 104.0, 10, 31, 8, {"41": _server(30.0, 20), "77": _server(5.0, 4)})
    records: list[dict[str, Any]] = [
        {"rank": 0, "start": start, "end": end, "series": [start, end]},
        {"rank": 1, "start": None, "end": None, "series": []},  # stopped before its start step
    ]
    rows = _process_rows("ps", records)
    assert [r["process"] for r in rows] == [
        "rank 0", "rank 0: cadence.ps.server", "rank 0: new cadence.ps.server",
    ]  # fmt: skip
    rank0, server, late = rows
    assert abs(rank0["rss_growth"] - 0.04) < 1e-9
    assert (rank0["threads_delta"], rank0["fds_delta"], rank0["sockets_delta"]) == (0, 1, 0)
    assert not rank0["flat"]  # one descriptor more
    assert server["flat"] and server["rss_growth"] == 0.0
    assert not late["flat"]  # a process that was not there at the start
    lines = table_lines(rows)
    assert "| ps | rank 0 | 100-2000 | 100.0 MiB | 104.0 MiB | +4.00% | 10 (+0) | 30 (+1) " \
        "| 8 (+0) | NO |" in lines


def test_flat_needs_memory_under_the_limit() -> None:
    start = _sample(100, 100.0, 10, 30, 8)
    grown = _sample(2000, 105.5, 10, 30, 8)
    (row,) = _process_rows("zero", [{"rank": 0, "start": start, "end": grown, "series": []}])
    assert not row["flat"]
    (row,) = _process_rows("zero", [{"rank": 0, "start": start, "end": start, "series": []}])
    assert row["flat"]


def test_plot(tmp_path: Path) -> None:
    series = [{"strategy": "zero", "process": "rank 0", "steps": [1, 2], "rss_mib": [1.0, 1.1],
               "threads": [3, 3], "fds": [9, 9]}]  # fmt: skip
    plot(series, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 0


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    proc = run_cadence("bench", "soak", "--strategies", "cadence-dp,nope", cwd=tmp_path)
    assert_one_line_error(proc, "nope")
    proc = run_cadence("bench", "soak", "--steps", "50", "--start-step", "50", cwd=tmp_path)
    assert_one_line_error(proc, "--start-step")
