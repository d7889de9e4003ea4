"""The AIM lifecycles on the bundled example cluster with the local backend, offline: the image's
metadata comes from the OCI image layout in deployments/example-images (what ./dev.sh demo runs)."""

from __future__ import annotations

import hashlib
import json
import pathlib
import re
import shutil

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app

REPO = pathlib.Path(__file__).resolve().parents[2]
MIRROR = f"docker.io=oci-layout:{REPO / 'deployments' / 'example-images'}"


def _objects(cluster: pathlib.Path, kind: str) -> list[dict]:
    found = []
    for path in cluster.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == kind:
                found.append(doc)
    return found


def test_demo_discovers_resolves_and_rolls_out_offline(example_cluster: pathlib.Path, prefect_harness: None) -> None:
    result = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(example_cluster), "--registry-mirror", MIRROR])
    assert result.exit_code == 3, result.output  # ran; a template waits for its cache, services not Running yet
    templates = {t["metadata"]["name"]: t for t in _objects(example_cluster, "AIMServiceTemplate")}
    auto = "docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215"
    assert auto in templates and templates[auto]["status"]["status"] == "Available"
    assert templates[auto]["status"]["modelSources"] == ["hf://meta-llama/Llama-3.1-8B-Instruct"]
    (isvc,) = _objects(example_cluster, "InferenceService")
    assert isvc["metadata"]["labels"]["aim.silogen.ai/service"] == "llama-batch"
    assert len(_objects(example_cluster, "HTTPRoute")) == 1
    services = {s["metadata"]["name"]: s for s in _objects(example_cluster, "AIMService")}
    assert services["llama-batch"]["status"]["status"] == "Starting"
    assert services["llama-chat"]["status"]["status"] == "Pending"  # its template waits for the model cache


def test_a_malformed_mirror_is_one_line_and_exit_2(example_cluster: pathlib.Path) -> None:
    result = CliRunner().invoke(
        app, ["discover-models", "--cluster", str(example_cluster), "--registry-mirror", "docker.io"]
    )
    assert result.exit_code == 2
    assert "expected HOST=MIRROR" in result.output and "Traceback" not in result.output


def test_an_image_whose_registry_host_cannot_exist_is_invalid_and_not_read_again(
    example_cluster: pathlib.Path, prefect_harness: None
) -> None:
    """Before, ``../x`` and ``localhost:99999/x:1`` were RegistryUnavailable ("..: InvalidURL while connecting"),
    temporary: fetched again on every run, their ``attempts`` counting up."""
    (example_cluster / "98-bad-hosts.yaml").write_text(
        "apiVersion: aim.silogen.ai/v1alpha1\nkind: AIMClusterModel\nmetadata: {name: dots}\n"
        "spec: {name: 'unit/dots:1', image: '../x'}\n---\n"
        "apiVersion: aim.silogen.ai/v1alpha1\nkind: AIMClusterModel\nmetadata: {name: port}\n"
        "spec: {name: 'unit/port:1', image: 'localhost:99999/x:1'}\n"
    )
    command = ["discover-models", "--cluster", str(example_cluster), "--registry-mirror", MIRROR]
    first = CliRunner().invoke(app, command)
    assert first.exit_code == 3 and "3 images read, 2 failed" in first.output, first.output
    again = CliRunner().invoke(app, command)
    assert again.exit_code == 3 and "0 images read, 2 failed" in again.output, again.output
    models = {m["metadata"]["name"]: m for m in _objects(example_cluster, "AIMClusterModel")}
    for name, problem in (("dots", "'../x' is not"), ("port", "port 99999 is not between 1 and 65535")):
        error = json.loads(models[name]["metadata"]["annotations"]["aim.silogen.ai/image-metadata"])["error"]
        assert (error["reason"], error["attempts"]) == ("InvalidImageReference", 1)
        assert problem in error["message"]


def _files(cluster: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(cluster)): p.read_bytes() for p in sorted(cluster.rglob("*")) if p.is_file()}


def test_a_layout_mirror_without_its_directory_is_exit_2_before_any_model_is_read(
    example_cluster: pathlib.Path, tmp_path: pathlib.Path, prefect_harness: None
) -> None:
    """Before, a missing ``oci-layout:`` directory was every model's ImageNotFound (exit 3), a terminal verdict: the
    run with the option fixed read nothing ("0 images read, 1 failed") until the model's backoff expired; and
    ``oci-layout:`` with no directory read the working directory."""
    from flows.discover_models import discover_models
    from flows.runs import run_untracked

    before = _files(example_cluster)
    missing = tmp_path / "no-such-images"
    for target, part in ((f"oci-layout:{missing}", f"directory {missing} does not exist"), ("oci-layout:", "names no")):
        result = CliRunner().invoke(
            app, ["discover-models", "--cluster", str(example_cluster), "--registry-mirror", f"docker.io={target}"]
        )
        assert result.exit_code == 2, result.output
        (line,) = result.output.strip().splitlines()
        assert line.startswith("error:") and "--registry-mirror" in line and part in line, line
        assert _files(example_cluster) == before
    # The flow, as a deployment run with the same parameter, fails the same way and writes nothing either.
    with pytest.raises(ValueError, match=f"directory {missing} does not exist"):
        run_untracked(
            discover_models,
            {"cluster": str(example_cluster), "registry_mirrors": {"docker.io": f"oci-layout:{missing}"}},
        )
    assert _files(example_cluster) == before
    fixed = CliRunner().invoke(app, ["discover-models", "--cluster", str(example_cluster), "--registry-mirror", MIRROR])
    assert fixed.exit_code == 0, fixed.output
    assert "1 images read, 0 failed" in fixed.output
    (model,) = _objects(example_cluster, "AIMClusterModel")
    assert "digest" in json.loads(model["metadata"]["annotations"]["aim.silogen.ai/image-metadata"])


def test_a_missing_cluster_path_is_one_line_and_exit_2(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(app, ["rollout-services", "--cluster", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert (
        result.output.strip().startswith("error:")
        and "does not exist" in result.output
        and "Traceback" not in result.output
    )


BAD_OBJECTS = """\
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMClusterModel
metadata: {name: no-image}
spec: {name: broken/model:1}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMServiceTemplate
metadata: {name: string-gpus, namespace: llm-serving}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", metric: latency, gpuModel: MI300X, gpusPerReplica: "1"}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: spec-string, namespace: llm-serving}
spec: "llama please"
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: cache-no, namespace: llm-serving}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", templateRef: docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215, cacheModel: "no"}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: replicas-three, namespace: llm-serving}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", templateRef: docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215, replicas: "three"}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: replicas-negative, namespace: llm-serving}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", templateRef: docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215, replicas: -2}
"""
"""Issue 22's reproductions, next to the example's valid objects (the example's gpu-node-1 labels
``amd.com/gpu.count: "8"``, which met the string ``gpusPerReplica`` in a comparison)."""


def _volatile_removed(value: object) -> object:
    """An object without what differs between two runs: times and the discovery record's read time."""
    if isinstance(value, dict):
        return {
            k: _volatile_removed(v)
            for k, v in value.items()
            if k
            not in ("lastTransitionTime", "lastUsed", "resourceVersion", "uid", "creationTimestamp", "ownerReferences")
        }
    if isinstance(value, list):
        return [_volatile_removed(v) for v in value]
    if isinstance(value, str):
        return re.sub(r'"readAt":"[^"]*"', "", value)
    return value


def _events_said(objects: dict[tuple[str, str, str], dict]) -> set[tuple[str, str, str, str, str]]:
    """(kind, name, type, reason, message) of every Event among ``objects``."""
    return {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["type"], e["reason"], e["message"])
        for key, e in objects.items()
        if key[0] == "Event"
    }


def _all_objects(cluster: pathlib.Path) -> dict[tuple[str, str, str], dict]:
    found = {}
    for path in cluster.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind"):
                meta = doc.get("metadata") or {}
                found[(doc["kind"], meta.get("namespace") or "", meta.get("name") or "")] = doc
    return found


def test_invalid_objects_get_a_condition_naming_the_field_and_the_others_proceed(
    example_cluster: pathlib.Path, tmp_path: pathlib.Path, prefect_harness: None
) -> None:
    clean = tmp_path / "clean"
    shutil.copytree(example_cluster, clean)
    (example_cluster / "99-bad.yaml").write_text(BAD_OBJECTS)
    baseline = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(clean), "--registry-mirror", MIRROR])
    assert baseline.exit_code == 3, (
        baseline.output
    )  # the example alone: a template waits for its cache, services not Running yet
    result = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(example_cluster), "--registry-mirror", MIRROR])
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output

    objects = _all_objects(example_cluster)

    def failure(kind: str, name: str, namespace: str = "llm-serving") -> str:
        obj = objects[(kind, namespace, name)]
        # The boundary reader (tasks/boundary.py) marks what does not parse: Ready=False, reason InvalidSpec.
        [cond] = [c for c in obj["status"]["conditions"] if c["reason"] == "InvalidSpec"]
        return cond["message"]

    assert "spec.image" in failure("AIMClusterModel", "no-image", "")
    assert "spec.gpusPerReplica" in failure("AIMServiceTemplate", "string-gpus")
    assert objects[("AIMServiceTemplate", "llm-serving", "string-gpus")]["status"]["status"] == "Failed"
    assert "spec:" in failure("AIMService", "spec-string") or "spec: " in failure("AIMService", "spec-string")
    assert "spec.cacheModel" in failure("AIMService", "cache-no")
    assert "spec.replicas" in failure("AIMService", "replicas-three")
    assert "spec.replicas" in failure("AIMService", "replicas-negative")
    for name in ("spec-string", "cache-no", "replicas-three", "replicas-negative"):
        assert objects[("AIMService", "llm-serving", name)]["status"]["status"] == "Failed"
    assert [
        i["metadata"]["labels"]["aim.silogen.ai/service"] for i in _objects(example_cluster, "InferenceService")
    ] == ["llama-batch"]
    # Every valid object ends as it does without the invalid ones.
    # Events are named at random when posted: compared by what they say, the others as stored.
    expected = {key: _volatile_removed(obj) for key, obj in _all_objects(clean).items() if key[0] != "Event"}
    after = {key: _volatile_removed(obj) for key, obj in objects.items() if key in expected}
    assert after == expected
    assert _events_said(_all_objects(clean)) <= _events_said(objects)

    # validate agrees with the flows: the string gpusPerReplica is not valid.
    checked = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(example_cluster), "--json"])
    assert checked.exit_code == 3
    invalid = {row["name"]: row["result"] for row in json.loads(checked.stdout) if row["result"] != "valid"}
    assert "spec.gpusPerReplica" in invalid["string-gpus"] and "spec.cacheModel" in invalid["cache-no"]


def test_aim_takes_the_discovery_options(example_cluster: pathlib.Path, prefect_harness: None) -> None:
    """``aim`` has ``-n``, ``--resync-seconds`` and ``--insecure-registry`` as ``discover-models`` has."""
    result = CliRunner().invoke(
        app,
        [
            "reconcile-aim",
            "--cluster",
            str(example_cluster),
            "--registry-mirror",
            MIRROR,
            "-n",
            "other-namespace",
            "--resync-seconds",
            "3600",
            "--insecure-registry",
            "localhost:5000",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # Templates are created, resolved and rolled out in -n only: none of the example's llm-serving objects is touched.
    assert {t["namespace"] for t in report["templates"]} == {"other-namespace"} and report["services"] == []
    templates = _objects(example_cluster, "AIMServiceTemplate")
    assert {t["metadata"]["namespace"] for t in templates} == {"llm-serving", "other-namespace"}
    assert all("status" not in t for t in templates if t["metadata"]["namespace"] == "llm-serving")
    short = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(example_cluster), "--resync-seconds", "0"])
    assert short.exit_code == 2 and "Traceback" not in short.output


INVALID_CONFIG = """\
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMNamespaceConfig
metadata: {name: default, namespace: team-b}
spec:
  credentials: {huggingFaceToken: {name: hf-token, key: token}}
  images: {imagePullSecrets: [amd-registry, Team_B-Registry]}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMServiceTemplate
metadata: {name: llama-mi300x, namespace: team-b}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", metric: latency, precision: fp8, gpuModel: MI300X, gpusPerReplica: 1}
---
apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: chat, namespace: team-b}
spec: {model: "meta/llama-3.1-8b-instruct:0.8.4", templateRef: llama-mi300x}
"""
"""A namespace whose AIMNamespaceConfig names a pull secret no Secret can be called (upper case, ``_``)."""


def test_a_namespace_config_naming_an_invalid_secret_is_refused_and_nothing_renders_it(
    example_cluster: pathlib.Path, prefect_harness: None
) -> None:
    (example_cluster / "98-team-b.yaml").write_text(INVALID_CONFIG)
    result = CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(example_cluster), "--registry-mirror", MIRROR])
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    # The run reports the config naming the field (the kind has no status to carry a condition).
    assert (
        "AIMNamespaceConfig team-b/default: invalid: spec.images.imagePullSecrets[1]: "
        "'Team_B-Registry' is not a valid Secret name" in " ".join(result.output.split())
    ), result.output
    objects = _all_objects(example_cluster)
    # What depends on the config is never rendered with it: the service in team-b fails as without a config ...
    chat = objects[("AIMService", "team-b", "chat")]
    assert chat["status"]["status"] == "Failed"
    [failure] = [c for c in chat["status"]["conditions"] if c["type"] == "Failure"]
    assert failure["reason"] == "RuntimeConfigMissing"
    # ... no workload nor template is made in team-b, and no object names the Secret ...
    assert not [key for key in objects if key[1] == "team-b" and key[0] in ("InferenceService", "HTTPRoute", "Job")]
    assert not [
        t
        for t in _objects(example_cluster, "AIMServiceTemplate")
        if t["metadata"]["name"] != "llama-mi300x" and t["metadata"]["namespace"] == "team-b"
    ]
    written = [obj for key, obj in objects.items() if key[0] not in ("AIMNamespaceConfig", "Event")]
    assert "Team_B-Registry" not in json.dumps(written)
    # ... while the example's namespace proceeds.
    assert [i["metadata"]["namespace"] for i in _objects(example_cluster, "InferenceService")] == ["llm-serving"]


def _image_layout(root: pathlib.Path, repo: str, tag: str, labels: dict[str, str]) -> None:
    """An OCI image layout of one image whose config carries ``labels`` (no layers: discovery reads none)."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": labels}}).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": f"sha256:{hashlib.sha256(config).hexdigest()}",
                "size": len(config),
            },
            "layers": [],
        }
    ).encode()
    layout = root / repo
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for blob in (config, manifest):
        (blobs / hashlib.sha256(blob).hexdigest()).write_bytes(blob)
    entry = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": f"sha256:{hashlib.sha256(manifest).hexdigest()}",
        "size": len(manifest),
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')


def test_image_labels_too_large_for_the_models_annotations_are_its_condition_and_the_others_proceed(
    example_cluster: pathlib.Path, tmp_path: pathlib.Path, prefect_harness: None
) -> None:
    """Each AIM label may hold 64 KiB (an OCI label any size): together they can exceed the 256 KiB of annotations
    an object may have, and the API server refuses the record discovery keeps in one (422)."""
    images = tmp_path / "images"
    shutil.copytree(REPO / "deployments" / "example-images", images)
    big = "x" * 65_536
    labels = {f"com.amd.aim.{suffix}": big for suffix in ("title", "description.full", "release.notes")}
    labels |= {"com.amd.aim.model.canonicalName": "unit/big:1", "org.opencontainers.image.description": big}
    _image_layout(images, "unit/big-labels", "1", labels)
    (example_cluster / "97-big-labels.yaml").write_text(
        "apiVersion: aim.silogen.ai/v1alpha1\nkind: AIMClusterModel\nmetadata: {name: big-labels}\n"
        "spec: {name: 'unit/big:1', image: 'docker.io/unit/big-labels:1'}\n"
    )
    mirror = f"docker.io=oci-layout:{images}"
    result = CliRunner().invoke(
        app, ["discover-models", "--cluster", str(example_cluster), "--registry-mirror", mirror]
    )
    assert result.exit_code == 3, result.output  # degraded: one model's image could not be kept
    assert "Traceback" not in result.output
    models = {m["metadata"]["name"]: m for m in _objects(example_cluster, "AIMClusterModel")}
    big_model = models["big-labels"]
    conditions = {c["type"]: c for c in big_model["status"]["conditions"]}
    extracted = conditions["MetadataExtracted"]
    assert (extracted["status"], extracted["reason"]) == ("False", "MetadataExtractionFailed")
    assert "too large to keep in the aim.silogen.ai/image-metadata annotation" in extracted["message"]
    assert "above the 262144 (256 KiB) Kubernetes allows an object" in extracted["message"]
    assert "the largest labels: description.full (65538 bytes)" in extracted["message"]
    assert conditions["Ready"]["reason"] == "MetadataExtractionFailed"
    # What is kept is the failure, which fits; the labels are never written.
    record = json.loads(big_model["metadata"]["annotations"]["aim.silogen.ai/image-metadata"])
    assert record["error"]["reason"] == "MetadataExtractionFailed" and "metadata" not in record
    assert sum(len(k) + len(v) for k, v in big_model["metadata"]["annotations"].items()) < 2000
    # The other model proceeds as without it.
    llama = {c["type"]: c for c in models["meta-llama-3-1-8b-instruct"]["status"]["conditions"]}
    assert llama["MetadataExtracted"]["status"] == "True"
    owners = [
        (t["metadata"].get("labels") or {}).get("aim.silogen.ai/model")
        for t in _objects(example_cluster, "AIMServiceTemplate")
    ]
    assert "meta-llama-3-1-8b-instruct" in owners and "big-labels" not in owners


COPIED_SERVICE = """apiVersion: aim.silogen.ai/v1alpha1
kind: AIMService
metadata: {name: other, namespace: NAMESPACE, uid: UID}
spec:
  model: meta/llama-3.1-8b-instruct:0.8.4
  templateRef: docker-io-amdenterpriseai-aim-meta-llama-1x-mi300x-thr-fp8-8215
  cacheModel: false
"""


def test_a_copied_service_sharing_a_uid_deletes_no_ones_workload(
    example_cluster: pathlib.Path, prefect_harness: None
) -> None:
    """Before, the copy's run deleted llama-batch's InferenceService (and HTTPRoute in its namespace), every run."""
    CliRunner().invoke(app, ["reconcile-aim", "--cluster", str(example_cluster), "--registry-mirror", MIRROR])
    (isvc,) = _objects(example_cluster, "InferenceService")
    uid = isvc["metadata"]["ownerReferences"][0]["uid"]  # llama-batch's (the local backend gives it)
    children = sorted(
        (o["kind"], o["metadata"]["name"])
        for k in ("InferenceService", "HTTPRoute")
        for o in _objects(example_cluster, k)
    )
    assert len(children) == 2
    for namespace, scope in (("cache-demo", ["-n", "cache-demo"]), ("llm-serving", [])):
        (example_cluster / "42-other.yaml").write_text(
            COPIED_SERVICE.replace("NAMESPACE", namespace).replace("UID", uid)
        )
        result = CliRunner().invoke(app, ["rollout-services", "--cluster", str(example_cluster), *scope])
        after = sorted(
            (o["kind"], o["metadata"]["name"])
            for k in ("InferenceService", "HTTPRoute")
            for o in _objects(example_cluster, k)
        )
        assert after == children
        assert f"AIMService {namespace}/other: Failed (ValidationFailed)" in result.output, result.output
        other = yaml.safe_load((example_cluster / "42-other.yaml").read_text())
        ready = next(c for c in other["status"]["conditions"] if c["type"] == "Ready")
        assert f"uid {uid} is also the controller uid of InferenceService llm-serving/" in ready["message"]
