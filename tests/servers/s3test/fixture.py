"""``s3_server``: a real S3 API (moto[server]) on 127.0.0.1 with authentication switched on.

moto enforces credentials once ``INITIAL_NO_AUTH_ACTION_COUNT`` unauthenticated actions are used up: the
fixture spends them creating an IAM user with an allow-all policy and an access key, so afterwards a wrong
key gets ``InvalidAccessKeyId`` and a wrong secret ``SignatureDoesNotMatch``, as from AWS.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from tasks.downloader import Credentials
from tests.servers.processes import stop_process

SETUP_ACTIONS = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


@dataclass
class S3Server:
    """A running moto server and an access key it accepts."""

    endpoint: str
    access_key: str
    secret_key: str
    pid: int

    def client(self, endpoint: str | None = None) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def credentials(self, endpoint: str | None = None, **overrides: str) -> Credentials:
        values = {
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_endpoint_url": endpoint or self.endpoint,
            "aws_region": "us-east-1",
        }
        values.update(overrides)
        return Credentials(**values)

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_REGION": "us-east-1",
        }

    def new_bucket(self, prefix: str = "models") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


def start_moto(auth: bool = True) -> tuple[subprocess.Popen, int]:
    """moto[server] on a free port; with ``auth`` it enforces credentials after the setup actions."""
    port = free_port()
    env = dict(os.environ)
    if auth:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(SETUP_ACTIONS)
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for_port(port, process)
    return process, port


def create_access_key(endpoint: str) -> tuple[str, str]:
    iam = boto3.client(
        "iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup"
    )
    iam.create_user(UserName="modelplane")
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="modelplane", PolicyName="all", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="modelplane")["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def stop_moto(process: subprocess.Popen) -> None:
    """Stop moto and the workers it started (its own process group)."""
    stop_process(process, timeout=10, group=True)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto[server] on a random 127.0.0.1 port with authentication on; stopped by PID at the end."""
    process, port = start_moto()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        access, secret = create_access_key(endpoint)
        yield S3Server(endpoint, access, secret, process.pid)
    finally:
        stop_moto(process)
