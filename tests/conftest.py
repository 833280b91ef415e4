"""Session-wide test services and helpers.

Real components only: the local S3-protocol server is moto's ThreadedMotoServer
on 127.0.0.1 (it enforces conditional PUT), and the CLI runs as a real process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TRIB = [sys.executable, "-m", "cli.main"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-protocol HTTP server for the whole session; yields storage options."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    opts = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "region": "us-east-1",
    }
    import boto3

    boto3.client("s3", endpoint_url=opts["endpoint_url"], aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket="trib")
    yield opts
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """Environment variables that point trib (in-process and subprocesses) at the S3 server."""
    env = {
        "TRIB_S3_ENDPOINT_URL": s3_server["endpoint_url"],
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def s3_root(s3_env) -> str:
    """A fresh, unique table root on the S3 server."""
    return f"s3://trib/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["local", "s3"])
def any_root(request, tmp_path) -> str:
    """A fresh table root on every storage backend (the behaviour-suite pattern)."""
    if request.param == "local":
        return str(tmp_path / "table")
    return request.getfixturevalue("s3_root")


def run_trib(*args: str, env: dict | None = None, check: bool = False, cwd=None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    proc = subprocess.run([*TRIB, *args], capture_output=True, text=True, env=full_env, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"trib {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc
