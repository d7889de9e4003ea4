"""The README's main command fills the example model cache offline: the demo serves the tiny model on
127.0.0.1 (deployments/demo_models.py) and `modelplane warm-caches` fills the example ModelCache."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_demo_fills_the_example_cache_without_network(example_cluster: pathlib.Path, prefect_api: str) -> None:
    modelplane = pathlib.Path(sys.executable).with_name("modelplane")
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "deployments" / "demo_models.py"),
            "--cluster",
            str(example_cluster),
            "--",
            str(modelplane),
            "warm-caches",
            "--cluster",
            str(example_cluster),
            "-n",
            "cache-demo",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(example_cluster.parent),
            "PREFECT_HOME": str(example_cluster.parent / ".prefect"),
            "PREFECT_API_URL": prefect_api,
            "HF_HUB_OFFLINE": "1",
            "NO_PROXY": "*",
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert [(r["name"], r["status"]) for r in report["caches"]] == [("tiny-llama", "Available")]
    cache = next(
        d
        for d in yaml.safe_load_all((example_cluster / "50-model-cache.yaml").read_text())
        if d["kind"] == "ModelCache"
    )
    assert cache["status"]["status"] == "Available"
    volume = example_cluster / ".modelplane-volumes" / "cache-demo" / "tiny-llama-cache"
    shipped = REPO / "deployments" / "examples" / "models" / "tiny-llama"
    for path in shipped.iterdir():
        assert (volume / path.name).read_bytes() == path.read_bytes()
    assert json.loads((volume / ".modelplane-cache.json").read_text())["source"] == "s3://demo-models/tiny-llama"
