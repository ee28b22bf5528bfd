"""cadence.comm.collectives against torch.distributed's own collectives on gloo.

One spawn per world size (spawning dominates the cost): every rank loops over all
(collective, algorithm, dtype, size) cases, compares each result with torch's collective on a
copy of the same inputs, checks the bytes it sent against `bytes_sent_per_rank`, and returns a
summary that the parent asserts on.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.distributed as dist

import cadence.comm.collectives as C
import cadence.comm.ops as C_ops
from cadence.testing import run_ranks

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Summation order differs from gloo's, so sums of half types agree only to rounding.
SUM_TOL = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.float16: {"rtol": 1e-2, "atol": 2e-2},
    torch.bfloat16: {"rtol": 4e-2, "atol": 1e-1},
}
EXACT = {"rtol": 0.0, "atol": 0.0}
LARGE = (1 << 20) + 3  # ~1M elements, odd


def _sizes(ws: int, dtype: torch.dtype) -> list[int]:
    """Empty, one element, fewer elements than ranks, odd, not divisible by most world sizes;
    half types get the two that exercise rounding and uneven blocks."""
    if dtype != torch.float32:
        return sorted({max(1, ws - 1), 1001})
    return sorted({0, 1, max(1, ws - 1), 1001})


def _data(n: int, dtype: torch.dtype, *seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(hash(seed) % (1 << 31))
    return torch.randn(n, generator=gen).to(dtype)


def _run_case(rank, ws, coll, algo, dtype, n, op, root, chunk, seed):
    """Run one case with ours and torch's; return (ours, reference, tol, bytes sent, nbytes)."""
    item = torch.empty(0, dtype=dtype).element_size()
    x = _data(n, dtype, seed, rank)
    red_tol = SUM_TOL[dtype] if op in ("sum", "avg", "product") else EXACT
    torch_op = {
        "sum": dist.ReduceOp.SUM,
        "avg": dist.ReduceOp.AVG,
        "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN,
        "product": dist.ReduceOp.PRODUCT,
    }[op]
    kw = {"algorithm": algo, "chunk_bytes": chunk}
    sizes = C.split_sizes(n, ws)
    ours: torch.Tensor | None  # None where a rank receives nothing (gather off the root)
    ref: torch.Tensor | None  # None where torch's gather leaves nothing to compare
    got: list[torch.Tensor] | None
    with C.count_bytes() as counter:
        if coll == "all_reduce":
            ours, ref, tol, nbytes = x.clone(), x.clone(), red_tol, n * item
            C.all_reduce(ours, op=op, **kw)
        elif coll == "broadcast":
            ours, ref, tol, nbytes = x.clone(), x.clone(), EXACT, n * item
            C.broadcast(ours, root, **kw)
        elif coll == "reduce":
            ours, ref, tol, nbytes = x.clone(), x.clone(), red_tol, n * item
            C.reduce(ours, root, op=op, **kw)
        elif coll == "reduce_scatter":
            inputs = [_data(s, dtype, seed, rank, j) for j, s in enumerate(sizes)]
            ours, ref = x.new_empty(sizes[rank]), x.new_empty(sizes[rank])
            tol, nbytes = red_tol, n * item
            C.reduce_scatter(ours, [t.clone() for t in inputs], op=op, **kw)
        elif coll == "reduce_scatter_tensor":
            ours, ref, tol, nbytes = x.new_empty(n), x.new_empty(n), red_tol, ws * n * item
            big = _data(ws * n, dtype, seed, rank)
            C.reduce_scatter_tensor(ours, big.clone(), op=op, **kw)
        elif coll == "all_gather":
            mine = _data(sizes[rank], dtype, seed, rank)
            ours_list = [x.new_full((s,), float("nan")) for s in sizes]
            C.all_gather(ours_list, mine, **kw)
            ours, tol, nbytes = torch.cat(ours_list), EXACT, n * item
        elif coll == "all_gather_into_tensor":
            ours, tol, nbytes = x.new_empty(ws * n), EXACT, ws * n * item
            C.all_gather_into_tensor(ours, x, **kw)
        elif coll == "gather":
            out = [x.new_empty(n) for _ in range(ws)] if rank == root else None
            C.gather(x, out, root, **kw)
            ours, tol, nbytes = (torch.cat(out) if out else None), EXACT, ws * n * item
        elif coll == "scatter":
            pieces = [_data(n, dtype, seed, rank, j) for j in range(ws)]
            ours, tol, nbytes = x.new_empty(n), EXACT, ws * n * item
            C.scatter(ours, pieces if rank == root else None, root, **kw)
        else:  # all_to_all: rank r sends sizes[j] elements to rank j (uneven per pair)
            inputs = [_data(sizes[j], dtype, seed, rank, j) for j in range(ws)]
            out = [x.new_empty(sizes[rank]) for _ in range(ws)]
            C.all_to_all(out, inputs, **kw)
            ours, tol, nbytes = torch.cat(out), EXACT, n * item
    sent = counter.bytes_sent

    # torch's reference on the same inputs
    if coll == "all_reduce":
        dist.all_reduce(ref, op=torch_op)
    elif coll == "broadcast":
        assert ref is not None
        dist.broadcast(ref, root)
    elif coll == "reduce":
        assert ref is not None
        dist.reduce(ref, root, op=torch_op)
        if rank != root:  # gloo leaves partial sums here; ours must leave the input alone
            ref, tol = x, EXACT
    elif coll == "reduce_scatter":
        dist.reduce_scatter(ref, inputs, op=torch_op)
    elif coll == "reduce_scatter_tensor":
        with warnings.catch_warnings():  # deprecated in favour of a newer name; same semantics
            warnings.simplefilter("ignore", FutureWarning)
            dist.reduce_scatter_tensor(ref, big, op=torch_op)
    elif coll == "all_gather":  # gloo needs equal sizes: gather padded copies, then trim
        pad = max(sizes)
        padded = torch.cat([mine, mine.new_zeros(pad - mine.numel())])
        got = [x.new_empty(pad) for _ in range(ws)]
        dist.all_gather(got, padded)
        ref = torch.cat([g[:s] for g, s in zip(got, sizes, strict=True)])
    elif coll == "all_gather_into_tensor":
        got = [x.new_empty(n) for _ in range(ws)]
        dist.all_gather(got, x)
        ref = torch.cat(got)
    elif coll == "gather":
        got = [x.new_empty(n) for _ in range(ws)] if rank == root else None
        dist.gather(x, got, root)
        ref = torch.cat(got) if got else None
    elif coll == "scatter":
        ref = x.new_empty(n)
        dist.scatter(ref, pieces if rank == root else None, root)
    else:
        # gloo's list all_to_all needs equal sizes; its single-tensor form takes splits
        ref = x.new_empty(ws * sizes[rank])
        dist.all_to_all_single(ref, torch.cat(inputs), [sizes[rank]] * ws, sizes)
    return ours, ref, tol, sent, nbytes


def _cases(ws: int):
    algos = {
        "all_reduce": ("ring", "halving_doubling", "tree"),
        "broadcast": ("binomial", "ring"),
        "reduce": ("binomial", "ring"),
        "reduce_scatter": ("ring",),
        "reduce_scatter_tensor": ("ring",),
        "all_gather": ("ring", "bruck"),
        "all_gather_into_tensor": ("ring", "bruck"),
        "gather": ("linear",),
        "scatter": ("linear",),
        "all_to_all": ("pairwise",),
    }
    seed = 0
    for coll, names in algos.items():
        for algo in names:
            for dtype in DTYPES:
                for n in _sizes(ws, dtype):
                    seed += 1
                    # small pieces so chunking/pipelining runs even on small tensors
                    chunk = 24 if n < 100 else 1024
                    yield coll, algo, dtype, n, "sum", seed % ws, chunk, seed
    for algo in ("ring", "halving_doubling", "tree"):
        for op in ("avg", "max", "min", "product"):
            seed += 1
            yield "all_reduce", algo, torch.float32, 37, op, 0, 24, seed
        seed += 1
        yield "all_reduce", algo, torch.float32, LARGE, "sum", 0, 1 << 18, seed
    for coll, algo in (("reduce_scatter", "ring"), ("reduce", "binomial"), ("reduce", "ring")):
        for op in ("max", "avg"):
            seed += 1
            yield coll, algo, torch.float16, 37, op, ws - 1, 24, seed
    seed += 1
    yield "reduce_scatter_tensor", "ring", torch.float32, LARGE // ws, "sum", 0, 1 << 18, seed
    seed += 1
    yield "broadcast", "ring", torch.bfloat16, LARGE, "sum", ws - 1, 1 << 18, seed


def _check_all(rank: int, ws: int) -> dict:
    summary: dict[str, Any] = {"cases": 0, "bytes_checked": 0, "failures": []}
    for coll, algo, dtype, n, op, root, chunk, seed in _cases(ws):
        label = f"{coll}/{algo}/{dtype}/n={n}/{op}/root={root}"
        ours, ref, tol, sent, nbytes = _run_case(
            rank, ws, coll, algo, dtype, n, op, root, chunk, seed
        )
        summary["cases"] += 1
        try:
            if ref is not None:
                torch.testing.assert_close(ours, ref, **tol)
        except AssertionError as exc:
            summary["failures"].append(f"{label}: {str(exc).splitlines()[:3]}")
        formula_name = "reduce_scatter" if coll.startswith("reduce_scatter") else coll
        formula_name = "all_gather" if coll.startswith("all_gather") else formula_name
        item = torch.empty(0, dtype=dtype).element_size()
        expected = C.bytes_sent_per_rank(formula_name, algo, nbytes, ws, itemsize=item, root=root)
        summary["bytes_checked"] += 1
        if sent != expected[rank]:
            summary["failures"].append(f"{label}: sent {sent} bytes, formula {expected[rank]}")
    summary["failures"] += _check_extras(rank, ws)
    return summary


def _check_extras(rank: int, ws: int) -> list[str]:
    """Strided tensors, a `dist.ReduceOp` op, and a sub-group."""
    failures = []
    base = _data(6 * 5, torch.float32, 99, rank).view(6, 5)
    ours, ref = base.t().contiguous().t(), base.clone()  # same values, column-major strides
    assert not ours.is_contiguous()
    C.all_reduce(ours, algorithm="halving_doubling", chunk_bytes=8)
    dist.all_reduce(ref)
    if not torch.allclose(ours, ref, rtol=1e-5, atol=1e-5):
        failures.append("strided all_reduce differs")
    top = torch.full((3,), float(rank))
    C.all_reduce(top, op=dist.ReduceOp.MAX, algorithm="tree")  # type: ignore[arg-type]  # torch's enum works too
    if top.tolist() != [float(ws - 1)] * 3:
        failures.append(f"ReduceOp.MAX gave {top.tolist()}")
    # broadcast_tensors: runs of one dtype travel flattened, a strided tensor comes back in place.
    mixed = [
        torch.full((3, 2), float(rank)), torch.full((4,), float(rank), dtype=torch.float16),
        torch.full((2,), rank, dtype=torch.int64), torch.full((5,), float(rank)),
        torch.full((4, 3), float(rank)).t(), torch.zeros(0), torch.tensor([rank == 1]),
    ]  # fmt: skip
    C_ops.broadcast_tensors(mixed, src=ws - 1)
    want = [ws - 1 if t.dtype != torch.bool else ws - 1 == 1 for t in mixed]
    if any(not bool((t == w).all()) for t, w in zip(mixed, want, strict=True)):
        failures.append(f"broadcast_tensors gave {[t.tolist() for t in mixed]}")
    if ws >= 3:
        members = list(range(1, ws))  # a group that excludes rank 0
        group = dist.new_group(members)
        if rank in members:
            t = torch.full((11,), float(rank))
            C.all_reduce(t, group=group, algorithm="ring", chunk_bytes=8)
            b = torch.full((5,), float(rank))
            C.broadcast(b, src=len(members) - 1, group=group)
            if t.tolist() != [float(sum(members))] * 11 or b.tolist() != [float(ws - 1)] * 5:
                failures.append(f"sub-group results wrong: {t.tolist()} {b.tolist()}")
    return failures


# Powers of two plus 3, 5, 6 (halving-doubling folds 1 and 2 extra ranks); 4 and 7 add little
# but spawn cost, and every plan is also replayed symbolically for p = 1..9 in the unit tests.
@pytest.mark.parametrize("world_size", [1, 2, 3, 5, 6, 8])
def test_matches_torch_and_byte_formula(world_size):
    results = run_ranks(_check_all, world_size, timeout=300)
    for rank, summary in enumerate(results):
        assert summary["cases"] > 50, summary
        assert summary["bytes_checked"] == summary["cases"]
        assert summary["failures"] == [], f"rank {rank}: {summary['failures'][:10]}"


def test_unknown_algorithm_and_op_raise_value_error():
    t = torch.ones(4)
    with pytest.raises(ValueError, match="accepted: ring, halving_doubling, tree"):
        C.all_reduce(t, algorithm="butterfly")
    with pytest.raises(ValueError, match="accepted: ring, bruck"):
        C.all_gather([t], t, algorithm="tree")
    with pytest.raises(ValueError, match="accepted: binomial, ring"):
        C.broadcast(t, 0, algorithm="halving_doubling")
    with pytest.raises(ValueError, match="accepted: sum, avg, max, min, product"):
        C.all_reduce(t, op="xor")
    with pytest.raises(ValueError, match="accepted"):
        C.bytes_sent_per_rank("all_reduce", "bruck", 16, 4)


def _control_message(rank, world_size):
    counts = torch.tensor([rank + 1.0])
    return str(C_ops.wire_device()), C_ops.all_reduce_sum(counts).tolist(), counts.device.type


def test_control_messages_travel_on_the_groups_device():
    # gloo takes host memory: a count made on the CPU is summed in place there (under NCCL
    # `wire_device` is the rank's GPU and the sum comes back to the CPU tensor; see test_cuda.py).
    assert str(C_ops.wire_device()) == "cpu"  # no process group: the CPU
    results = run_ranks(_control_message, 2)
    assert results == [("cpu", [3.0], "cpu")] * 2
