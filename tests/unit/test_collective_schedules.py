"""The pure plans behind cadence.comm.collectives: replayed symbolically, no processes needed.

Each rank's copy of each block is a multiset of contributing ranks; replaying a plan must leave
every rank with exactly the contributions the collective promises (each rank counted once).
"""

from __future__ import annotations

from collections import Counter

import pytest

from cadence.comm.collectives import ALGORITHMS, bytes_sent_per_rank, plan_for, split_sizes
from cadence.comm.collectives.schedules import Transfer, largest_power_of_two

SIZES = range(1, 10)


def _replay(plan: list[Transfer], state: list[list[Counter]]) -> list[list[Counter]]:
    """Step by step; every transfer in a step reads the state from before that step."""
    for step in sorted({t.step for t in plan}):
        moves = [(t, [state[t.src][b].copy() for b in t.blocks]) for t in plan if t.step == step]
        for t, payload in moves:
            for b, data in zip(t.blocks, payload, strict=True):
                if t.reduce:
                    state[t.dst][b] += data
                else:
                    state[t.dst][b] = data
    return state


def _own_everything(p: int, nblocks: int) -> list[list[Counter]]:
    return [[Counter([r]) for _ in range(nblocks)] for r in range(p)]


def _own_block(p: int) -> list[list[Counter]]:
    return [[Counter([r]) if b == r else Counter() for b in range(p)] for r in range(p)]


@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS["all_reduce"])
def test_all_reduce_plans_sum_every_rank_once(p, algorithm):
    plan, nblocks = plan_for("all_reduce", algorithm, p)
    final = _replay(plan, _own_everything(p, nblocks))
    full = Counter(range(p))
    assert all(block == full for rank in final for block in rank)


@pytest.mark.parametrize("p", SIZES)
def test_ring_reduce_scatter_leaves_block_r_on_rank_r(p):
    plan, nblocks = plan_for("reduce_scatter", "ring", p)
    final = _replay(plan, _own_everything(p, nblocks))
    assert all(final[r][r] == Counter(range(p)) for r in range(p))


@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("algorithm", ALGORITHMS["all_gather"])
def test_all_gather_plans_deliver_every_block(p, algorithm):
    plan, _ = plan_for("all_gather", algorithm, p)
    final = _replay(plan, _own_block(p))
    assert all(final[r][b] == Counter([b]) for r in range(p) for b in range(p))


@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("root", [0, 1, 4])
@pytest.mark.parametrize("algorithm", ALGORITHMS["broadcast"])
def test_broadcast_and_reduce_plans(p, root, algorithm):
    root %= p
    plan, _ = plan_for("broadcast", algorithm, p, root)
    start = [[Counter([root]) if r == root else Counter()] for r in range(p)]
    assert all(rank[0] == Counter([root]) for rank in _replay(plan, start))
    plan, _ = plan_for("reduce", algorithm, p, root)
    assert _replay(plan, _own_everything(p, 1))[root][0] == Counter(range(p))


def test_halving_doubling_folds_extra_ranks_and_uses_log_steps():
    plan, nblocks = plan_for("all_reduce", "halving_doubling", 6)
    assert nblocks == largest_power_of_two(6) == 4
    # fold, 2 halving, 2 doubling, unfold
    assert sorted({t.step for t in plan}) == [0, 1, 2, 3, 4, 5]
    assert {(t.src, t.dst) for t in plan if t.step == 0} == {(0, 1), (2, 3)}
    assert {(t.src, t.dst) for t in plan if t.step == 5} == {(1, 0), (3, 2)}


@pytest.mark.parametrize("p", SIZES)
def test_closed_forms_for_divisible_sizes(p):
    q = largest_power_of_two(p)
    e, n = p - q, 4 * 840 * p  # divisible by p and by q
    levels = (p - 1).bit_length()  # ceil(log2 p)

    def check(collective, algorithm, expected, root=0):
        assert bytes_sent_per_rank(collective, algorithm, n, p, itemsize=4, root=root) == expected

    check("all_reduce", "ring", [2 * (p - 1) * n // p] * p)
    hd = 2 * (q - 1) * n // q
    check(
        "all_reduce",
        "halving_doubling",
        [n if r < 2 * e and r % 2 == 0 else hd + (n if r < 2 * e else 0) for r in range(p)],
    )
    children = [sum(1 for k in range(levels) if r < 2**k and r + 2**k < p) for r in range(p)]
    check("all_reduce", "tree", [n * (c + (r > 0)) for r, c in enumerate(children)])
    check("broadcast", "binomial", [n * c for c in children])
    check("broadcast", "ring", [0 if r == p - 1 else n for r in range(p)])
    for algorithm in ALGORITHMS["reduce"]:
        check("reduce", algorithm, [0 if r == 0 else n for r in range(p)])
    for collective in ("reduce_scatter", "all_gather", "all_to_all"):
        for algorithm in ALGORITHMS[collective]:
            check(collective, algorithm, [(p - 1) * n // p] * p)
    check("gather", "linear", [0 if r == 0 else n // p for r in range(p)])
    check("scatter", "linear", [(p - 1) * n // p if r == 0 else 0 for r in range(p)])


def test_uneven_split_and_ring_reduce_scatter_moves_less_than_gloo():
    assert split_sizes(10, 4) == [3, 3, 2, 2]
    assert split_sizes(2, 4) == [1, 1, 0, 0]
    assert split_sizes(0, 3) == [0, 0, 0]
    # 10 one-byte elements over 4 ranks: rank r sends every block but its own
    assert bytes_sent_per_rank("reduce_scatter", "ring", 10, 4) == [7, 7, 8, 8]
    # gloo's reduce_scatter_tensor is a ring all-reduce + slice: twice the bytes
    nbytes = 1 << 20
    ours = bytes_sent_per_rank("reduce_scatter", "ring", nbytes, 8)[0]
    assert 2 * ours == bytes_sent_per_rank("all_reduce", "ring", nbytes, 8)[0]


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="accepted: ring$"):
        plan_for("reduce_scatter", "bruck", 4)
    with pytest.raises(ValueError, match="unknown collective"):
        bytes_sent_per_rank("barrier", "ring", 8, 2)
    with pytest.raises(ValueError, match="whole number"):
        bytes_sent_per_rank("all_reduce", "ring", 6, 2, itemsize=4)
    with pytest.raises(ValueError, match="root"):
        plan_for("broadcast", "binomial", 3, root=3)
