"""`cadence bench zero` end to end on a tiny model: the same outputs as every benchmark (JSON at
--out, the PNG next to it, a table), and one value where it measures one model and one cap."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_helpers import assert_one_line_error, run_cadence
from tests.conftest import needs_netem


@needs_netem
def test_tiny_run_writes_json_png_and_table(tmp_path: Path) -> None:
    proc = run_cadence(
        "bench", "zero", "--models", "mlp", "--caps", "1gbit", "--steps", "20",
        "--freeze-steps", "8", "--jobs", "ddp,zero1-none", "--out", "out/z.json",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "out" / "z.json").read_text())
    assert summary["command"].startswith("cadence bench zero")
    assert [r["job"] for r in summary["rows"]] == ["ddp", "zero1-none"]
    assert all(r["median_iteration_s"] > 0 for r in summary["rows"])
    assert (tmp_path / "out" / "z.png").read_bytes().startswith(b"\x89PNG")
    assert "| zero1-none |" in proc.stdout


def test_several_models_are_one_line(tmp_path: Path) -> None:
    proc = run_cadence("bench", "zero", "--models", "mlp,cnn", cwd=tmp_path, timeout=60)
    assert_one_line_error(proc, "--models takes one value")
