"""Serve the example models offline for `./dev.sh demo`, then run a command while they are served.

Every directory under ``deployments/examples/models/`` becomes ``s3://demo-models/<name>`` on an S3 API
(moto, in this process) on 127.0.0.1; nothing leaves the machine. The port is ``39571``, the endpoint
``deployments/examples/50-model-cache.yaml`` names; with ``--cluster DIR`` (a copy of the examples) any
free port is used and the ``cache-demo`` namespace's AIMNamespaceConfig in DIR is pointed at it, so
demos running side by side do not collide. Usage::

    python deployments/demo_models.py --cluster DIR -- modelplane warm-caches --cluster DIR -n cache-demo
"""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys

PORT = 39571
BUCKET = "demo-models"
NAMESPACE = "cache-demo"
MODELS = pathlib.Path(__file__).resolve().parent / "examples" / "models"


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:port can be bound."""
    with socket.socket() as sock:
        # as the server itself binds: connections of a previous demo in TIME_WAIT do not make the port busy
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def point_config_at(cluster: str, endpoint: str) -> None:
    """Set the endpoint of the demo namespace's S3 credential in the manifests directory ``cluster``."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from tasks.clients.cluster import LocalCluster, ObjectRef

    manifests = LocalCluster(cluster)
    config = manifests.get("aim.silogen.ai/v1alpha1", "AIMNamespaceConfig", "default", NAMESPACE)
    credentials = config["spec"]["credentials"]["s3"]
    credentials[0]["endpointUrl"] = endpoint
    manifests.patch_spec(ObjectRef.of(config), {"spec": {"credentials": {"s3": credentials}}})


def upload(endpoint: str) -> int:
    """Put every model file into the bucket; returns the number of files."""
    import boto3

    s3 = boto3.client(  # the demo store takes any keys; these are the example Secret's (50-model-cache.yaml)
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="MPDEMOACCESSKEY7Q2XK4",
        aws_secret_access_key="mpDemoSecret/7f3c9a1e5b2d4c8e9f0a6b1c3d5e7f9a0b2c4d6e",
    )
    s3.create_bucket(Bucket=BUCKET)
    count = 0
    for path in sorted(MODELS.rglob("*")):
        if path.is_file():
            s3.put_object(Bucket=BUCKET, Key=path.relative_to(MODELS).as_posix(), Body=path.read_bytes())
            count += 1
    return count


def main(argv: list[str]) -> int:
    """Serve, upload, run the command after ``--``, stop; the command's exit code is returned."""
    options, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else ([], argv)
    cluster = options[options.index("--cluster") + 1] if "--cluster" in options[:-1] else None
    if not command:
        sys.stderr.write("usage: demo_models.py [--cluster DIR] -- COMMAND [ARGS...]\n")
        return 2
    port = free_port() if cluster else PORT
    if not port_free(port):
        sys.stderr.write(f"demo_models: 127.0.0.1:{port} is in use; stop what listens there and retry\n")
        return 1
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request in the demo's output
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        files = upload(endpoint)
        if cluster:
            point_config_at(cluster, endpoint)
        sys.stderr.write(f"serving {files} demo model files as s3://{BUCKET}/ on 127.0.0.1:{port}\n")
        return subprocess.call(command)
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
