"""cadence-dp and `cadence train` on CUDA tensors (skipped where no GPU is visible).

With fewer GPUs than ranks, the ranks share them over gloo (NCCL needs a GPU per rank), so a
one-GPU machine still runs the whole multi-rank path: gradient hooks firing while kernels are
queued, the communication thread's all-reduces and per-layer updates on CUDA tensors, and the
next forward's waits.
"""

import json

import pytest
import torch

from cadence.testing import run_ranks
from tests.cli_helpers import run_cadence
from tests.dist.test_dp_parity import assert_equal_to_ddp, compare_all

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _compare_on_cuda(rank, world_size):
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    # Exact float32 arithmetic on both sides: TF32 convolutions would differ in the 3rd digit.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    return compare_all(rank, world_size, device)


@pytest.mark.parametrize("world_size", [2, 4])
def test_cadence_dp_equals_ddp_on_cuda(world_size):
    assert_equal_to_ddp(run_ranks(_compare_on_cuda, world_size, timeout=240))


@pytest.mark.parametrize("strategy", ["ddp", "cadence-dp"])
def test_train_on_cuda(tmp_path, strategy):
    proc = run_cadence(
        "train", "--model", "mlp", "--steps", "40", "--strategy", strategy, "--device", "cuda",
        "--json", "summary.json", cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "summary.json").read_text())
    assert metrics["device"].startswith("cuda:")
    assert metrics["world_size"] == 2
    assert metrics["step_loss"][-1] < metrics["step_loss"][0]
    assert metrics["final_test_accuracy"] > 0.5
    if torch.cuda.device_count() < 2:
        assert "share 1 GPU(s) over gloo" in proc.stderr
