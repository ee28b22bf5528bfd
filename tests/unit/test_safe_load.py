"""Checkpoints load as plain data only: a pickled object that is not a tensor is refused."""

import os
from typing import Any

import pytest
import torch

from cadence.errors import UserError
from cadence.safe_load import load_checkpoint


class _Payload:
    """Unpickling this would run a shell command."""

    def __reduce__(self):
        return (os.system, ("echo unpickled > /dev/null",))


class _Plain:
    pass


def test_plain_data_round_trips(tmp_path):
    # The shapes cadence saves: tensors, optimizer state_dicts, strings, tuples, None.
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    state = {
        "format": "cadence.zero/1", "world_size": 2, "layout": [(0, 6, "float32")],
        "shards": [torch.arange(4.0)], "optimizer": opt.state_dict(), "error": [None],
        "model": model.state_dict(),
    }  # fmt: skip
    torch.save(state, tmp_path / "ok.pt")
    loaded = load_checkpoint(tmp_path / "ok.pt")
    assert loaded["layout"] == [(0, 6, "float32")] and loaded["error"] == [None]
    torch.testing.assert_close(loaded["shards"][0], torch.arange(4.0))
    assert loaded["optimizer"]["state"][0]["step"] == 1


@pytest.mark.parametrize(("payload", "named"), [(_Payload(), "system"), (_Plain(), "_Plain")])
def test_a_pickled_object_is_refused_in_one_line(tmp_path, payload, named):
    torch.save({"shards": [torch.ones(2)], "extra": payload}, tmp_path / "evil.pt")
    with pytest.raises(UserError) as info:
        load_checkpoint(tmp_path / "evil.pt")
    message = str(info.value)
    assert "\n" not in message and named in message and "evil.pt" in message


def test_a_parameter_server_checkpoint_with_pickled_objects_is_refused(tmp_path):
    import numpy as np

    from cadence.ps import checkpoint
    from cadence.ps.optim import SliceOptimizer
    from cadence.ps.server import SliceState

    value = np.zeros(2, np.float32)
    slices = {0: SliceState(0, 0, 0, value, SliceOptimizer("sgd", 2, {"lr": 0.1}), clocks=[0])}
    meta = np.array([3, 3, 3], np.int64)
    arrays: dict[str, Any] = {"0.meta": meta,
                              "0.value": np.array([_Payload(), 1.0], dtype=object)}  # fmt: skip
    np.savez(tmp_path / "server0.npz", keys=np.array([0]), **arrays)
    with pytest.raises(ValueError, match="pickled objects, not plain arrays"):
        checkpoint.restore(tmp_path / "server0.npz", slices)
    np.testing.assert_array_equal(value, [0.0, 0.0])  # nothing loaded
