import sys

import pytest


@pytest.fixture(autouse=True)
def _shut_down_fake_ps_servers():
    """Shut down every in-thread parameter server a test started and did not stop."""
    yield
    # Only tests that import the fake server can have started one; no import on the others.
    module = sys.modules.get("tests.unit.test_ps_server")
    if module is None:
        return
    for fake in list(module.Fake.unstopped):
        fake.shutdown()
