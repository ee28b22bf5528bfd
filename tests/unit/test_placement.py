"""Where a worker computes: a GPU per worker over NCCL, else the CPU, or GPUs shared over gloo."""

import pytest

from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.placement import Placement, check_strategy, place_worker


@pytest.mark.parametrize(
    ("device", "rank", "workers", "gpus", "expected"),
    [
        ("auto", 1, 2, 0, Placement("cpu", "gloo")),
        ("cpu", 1, 2, 8, Placement("cpu", "gloo")),
        ("auto", 1, 2, 2, Placement("cuda:1", "nccl")),
        ("cuda", 3, 4, 8, Placement("cuda:3", "nccl")),
        ("auto", 0, 1, 1, Placement("cuda:0", "nccl")),
    ],
)
def test_obvious_placements_carry_no_note(device, rank, workers, gpus, expected):
    assert place_worker(device, rank, workers, gpus) == expected


def test_auto_with_too_few_gpus_trains_on_the_cpu_and_says_why():
    placement = place_worker("auto", 1, 2, 1)
    assert (placement.device, placement.backend) == ("cpu", "gloo")
    assert placement.note is not None and "--workers 1" in placement.note


def test_cuda_with_too_few_gpus_shares_them_round_robin_over_gloo():
    placed = [place_worker("cuda", rank, 4, 3) for rank in range(4)]
    assert [p.device for p in placed] == ["cuda:0", "cuda:1", "cuda:2", "cuda:0"]
    assert {p.backend for p in placed} == {"gloo"}
    assert "4 workers share 3 GPU(s) over gloo" in (placed[0].note or "")


def test_bad_requests_are_one_line_errors():
    with pytest.raises(UserError, match="no CUDA GPU"):
        place_worker("cuda", 0, 2, 0)
    with pytest.raises(UserError, match="unknown device 'gpu'"):
        place_worker("gpu", 0, 1, 1)
    with pytest.raises(UserError, match="unknown device 'tpu'"):
        TrainConfig.from_flat(device="tpu")
    with pytest.raises(ValueError):
        place_worker("auto", 2, 2, 0)


def test_strategies_that_need_a_gpu_per_worker_refuse_shared_gpus():
    for strategy in ("ddp", "cadence-dp", "ps"):
        check_strategy(strategy, "cuda:0", "gloo")
    for strategy in ("zero", "pipeline"):
        check_strategy(strategy, "cuda:0", "nccl")
        check_strategy(strategy, "cpu", "gloo")
        with pytest.raises(UserError, match=f"--strategy {strategy} on GPUs needs a GPU per"):
            check_strategy(strategy, "cuda:0", "gloo")


def test_without_local_world_size_a_rank_past_the_gpus_is_a_one_line_error(monkeypatch):
    # Ranks below it would take a GPU each over NCCL and it the CPU over gloo: refuse early,
    # before any process group is joined.
    import cadence.comm.process_group as pg

    monkeypatch.setattr(pg, "visible_gpus", lambda: 2)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(UserError, match="local rank 3 but 2 GPU"):
        pg.init_from_env()
