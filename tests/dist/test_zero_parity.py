"""ZeRO stages 1-3 equal plain torch Adam / SGD at world sizes 2 and 4 (same seed, same data,
the global batch split across ranks); fp16 traffic stays within fp16 rounding of it."""

from typing import Any

import pytest
import torch

from cadence.testing import run_ranks
from cadence.zero import build_layout, comm_bytes_per_step
from cadence.zero.layout import bucket_params
from tests.dist.zero_helpers import make_model, parity_runs, reference

STEPS = 4
RUNS: dict[int, list[tuple[Any, ...]]] = {
    2: [(o, s, "none") for o in ("adam", "sgd") for s in (1, 2, 3)]
    + [("sgd", 2, "fp16"), ("adam", 3, "fp16"), ("sgd", 2, "none", "bf16")]
    # Gathers left in flight by step() and awaited by each block's next forward.
    + [("adam", 1, "none", "fp32", True), ("adam", 2, "none", "fp32", True)],
    # Four ranks on a busy two-core machine: every stage with Adam, SGD once.
    4: [("adam", 1, "none"), ("adam", 2, "none"), ("adam", 3, "none"), ("sgd", 3, "none")],
}
# fp16 rounds each gradient to ~3 significant digits: SGD, linear in the gradient, stays within
# fp16's relative precision; Adam divides by sqrt(v), so near-zero gradient entries may move by
# up to about one step size (lr) per step, which bounds its difference.
TOLERANCE: dict[str | tuple[str, str], dict[str, Any]] = {
    "none": {"rtol": 1e-4, "atol": 1e-5},
    ("fp16", "sgd"): {"rtol": 2e-3, "atol": 2e-4},
    ("fp16", "adam"): {"rtol": 0.0, "atol": 3e-3 * STEPS},
    # A bf16 parameter all-gather rounds the parameters the model computes with (8 bits of
    # mantissa) while each rank's master piece stays fp32.
    "bf16": {"rtol": 1e-2, "atol": 1e-3},
}


def _layout(world_size):
    entries = [e for e in bucket_params(make_model("mlp")) if e[2]]
    return build_layout(
        [(name, [(n, tuple(p.shape)) for n, p in params]) for name, _, params in entries],
        world_size,
    )


@pytest.mark.parametrize("world_size", [2, 4])
def test_zero_stages_equal_torch_optimizers(world_size):
    refs = {o: reference("mlp", o, STEPS) for o in ("adam", "sgd")}
    runs = RUNS[world_size]
    results = run_ranks(parity_runs, world_size, runs, STEPS, timeout=240)
    initial = make_model().state_dict()
    layout = _layout(world_size)
    for (optimizer, stage, compression, *gather), *per_rank in zip(runs, *results, strict=True):
        expected = refs[optimizer]
        tol = TOLERANCE["none" if compression == "none" else (compression, optimizer)]
        bf16 = gather[:1] == ["bf16"]
        if bf16:
            tol = TOLERANCE["bf16"]
        for rank, (got, sent) in enumerate(per_rank):
            # Every rank sends exactly what the layout's formula says, by purpose.
            gather_bytes = 2 if bf16 else 4
            assert sent == comm_bytes_per_step(layout, stage, compression, False, gather_bytes)
            assert got.keys() == expected.keys()
            for key in expected:
                torch.testing.assert_close(
                    got[key],
                    expected[key],
                    **tol,
                    msg=lambda m, k=f"{optimizer} stage {stage} {compression} rank {rank} {key}": (  # type: ignore[misc]
                        f"{k}: {m}"
                    ),
                )
    # Training moved every parameter, so agreement is not agreement on the initial values.
    for key, value in refs["adam"].items():
        assert not torch.allclose(value, initial[key])
