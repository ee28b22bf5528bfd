import os
import shutil

import pytest

import cadence.testing


def _netem_missing_reason() -> str | None:
    if os.geteuid() != 0:
        return "emulated cluster needs root"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "emulated cluster needs iproute2 (ip, tc)"
    return None


NETEM_SKIP_REASON = _netem_missing_reason()
needs_netem = pytest.mark.skipif(NETEM_SKIP_REASON is not None, reason=NETEM_SKIP_REASON or "")

# Ranks of the parity matrices build transformers' models: their modules (~3.5 s of imports a
# rank) are imported once by the fork server every rank is forked from.
cadence.testing.preload_in_ranks(
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.bert.modeling_bert",
    "transformers.models.resnet.modeling_resnet",
)
