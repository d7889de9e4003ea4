"""Serve the example models offline for `./dev.sh demo`, then run a command while they are served.

Every directory under ``deployments/examples/models/`` becomes ``s3://demo-models/<name>`` on an S3 API
(moto, in this process) at ``127.0.0.1:39571``, the endpoint ``deployments/examples/50-model-cache.yaml``
names; nothing leaves the machine. Usage::

    python deployments/demo_models.py -- modelplane warm-caches --cluster deployments/examples -n cache-demo
"""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys

PORT = 39571
BUCKET = "demo-models"
MODELS = pathlib.Path(__file__).resolve().parent / "examples" / "models"


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:port can be bound."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def upload(endpoint: str) -> int:
    """Put every model file into the bucket; returns the number of files."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="demo", aws_secret_access_key="demo")
    s3.create_bucket(Bucket=BUCKET)
    count = 0
    for path in sorted(MODELS.rglob("*")):
        if path.is_file():
            s3.put_object(Bucket=BUCKET, Key=path.relative_to(MODELS).as_posix(), Body=path.read_bytes())
            count += 1
    return count


def main(argv: list[str]) -> int:
    """Serve, upload, run the command after ``--``, stop; the command's exit code is returned."""
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    if not command:
        sys.stderr.write("usage: demo_models.py -- COMMAND [ARGS...]\n")
        return 2
    if not port_free(PORT):
        sys.stderr.write(f"demo_models: 127.0.0.1:{PORT} is in use; stop what listens there and retry\n")
        return 1
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request in the demo's output
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=PORT, verbose=False)
    server.start()
    try:
        files = upload(f"http://127.0.0.1:{PORT}")
        sys.stderr.write(f"serving {files} demo model files as s3://{BUCKET}/ on 127.0.0.1:{PORT}\n")
        return subprocess.call(command)
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
