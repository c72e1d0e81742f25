"""A real S3 endpoint over HTTP: moto's standalone server, started once per session."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture()
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment a user would set for an S3-compatible endpoint (fsspec + AWS conventions)."""
    env = {"FSSPEC_S3_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
