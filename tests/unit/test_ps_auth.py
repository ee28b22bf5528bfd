"""Message signatures between a job's parameter servers and workers (pure, no sockets)."""

import pytest

from cadence.ps.auth import (
    SECRET_ENV,
    TO_SERVER,
    TO_WORKER,
    Signer,
    Unauthenticated,
    Verifier,
    new_secret,
    parse_secret,
)

HEADER, PAYLOAD = b"h" * 25, b"\x00\x01" * 8


def test_a_signed_message_verifies_once_in_order():
    secret = new_secret()
    signer, verifier = Signer(secret, TO_SERVER), Verifier(secret, TO_SERVER)
    first = signer.sign(2, 1, 3, HEADER, PAYLOAD)
    second = signer.sign(2, 1, 3, HEADER, PAYLOAD)
    verifier.verify(2, 1, 3, HEADER, PAYLOAD, first)
    verifier.verify(2, 1, 3, HEADER, PAYLOAD, second)
    with pytest.raises(Unauthenticated, match="replayed"):
        verifier.verify(2, 1, 3, HEADER, PAYLOAD, first)


@pytest.mark.parametrize(
    "change", ["key", "direction", "server", "worker", "channel", "header", "payload", "tag"]
)
def test_anything_changed_fails_verification(change):
    secret = new_secret()
    auth = Signer(secret, TO_SERVER).sign(0, 1, 2, HEADER, PAYLOAD)
    key = new_secret() if change == "key" else secret
    direction = TO_WORKER if change == "direction" else TO_SERVER
    where = [0, 1, 2]
    for i, name in enumerate(("server", "worker", "channel")):
        where[i] += change == name
    header = HEADER[:-1] + b"x" if change == "header" else HEADER
    payload = PAYLOAD + b"\x00" if change == "payload" else PAYLOAD
    if change == "tag":
        auth = auth[:-1] + bytes([auth[-1] ^ 1])
    with pytest.raises(Unauthenticated):
        Verifier(key, direction).verify(where[0], where[1], where[2], header, payload, auth)


def test_a_secret_is_hex_of_at_least_16_bytes():
    assert parse_secret("ab" * 16) == b"\xab" * 16
    for bad in ("", "zz" * 16, "ab" * 8):
        with pytest.raises(ValueError, match="secret"):
            parse_secret(bad)


def test_the_job_secret_comes_from_the_launcher_or_is_made_fresh(monkeypatch):
    from cadence.errors import UserError
    from cadence.ps.runtime import job_secret

    monkeypatch.setenv(SECRET_ENV, "cd" * 32)
    assert job_secret() == b"\xcd" * 32
    monkeypatch.setenv(SECRET_ENV, "not hex")
    with pytest.raises(UserError, match=SECRET_ENV):
        job_secret()
    monkeypatch.delenv(SECRET_ENV)
    first, second = job_secret(), job_secret()  # one process, no process group: made here
    assert len(first) == 32 and first != second
