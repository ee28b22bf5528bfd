"""cadence.data_parallel equals torch DDP after 12 steps: same seed and data, SGD with momentum
and Adam, thresholds at both extremes, on a model with BatchNorm, an unused parameter and a
weight shared between two layers. World size 2: the parity matrix (tests/parity/test_dp.py)
runs the default, many-chunk and reordered plans at 4."""

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from cadence.dp import DPConfig, data_parallel
from cadence.dp.runtime import SyncEngine
from cadence.testing import run_ranks
from tests.dist.dp_helpers import parameter_copies, rank_batches, train_classifier

STEPS = 12  # enough for momentum and Adam moments to build up
CPU = torch.device("cpu")
GLOBAL_BATCH = 16
THRESHOLDS = [64, 1 << 30]  # split into many 16-float chunks; fuse everything into one


class TrickyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # No bias before BatchNorm: its true gradient is exactly zero, so Adam would amplify
        # rounding noise whose sign depends on summation order, in DDP and cadence alike.
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 16)
        self.mix = nn.Linear(16, 16)
        self.mix2 = nn.Linear(16, 16, bias=False)
        self.mix2.weight = self.mix.weight  # shared between two layers
        self.unused = nn.Linear(3, 3)  # never called: gets no gradient
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2).flatten(1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = torch.tanh(self.mix(x))
        x = torch.tanh(self.mix2(x))
        return self.head(x)


def _make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.Adam(params, lr=3e-3)


def _batches(rank: int, world_size: int, device: torch.device):
    for x, y in rank_batches(rank, world_size, STEPS, GLOBAL_BATCH, (1, 8, 8), seed=1234):
        yield x.to(device), y.to(device)


def _train_ddp(rank, world_size, optimizer_name, device=CPU):
    torch.manual_seed(0)
    model = TrickyNet().to(device)
    ids = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids, find_unused_parameters=True)
    opt = _make_optimizer(optimizer_name, ddp.parameters())
    train_classifier(ddp, opt, _batches(rank, world_size, device))
    return parameter_copies(model)


def _train_cadence(rank, world_size, optimizer_name, threshold, reorder_k=None, device=CPU):
    torch.manual_seed(rank)  # deliberately different: data_parallel must broadcast rank 0's start
    if rank == 0:
        torch.manual_seed(0)
    model: nn.Module = TrickyNet().to(device)
    model, opt = data_parallel(
        model,
        _make_optimizer(optimizer_name, model.parameters()),
        DPConfig(threshold_bytes=threshold, credit_bytes=2 * threshold, reorder_k=reorder_k),
    )
    train_classifier(model, opt, _batches(rank, world_size, device))
    engine = cast(SyncEngine, model._cadence_dp_engine)
    chunks: int | tuple[int, ...] = len(engine.plan.chunks)
    if reorder_k is not None:  # report what was really deferred, so the test can check it ran
        chunks = engine.reorder.deferred_layers if engine.reorder else ()
    return parameter_copies(model), chunks


def compare_all(rank, world_size, device=CPU):
    """DDP and cadence-dp with each optimizer and threshold on `device`, this rank's results."""
    results = []
    for optimizer_name in ("sgd", "adam"):
        reference = _train_ddp(rank, world_size, optimizer_name, device)
        for threshold in THRESHOLDS:
            got, chunks = _train_cadence(
                rank, world_size, optimizer_name, threshold, device=device
            )
            results.append((optimizer_name, threshold, chunks, reference, got))
    return results


def assert_equal_to_ddp(per_rank) -> None:
    """What `compare_all` returned on every rank: cadence-dp ended where DDP did."""
    for rank_results in per_rank:
        assert len(rank_results) == 4
        for optimizer_name, threshold, chunks, reference, got in rank_results:
            if threshold == THRESHOLDS[0]:
                assert chunks > 50  # the small threshold really split the gradients
            else:
                assert chunks == 1  # the large one fused them all
            assert reference.keys() == got.keys()
            for name in reference:
                torch.testing.assert_close(
                    got[name],
                    reference[name],
                    rtol=1e-4,
                    atol=1e-5,
                    msg=lambda m, n=name, o=optimizer_name, t=threshold: f"{n} {o} {t}: {m}",  # type: ignore[misc]
                )
    # All ranks hold the same parameters.
    for name, value in per_rank[0][0][4].items():
        torch.testing.assert_close(per_rank[-1][0][4][name], value)


def test_cadence_dp_equals_ddp():
    assert_equal_to_ddp(run_ranks(compare_all, 2, timeout=240))


REORDER_KS = [1, 3, 6]


def _compare_reordered(rank, world_size):
    reference = _train_ddp(rank, world_size, "adam")
    # Every K with many chunks; K=3 also with one chunk, which the main thread synchronises
    # at the backward's end, after the deferred weight gradients.
    cases = [(k, THRESHOLDS[0]) for k in REORDER_KS] + [(3, THRESHOLDS[1])]
    return [
        (k, *_train_cadence(rank, world_size, "adam", threshold, reorder_k=k))
        for k, threshold in cases
    ], reference


def test_backward_reordering_at_several_k_equals_ddp():
    per_rank = run_ranks(_compare_reordered, 2, timeout=240)
    for results, reference in per_rank:
        for k, got, deferred in results:
            # conv, fc1, fc2, unused and head are deferred; mix/mix2 share a weight and are not.
            assert deferred == (0, 2, 3, 6, 7), (k, deferred)
            for name in reference:
                torch.testing.assert_close(
                    got[name],
                    reference[name],
                    rtol=1e-4,
                    atol=1e-5,
                    msg=lambda m, n=name, k=k: f"{n} K={k}: {m}",  # type: ignore[misc]
                )
