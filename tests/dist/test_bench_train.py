"""A benchmark's training run keeps its metrics and logs but not its checkpoint."""

from cadence.bench._train import train_for_bench
from cadence.config import TrainConfig


def test_checkpoint_is_dropped_and_metrics_kept(tmp_path):
    metrics = train_for_bench(
        TrainConfig.from_flat(
            model="cnn", workers=1, steps=2, out=str(tmp_path), eval_every_epoch=False
        )
    )
    assert metrics["steps"] == 2
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (run_dir / "metrics.json").exists()
    assert not (run_dir / "checkpoint.pt").exists()
