"""Run the test Kubernetes API server: ``python -m tests.servers.kubeserver --port 0 --ready-file PATH``.

The port actually bound is written to ``--ready-file`` (atomically) once the socket listens. The process
exits by itself when its parent dies (``os.getppid()`` changes) or on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import sys
import threading
import time

from .jobs import start_job_runner
from .server import serve


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m tests.servers.kubeserver", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", help="write the bound port here once listening")
    parser.add_argument("--no-parent-watch", action="store_true", help="keep running if the parent exits")
    parser.add_argument(
        "--workdir", help="where the job runner keeps volumes and pods (default: the ready file's directory)"
    )
    args = parser.parse_args(argv)

    server = serve(args.port, args.host)
    port = server.server_address[1]
    workdir = args.workdir or (os.path.dirname(os.path.abspath(args.ready_file)) if args.ready_file else os.getcwd())
    start_job_runner(
        server.store, pathlib.Path(workdir), f"http://{args.host}:{port}"
    )  # runs Modelplane's own Jobs (see jobs.py)
    if not args.no_parent_watch:
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()

    def _stop(signum: int, frame: object) -> None:
        os._exit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.ready_file:
        tmp = f"{args.ready_file}.tmp"
        with open(tmp, "w") as fh:
            fh.write(str(port))
        os.replace(tmp, args.ready_file)
    else:
        print(port, flush=True)
    sys.stdout.flush()
    server.serve_forever(poll_interval=0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
