"""The probe `cadence bench dp-paired` records of whether its workers flushed subnormals."""

import pytest
import torch

from cadence.bench._dp_paired_worker import subnormals_flushed


def test_the_probe_follows_torch_flush_setting():
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormal floats to zero")
    try:
        assert subnormals_flushed() is True
    finally:
        torch.set_flush_denormal(False)
    assert subnormals_flushed() is False
