"""`--strategy torchft-diloco`: torchft's DiLoCo as a peer, refused in one line where it cannot
run as asked, and trained by cadence's loop where torchft is installed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from cadence.config import TrainConfig
from cadence.errors import UserError
from tests.cli_helpers import run_cadence

HAVE_TORCHFT = importlib.util.find_spec("torchft") is not None


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        ({"outer_dtype": "bf16"}, "--outer-dtype is cadence's own"),
        ({"resume": "runs/x"}, "--resume is not supported with torchft-diloco"),
    ],
)
def test_settings_torchft_does_not_take_are_refused(keys: dict, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        TrainConfig.from_flat(strategy="torchft-diloco", **keys)
    config = TrainConfig.from_flat(strategy="torchft-diloco", sync_every=8, outer_lr=0.5)
    assert (config.localsgd.sync_every, config.localsgd.outer_lr) == (8, 0.5)


def test_without_torchft_the_strategy_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from cadence.localsgd.config import LocalSGDConfig
    from cadence.localsgd.torchft_peer import wrap

    monkeypatch.setitem(sys.modules, "torchft", None)  # import torchft raises ImportError
    model = torch.nn.Linear(2, 2)
    with pytest.raises(UserError, match=r"pip install torchft"):
        wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), LocalSGDConfig(sync_every=4))


@pytest.mark.skipif(not HAVE_TORCHFT, reason="torchft is not installed (pip install torchft)")
def test_fragments_torchft_cannot_stream_are_refused_before_anything_starts() -> None:
    import torch

    from cadence.localsgd.config import LocalSGDConfig
    from cadence.localsgd.torchft_peer import wrap

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for config in (LocalSGDConfig(sync_every=8, fragments=3),  # 3 does not divide 8
                   LocalSGDConfig(sync_every=8, fragments=4, overlap_steps=2)):  # fmt: skip
        with pytest.raises(UserError, match="streams .* fragments only with"):
            wrap(model, optimizer, config)


@pytest.mark.skipif(not HAVE_TORCHFT, reason="torchft is not installed (pip install torchft)")
@pytest.mark.parametrize("fragments", [1, 2])
def test_torchft_diloco_trains_in_cadences_loop_and_counts_its_syncs(
    tmp_path: Path, fragments: int
) -> None:
    out = tmp_path / "m.json"
    proc = run_cadence(
        "train", "--model", "mlp", "--strategy", "torchft-diloco", "--workers", "2",
        "--steps", "16", "--sync-every", "4", "--fragments", str(fragments),
        "--batch-size", "32", "--json", str(out), cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "flight recorder" not in proc.stderr and "[INFO]" not in proc.stderr
    metrics = json.loads(out.read_text())
    params = metrics["num_parameters"] * 4
    # 16 steps: the whole model every 4, or each of two fragments every 4, staggered by 2.
    assert metrics["wire_bytes_total"] == 4 * params
