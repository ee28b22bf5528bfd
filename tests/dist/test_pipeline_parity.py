"""Pipeline training at 2 and 4 stages, and hybrid 2 replicas x 2 stages, equals
single-process training on the full batch.

Each rank runs every schedule in turn (GPipe and 1F1B from our action lists on torch's runtime
and on ours, torch's own ScheduleGPipe / Schedule1F1B, kFkB with K = 2 (K = 2 with
recomputation at M = 8), and M = 1 model parallel); after several SGD steps
its stage's parameters and the last stage's losses must match one process training the whole
model on the whole batch, with the same seed and data.
"""

from typing import Any

import pytest
import torch

from cadence.errors import UserError
from cadence.models import get_model_spec, loss_fn
from cadence.pipeline import even_split, model_parallel, peak_in_flight, pipeline
from cadence.testing import run_ranks
from tests.dist.pipeline_helpers import batches, build, reference, sgd

STEPS = 3
# (schedule, backend, recompute, micro-batches); "mp" is model_parallel (one micro-batch).
CASES = [
    ("gpipe", "torch", False, 4),
    ("1f1b", "torch", False, 4),
    ("gpipe", "torch-builtin", False, 4),
    ("1f1b", "torch-builtin", False, 4),
    ("gpipe", "cadence", False, 4),
    ("1f1b", "cadence", False, 4),
    ("kfkb:2", "cadence", False, 4),
    ("kfkb:2", "cadence", True, 8),
    ("mp", "torch", False, 1),
]


def _train_all(rank: int, world: int, model_name: str) -> dict[str, Any]:
    out = {}
    for schedule, backend, recompute, mbs in CASES:
        model = build(model_name)
        if schedule == "mp":
            ex = model_parallel(model, loss_fn)
        else:
            ex = pipeline(model, loss_fn, schedule, mbs, recompute=recompute, backend=backend)
        assert ex.backend == backend
        opt = sgd(ex.module.parameters())
        losses = []
        for x, y in batches(model_name, STEPS):
            opt.zero_grad()
            loss = ex.step(x if rank == 0 else None, y if rank == world - 1 else None)
            opt.step()
            losses.append(None if loss is None else loss.item())
        names = set(ex.module.state_dict())
        params = {k: v.clone() for k, v in model.state_dict().items() if k in names}
        out[f"{schedule}/{backend}/{recompute}"] = (losses, params)
        if backend == "cadence":  # the memory model predicts what the executor held
            assert ex.peak_held == peak_in_flight(ex.schedule)[rank], (schedule, rank)
    return out


def _check_hybrid(results: list[Any], ref_losses: list[float], ref_params: Any) -> None:
    for schedule, _ in HYBRID:
        covered = set()
        for rank, result in enumerate(results):
            losses, params = result[schedule]
            for key, value in params.items():  # both replicas hold the reference parameters
                torch.testing.assert_close(
                    value,
                    ref_params[key],
                    rtol=1e-4,
                    atol=1e-5,
                    msg=f"hybrid {schedule} rank {rank} {key}",
                )
            covered |= set(params)
        assert covered == set(ref_params)
        # Ranks 1 and 3 end replicas 0 and 1: their half-batch losses average to the batch's.
        ends = zip(results[1][schedule][0], results[3][schedule][0], strict=True)
        mean = [(a + b) / 2 for a, b in ends]
        torch.testing.assert_close(mean, ref_losses, rtol=1e-5, atol=1e-6)


def _tied_refused() -> str:
    torch.manual_seed(0)
    model = get_model_spec("gpt_mini").build(d_model=16, n_heads=2, tie_weights=True)
    try:
        pipeline(model, loss_fn, "1f1b", 2)
    except UserError as exc:
        return str(exc)
    return "accepted"


HYBRID = [("1f1b", "torch"), ("kfkb:2", "cadence")]


def _train_hybrid(rank: int, model_name: str) -> dict[str, Any]:
    # 4 ranks as 2 replicas x 2 stages; each replica trains on half of every batch.
    out = {}
    for schedule, backend in HYBRID:
        model = build(model_name)
        ex = pipeline(model, loss_fn, schedule, 2, backend=backend, data_parallel=2)
        opt = sgd(ex.module.parameters())
        losses = []
        for x, y in batches(model_name, STEPS):
            opt.zero_grad()
            x, y = ex.shard(x), ex.shard(y)
            loss = ex.step(x if ex.is_first else None, y if ex.is_last else None)
            opt.step()
            losses.append(None if loss is None else loss.item())
        names = set(ex.module.state_dict())
        params = {k: v.clone() for k, v in model.state_dict().items() if k in names}
        out[schedule] = (losses, params)
    return out


def _rank_main(rank: int, world: int, model_name: str) -> tuple[dict[str, Any], str, Any]:
    # One spawn per world size runs every case (spawning ranks costs more than the cases).
    hybrid = _train_hybrid(rank, model_name) if world == 4 else None
    return _train_all(rank, world, model_name), _tied_refused(), hybrid


@pytest.mark.parametrize(("world", "model_name"), [(2, "mlp"), (4, "gpt_mini")])
def test_every_schedule_equals_single_process(world: int, model_name: str) -> None:
    ref_losses, ref_params = reference(model_name, STEPS)
    outcomes = run_ranks(_rank_main, world, model_name, timeout=240)
    results = [result for result, _, _ in outcomes]
    # A model whose embedding and head share weights cannot be cut between them.
    assert all("share a parameter (tied weights)" in refusal for _, refusal, _ in outcomes)
    if world == 4:
        _check_hybrid([hybrid for _, _, hybrid in outcomes], ref_losses, ref_params)
    ranges = even_split(len(build(model_name).blocks()), world)
    names = build(model_name).block_names()
    for case in results[0]:
        covered = set()
        for rank, result in enumerate(results):
            losses, params = result[case]
            start, end = ranges[rank]
            assert {k.split(".")[0] for k in params} == set(names[start:end]), case
            for key, value in params.items():
                torch.testing.assert_close(
                    value, ref_params[key], rtol=1e-4, atol=1e-5, msg=f"{case} {key}"
                )
            covered |= set(params)
            if rank == world - 1:
                torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6, msg=case)
            else:
                assert losses == [None] * STEPS
        assert covered == set(ref_params), case
    # The steps moved the parameters, so equality above is not vacuous.
    initial = build(model_name).state_dict()
    assert all(not torch.equal(initial[k], ref_params[k]) for k in ref_params if "weight" in k)
