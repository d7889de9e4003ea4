"""A vLLM OpenAI server's LoRA endpoints, resolving adapters the way vLLM does (run as a process).

``python -m tests.rollout.fake_vllm PORT BASE_MODEL`` serves ``GET /v1/models`` and ``POST
/v1/{load,unload}_lora_adapter`` on 127.0.0.1. A load resolves ``lora_path`` as vLLM's
``get_adapter_absolute_path`` does (an absolute path as is, ``~`` expanded, an existing relative path
made absolute, anything else a Hugging Face repo id fetched with ``huggingface_hub.snapshot_download``,
which honours ``HF_HUB_OFFLINE``, ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HOME`` of this process's env) and
then needs the adapter's ``adapter_config.json`` there, as vLLM's LoRA loader does; a failure is a 400
naming the adapter, as vLLM answers.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOADED: dict[str, str] = {}
LOCK = threading.Lock()


def resolve(lora_path: str) -> str:
    """vLLM's resolution of a runtime-loaded adapter's path."""
    if os.path.isabs(lora_path):
        return lora_path
    if lora_path.startswith("~"):
        return os.path.expanduser(lora_path)
    if os.path.exists(lora_path):
        return os.path.abspath(lora_path)
    import huggingface_hub

    return huggingface_hub.snapshot_download(repo_id=lora_path)


class Handler(BaseHTTPRequestHandler):
    base_model = "model"

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        with LOCK:
            adapters = sorted(LOADED)
        models = [{"id": self.base_model, "object": "model"}] + [
            {"id": n, "object": "model", "parent": self.base_model} for n in adapters
        ]
        self._reply(200, {"object": "list", "data": models})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        name = body.get("lora_name", "")
        if self.path == "/v1/unload_lora_adapter":
            with LOCK:
                LOADED.pop(name, None)
            self._reply(200, {})
            return
        if self.path != "/v1/load_lora_adapter":
            self._reply(404, {"error": "not found"})
            return
        try:
            path = resolve(str(body.get("lora_path", "")))
        except Exception as exc:  # vLLM reports any resolution failure as a failed load
            self._reply(
                400,
                {
                    "error": {
                        "message": f"Loading lora {name} failed: {type(exc).__name__}: {exc}",
                        "type": "BadRequestError",
                    }
                },
            )
            return
        if not os.path.isfile(os.path.join(path, "adapter_config.json")):
            self._reply(
                400,
                {
                    "error": {
                        "message": f"Loading lora {name} failed: No adapter found for {path}",
                        "type": "BadRequestError",
                    }
                },
            )
            return
        with LOCK:
            LOADED[name] = path
        self._reply(200, {})


def main() -> None:
    port, Handler.base_model = int(sys.argv[1]), sys.argv[2]
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
