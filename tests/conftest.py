import os
import shutil

import pytest


def _netem_missing_reason() -> str | None:
    if os.geteuid() != 0:
        return "emulated cluster needs root"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "emulated cluster needs iproute2 (ip, tc)"
    return None


NETEM_SKIP_REASON = _netem_missing_reason()
needs_netem = pytest.mark.skipif(NETEM_SKIP_REASON is not None, reason=NETEM_SKIP_REASON or "")
