import pytest


@pytest.fixture(autouse=True)
def _shut_down_fake_ps_servers():
    """Shut down every in-thread parameter server a test started and did not stop."""
    yield
    from tests.unit.test_ps_server import Fake

    for fake in list(Fake.unstopped):
        fake.shutdown()
