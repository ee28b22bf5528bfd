"""cadence-dp's default plan: the first iterations run one chunk on the main thread, the last of
them timed; the model stays one chunk where that all-reduce is cheap, else gets the chunked
plan. Either way the parameters equal torch DDP's after 20 steps, at world sizes 2 and 4, and
every rank ends with the same plan."""

from typing import cast

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from cadence.dp import DPConfig, data_parallel
from cadence.dp.runtime import SyncEngine
from cadence.testing import run_ranks
from tests.dist.dp_helpers import parameter_copies, rank_batches, train_classifier

STEPS = 20
GLOBAL_BATCH = 16
WIDTH = 512  # 3 x 512 x 512 weights: 3 MB of gradients, several chunks at the default threshold


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
        nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10),
    )  # fmt: skip


def _batches(rank: int, world_size: int):
    return rank_batches(rank, world_size, STEPS, GLOBAL_BATCH, (WIDTH,), seed=7)


def _train_ddp(rank, world_size):
    model = _model()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    train_classifier(ddp, opt, _batches(rank, world_size))
    return parameter_copies(model)


def _train_cadence(rank, world_size, config):
    plain = _model()
    model, opt = data_parallel(plain, torch.optim.Adam(plain.parameters(), lr=1e-3), config)
    train_classifier(model, opt, _batches(rank, world_size))
    engine = cast(SyncEngine, model._cadence_dp_engine)
    params = parameter_copies(plain)
    return params, len(engine.plan.chunks), engine.one_chunk_probe, engine.threshold_bytes


CASES = {
    # Any all-reduce is under 99% of an iteration that contains it: stays one chunk.
    "cheap": DPConfig(one_chunk_wire_share=0.99),
    # No all-reduce is under a millionth of it: the chunked plan after the probe.
    "dear": DPConfig(one_chunk_wire_share=1e-6),
    "rule off": DPConfig(one_chunk_wire_share=0.0),
    "threshold given": DPConfig(threshold_bytes=1 << 20, one_chunk_wire_share=0.99),
}


def _run(rank, world_size):
    reference = _train_ddp(rank, world_size)
    return reference, {name: _train_cadence(rank, world_size, c) for name, c in CASES.items()}


@pytest.mark.parametrize("world_size", [2, 4])
def test_default_plan_choice_keeps_ddp_parity(world_size):
    per_rank = run_ranks(_run, world_size, timeout=240)
    gradient_bytes = sum(p.numel() * 4 for p in _model().parameters())
    for reference, results in per_rank:
        params, chunks, probe, threshold = results["cheap"]
        assert chunks == 1 and probe is not None and probe["one_chunk"]
        assert 0 < probe["wire_s"] < probe["iteration_s"]
        assert threshold == gradient_bytes
        params, chunks, probe, _ = results["dear"]
        assert chunks > 1 and probe is not None and not probe["one_chunk"]
        for name in ("rule off", "threshold given"):
            _, chunks, probe, _ = results[name]
            assert chunks > 1 and probe is None  # nothing probed: the plan from the start
        for name, (params, *_) in results.items():
            for key in reference:
                torch.testing.assert_close(
                    params[key], reference[key], rtol=1e-4, atol=1e-5,
                    msg=lambda m, c=name, k=key: f"{c} {k}: {m}",  # type: ignore[misc]
                )  # fmt: skip
    # Every rank read rank 0's timings: the same figures and the same plans.
    probes = [results["dear"][2] for _, results in per_rank]
    assert all(p == probes[0] for p in probes)
