"""The warm-caches flow on the local backend: real S3 (moto) and Hugging Face (olah) sources, the fill in
process, PVCs as directories under the state directory."""

from __future__ import annotations

import json
import pathlib
import uuid
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from engine.caches.identity import CACHE_MARKER
from flows.cli import app
from flows.warm_caches import warm_caches
from tasks.clients.cluster import LocalCluster, ObjectRef
from tasks.warm_caches import VOLUMES_DIR, local_volume
from tests.flows.artifacts import prefect_events
from tests.servers.capture import captured_listener
from tests.servers.hftest.fixture import HfServer
from tests.servers.s3test.fixture import S3Server

MC = ("aim.silogen.ai/v1alpha1", "ModelCache")
NS = "models"
FILES = {"config.json": b'{"model_type": "llama"}', "weights/model.safetensors": bytes(range(256)) * 4096}


def write(cluster: pathlib.Path, name: str, *docs: dict[str, Any]) -> None:
    cluster.mkdir(parents=True, exist_ok=True)
    (cluster / name).write_text(yaml.safe_dump_all(docs, sort_keys=False))


def write_with_s3(cluster: pathlib.Path, s3: S3Server, *docs: dict[str, Any]) -> None:
    """``cache.yaml``: the S3 credentials Secret and the namespace's S3 endpoint config, then ``docs``."""
    write(
        cluster, "cache.yaml", secret("s3-creds", id=s3.access_key, secret=s3.secret_key), *namespace_config(s3), *docs
    )


def s3_model(s3: S3Server) -> str:
    bucket = s3.new_bucket()
    client = s3.client()
    for key, body in FILES.items():
        client.put_object(Bucket=bucket, Key=f"tiny/{key}", Body=body)
    return f"s3://{bucket}/tiny"


def namespace_config(
    s3: S3Server, secret: str = "s3-creds", storage_class: str | None = "shared"
) -> list[dict[str, Any]]:
    config: dict[str, Any] = {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMNamespaceConfig",
        "metadata": {"name": "default", "namespace": NS},
        "spec": {
            "credentials": {
                "s3": [
                    {
                        "endpointUrl": s3.endpoint,
                        "accessKeyId": {"name": secret, "key": "id"},
                        "secretAccessKey": {"name": secret, "key": "secret"},
                    }
                ]
            }
        },
    }
    if storage_class:
        config["spec"]["cacheStorageClassName"] = storage_class
    return [config]


def secret(name: str, **values: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "stringData": values}


def model_cache(name: str, uri: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": MC[0],
        "kind": MC[1],
        "metadata": {"name": name, "namespace": NS},
        "spec": {"sourceUri": uri, **spec},
    }


def tiny_model(uri: str, **metadata: Any) -> dict[str, Any]:
    """A Kthena Model ``tiny`` of one vLLM backend serving ``uri``, with ``metadata`` added to its own."""
    return {
        "apiVersion": "registry.volcano.sh/v1alpha1",
        "kind": "Model",
        "metadata": {"name": "tiny", "namespace": NS, **metadata},
        "spec": {
            "backends": [
                {
                    "name": "vllm",
                    "type": "vLLM",
                    "modelURI": uri,
                    "minReplicas": 1,
                    "maxReplicas": 1,
                    "workers": [{"type": "server", "image": "vllm/vllm-openai:v0.10.1", "replicas": 1, "pods": 1}],
                }
            ]
        },
    }


def cache(cluster: pathlib.Path, name: str) -> dict[str, Any]:
    return LocalCluster(cluster).get(*MC, name, NS)


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def events(cluster: pathlib.Path) -> list[str]:
    return [e["reason"] for e in LocalCluster(cluster).list("v1", "Event", NS)]


@pytest.fixture()
def cluster_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / f"cluster-{uuid.uuid4().hex[:6]}"


def test_an_s3_cache_is_sized_created_filled_and_verified(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    uri = s3_model(s3_server)
    write_with_s3(cluster_dir, s3_server, model_cache("tiny", uri))

    report = warm_caches(cluster=str(cluster_dir))

    stored = cache(cluster_dir, "tiny")
    assert stored["status"]["status"] == "Available", report
    assert stored["status"]["persistentVolumeClaim"] == "tiny-cache"
    assert stored["status"]["observedGeneration"] == stored["metadata"]["generation"]
    assert conditions(stored) == {
        "StorageReady": ("True", "PVCBound"),
        "Ready": ("True", "Warm"),
        "Progressing": ("False", "Warm"),
        "Failure": ("False", "NoFailure"),
    }
    pvc = LocalCluster(cluster_dir).get("v1", "PersistentVolumeClaim", "tiny-cache", NS)
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "shared",
    }
    volume = local_volume(LocalCluster(cluster_dir), NS, "tiny-cache")
    assert str(volume).startswith(str(cluster_dir / ".modelplane-volumes"))
    for key, body in FILES.items():
        assert (volume / key).read_bytes() == body
    marker = json.loads((volume / CACHE_MARKER).read_text())
    assert marker["source"] == uri
    assert sorted(events(cluster_dir)) == ["CacheAvailable", "FillStarted"]
    assert [r.action for r in report.rows] == ["filled in-process (attempt 1)"]

    assert "modelplane.aim.cache.available" in prefect_events(
        "modelplane.aim.cache.", f"modelplane.aim.cache.{NS}.tiny"
    )

    # A second pass finds it Available and does nothing.
    version = stored["metadata"]["resourceVersion"]
    again = warm_caches(cluster=str(cluster_dir))
    assert [r.action for r in again.rows] == ["none"]
    assert cache(cluster_dir, "tiny")["metadata"]["resourceVersion"] == version


def test_a_hugging_face_cache_with_a_mirror_in_spec_env(
    prefect_harness: None, hf_server: HfServer, cluster_dir: pathlib.Path
) -> None:
    repo = hf_server.repos.new_repo_id("tiny")
    hf_server.repos.commit(repo, {"config.json": b"{}", "model.safetensors": b"x" * 200_000, "README.md": b"hi"})
    write(
        cluster_dir,
        "cache.yaml",
        model_cache(
            "tiny-hf",
            f"hf://{repo}?allow=*.json&allow=*.safetensors",
            size="1Gi",
            env=[{"name": "HF_ENDPOINT", "value": hf_server.endpoint}],
        ),
    )

    warm_caches(cluster=str(cluster_dir))

    stored = cache(cluster_dir, "tiny-hf")
    assert stored["status"]["status"] == "Available"
    volume = local_volume(LocalCluster(cluster_dir), NS, "tiny-hf-cache")
    assert sorted(p.name for p in volume.iterdir() if not p.name.startswith(".")) == [
        "config.json",
        "model.safetensors",
    ]
    pvc = LocalCluster(cluster_dir).get("v1", "PersistentVolumeClaim", "tiny-hf-cache", NS)
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"  # an explicit spec.size gets no headroom on top
    assert "storageClassName" not in pvc["spec"]  # no class anywhere: the cluster default


def test_a_wrong_key_fails_with_a_reason_no_secret_and_is_retried_then_given_up(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    uri = s3_model(s3_server)
    wrong = "WRONGsecretVALUE1234567890"
    write(
        cluster_dir,
        "cache.yaml",
        secret("s3-creds", id=s3_server.access_key, secret=wrong),
        *namespace_config(s3_server),
        model_cache("tiny", uri, size="1Gi"),
    )

    report = warm_caches(cluster=str(cluster_dir), max_fill_attempts=2, retry_backoff_s=3600)
    stored = cache(cluster_dir, "tiny")
    assert stored["status"]["status"] == "Failed"
    assert conditions(stored)["Failure"] == ("True", "AuthenticationFailed")
    assert conditions(stored)["Progressing"] == ("False", "RetryBackoff")
    text = (cluster_dir / "cache.yaml").read_text() + json.dumps(report.as_json()) + json.dumps(stored["status"])
    assert wrong not in text.replace(f"secret: {wrong}", "")  # only the Secret itself holds it
    assert "Warning" in {e["type"] for e in LocalCluster(cluster_dir).list("v1", "Event", NS)}

    # Within the backoff nothing is retried.
    warm_caches(cluster=str(cluster_dir), max_fill_attempts=2, retry_backoff_s=3600)
    assert cache(cluster_dir, "tiny")["metadata"]["annotations"]["modelplane.io/fill-attempts"].endswith("/1")
    # After it, one more attempt; then it is given up and stays so.
    warm_caches(cluster=str(cluster_dir), max_fill_attempts=2, retry_backoff_s=0)
    warm_caches(cluster=str(cluster_dir), max_fill_attempts=2, retry_backoff_s=0)
    stored = cache(cluster_dir, "tiny")
    assert stored["metadata"]["annotations"]["modelplane.io/fill-attempts"].endswith("/2")
    assert stored["status"]["status"] == "Failed"
    assert conditions(stored)["Progressing"] == ("False", "AuthenticationFailed")
    # The key is rejected when the source is sized, before any fill starts.
    assert "FillStarted" not in events(cluster_dir) and "AuthenticationFailed" in events(cluster_dir)


def test_a_volume_too_small_fails_before_downloading(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    uri = s3_model(s3_server)
    small = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "tiny-cache", "namespace": NS, "labels": {"modelplane.io/cache": "tiny"}},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "512Ki"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "512Ki"}},
    }
    write_with_s3(cluster_dir, s3_server, model_cache("tiny", uri, size="1Gi"), small)

    warm_caches(cluster=str(cluster_dir))

    stored = cache(cluster_dir, "tiny")
    assert stored["status"]["status"] == "Failed"
    assert conditions(stored)["Failure"] == ("True", "InsufficientSpace")
    assert "never resized" in {c["type"]: c for c in stored["status"]["conditions"]}["Failure"]["message"]
    volume = local_volume(LocalCluster(cluster_dir), NS, "tiny-cache")
    assert not volume.exists() or not any(volume.rglob("*.safetensors"))
    pvc = LocalCluster(cluster_dir).get("v1", "PersistentVolumeClaim", "tiny-cache", NS)
    assert pvc["spec"]["resources"]["requests"]["storage"] == "512Ki"  # never resized


def test_consumers_share_one_cache_and_a_persons_cache_is_adopted(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    uri = s3_model(s3_server)
    template = {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMServiceTemplate",
        "metadata": {"name": "t", "namespace": NS},
        "spec": {"model": "m", "warmCache": True},
        "status": {"status": "Available", "modelSources": [uri]},
    }
    service = {
        "apiVersion": "aim.silogen.ai/v1alpha1",
        "kind": "AIMService",
        "metadata": {"name": "chat", "namespace": NS},
        "spec": {"model": "m", "templateRef": "t"},
    }
    write_with_s3(cluster_dir, s3_server, template, service, model_cache("mine", uri, size="1Gi"))

    report = warm_caches(cluster=str(cluster_dir))

    caches = LocalCluster(cluster_dir).list(*MC, NS)
    assert [c["metadata"]["name"] for c in caches] == ["mine"]
    assert caches[0]["metadata"]["annotations"]["modelplane.io/requested-by"] == (
        "AIMServiceTemplate/models/t,AIMService/models/chat"  # in the order they asked
    )
    assert caches[0]["status"]["status"] == "Available"
    assert sorted(report.ensured) == [
        "models/mine <- AIMService/models/chat",
        "models/mine <- AIMServiceTemplate/models/t",
    ]
    assert (
        prefect_events("modelplane.aim.cache.requested", f"modelplane.aim.cache.{NS}.mine") == []
    )  # adopted, not created


def _settled(name: str, last_used: str, claim: str | None = None) -> dict[str, Any]:
    """An Available ModelCache last used at ``last_used``, whose status names ``claim`` (default: its own PVC)."""
    return {
        **model_cache(name, f"s3://bucket/{name}", size="1Gi"),
        "status": {"status": "Available", "persistentVolumeClaim": claim or f"{name}-cache", "lastUsed": last_used},
    }


def _claim(name: str) -> dict[str, Any]:
    """The PVC warm-caches made for the cache ``name`` (labelled as its own), bound at 2Gi."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{name}-cache", "namespace": NS, "labels": {"modelplane.io/cache": name}},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "2Gi"}},
    }


def test_gc_deletes_only_unused_and_unmounted_caches(prefect_harness: None, cluster_dir: pathlib.Path) -> None:
    mounting = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "s"}},
            "template": {
                "metadata": {"labels": {"app": "s"}},
                "spec": {
                    "containers": [{"name": "vllm", "image": "vllm"}],
                    "volumes": [
                        {"name": "m", "persistentVolumeClaim": {"claimName": "mounted-cache", "readOnly": True}}
                    ],
                },
            },
        },
    }
    write(
        cluster_dir,
        "caches.yaml",
        _settled("stale", "2020-01-01T00:00:00Z"),
        _claim("stale"),
        _settled("mounted", "2020-01-01T00:00:00Z"),
        _claim("mounted"),
        mounting,
        _settled("fresh", "2999-01-01T00:00:00Z"),
        _claim("fresh"),
    )
    volume = local_volume(LocalCluster(cluster_dir), NS, "stale-cache")
    volume.mkdir(parents=True)
    (volume / "weights").write_bytes(b"x")

    from datetime import timedelta

    report = warm_caches(cluster=str(cluster_dir), include_consumers=False, gc_unused_after=timedelta(days=7))

    remaining = {c["metadata"]["name"] for c in LocalCluster(cluster_dir).list(*MC, NS)}
    assert remaining == {"mounted", "fresh"}
    claims = {p["metadata"]["name"] for p in LocalCluster(cluster_dir).list("v1", "PersistentVolumeClaim", NS)}
    assert claims == {"mounted-cache", "fresh-cache"}
    assert not volume.exists()
    assert len(report.freed) == 1 and report.freed[0].startswith(
        "models/stale (stale-cache, 2Gi): last used 2020-01-01"
    )


def test_gc_deletes_no_directory_and_no_claim_that_a_status_names_but_the_cache_does_not_own(
    prefect_harness: None, cluster_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A status is anyone's to write. Before, an unused cache whose status named ``/some/dir`` (or
    ``../../dir``) had that directory deleted with everything in it, and one naming another cache's PVC deleted
    that PVC; now the cache alone goes, and the line it leaves says it freed no PVC."""
    from datetime import timedelta

    outside = tmp_path / "victim"
    outside.mkdir()
    (outside / "keep").write_bytes(b"x")
    write(
        cluster_dir,
        "caches.yaml",
        _settled("absolute", "2020-01-01T00:00:00Z", claim=str(outside)),
        _settled("climbing", "2020-01-01T00:00:00Z", claim="../../../victim"),
        _settled("borrowing", "2020-01-01T00:00:00Z", claim="other-cache"),
        _settled("other", "2999-01-01T00:00:00Z"),
        _claim("other"),
    )
    other_volume = local_volume(LocalCluster(cluster_dir), NS, "other-cache")
    other_volume.mkdir(parents=True)
    (other_volume / "weights").write_bytes(b"x")

    report = warm_caches(cluster=str(cluster_dir), include_consumers=False, gc_unused_after=timedelta(days=7))

    assert (outside / "keep").exists() and (other_volume / "weights").exists()
    claims = {p["metadata"]["name"] for p in LocalCluster(cluster_dir).list("v1", "PersistentVolumeClaim", NS)}
    assert claims == {"other-cache"}
    assert sorted(line.split(":")[0] for line in report.freed) == [
        "models/absolute (no PVC)",
        "models/borrowing (no PVC)",
        "models/climbing (no PVC)",
    ]


def test_a_fill_through_a_volume_link_pointing_outside_fails_that_cache_and_writes_nothing_there(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Before, a ``.modelplane-volumes`` link to a directory outside the cluster folder took the fill's files
    there; now that cache's reconcile fails, a line of the degraded run naming the link's target, and nothing is
    written through it."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    write_with_s3(cluster_dir, s3_server, model_cache("tiny", s3_model(s3_server)))
    (cluster_dir / VOLUMES_DIR).symlink_to(outside, target_is_directory=True)

    report = warm_caches(cluster=str(cluster_dir))

    assert list(outside.iterdir()) == []
    assert [line for line in report.degraded if "ModelCache models/tiny" in line and "outside" in line], report


@pytest.mark.parametrize("claim", ["..", "../victim", "/tmp/victim", "a/b", ""])
def test_a_volume_directory_is_one_segment_below_the_cluster_folder(cluster_dir: pathlib.Path, claim: str) -> None:
    with pytest.raises(ValueError, match="cannot name a volume directory"):
        local_volume(LocalCluster(cluster_dir), NS, claim)


def test_a_volume_directory_reached_through_a_symbolic_link_outside_is_refused(
    cluster_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A fill writes there and garbage collection deletes there: a link planted in the cluster folder does not
    take either outside it."""
    cluster_dir.mkdir()
    (cluster_dir / VOLUMES_DIR).symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ValueError, match="outside"):
        local_volume(LocalCluster(cluster_dir), NS, "tiny-cache")


def test_an_invalid_source_fails_with_the_field_and_others_proceed(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    uri = s3_model(s3_server)
    write_with_s3(
        cluster_dir, s3_server, model_cache("bad", "ftp://nowhere/model", size="1Gi"), model_cache("good", uri)
    )

    warm_caches(cluster=str(cluster_dir))

    bad = cache(cluster_dir, "bad")
    assert bad["status"]["status"] == "Failed"
    assert conditions(bad)["Failure"] == ("True", "InvalidSource")
    assert {c["type"]: c for c in bad["status"]["conditions"]}["Failure"]["message"].startswith("spec.sourceUri:")
    assert cache(cluster_dir, "good")["status"]["status"] == "Available"


def test_a_kthena_backend_without_cache_uri_gets_a_new_shared_cache(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    from engine.caches.identity import cache_name
    from engine.caches.sources import parse_source

    uri = s3_model(s3_server)
    model = tiny_model(uri)
    write_with_s3(cluster_dir, s3_server, model)

    report = warm_caches(cluster=str(cluster_dir))

    assert not report.problems, report.problems
    [created] = LocalCluster(cluster_dir).list(*MC, NS)
    name = cache_name(parse_source(uri))
    assert created["metadata"]["name"] == name
    assert created["metadata"]["annotations"]["modelplane.io/requested-by"] == "Model/models/tiny"
    assert created["status"]["status"] == "Available"
    assert prefect_events("modelplane.aim.cache.requested", f"modelplane.aim.cache.{NS}.{name}") == [
        "modelplane.aim.cache.requested"
    ]


def test_a_consumer_or_cache_being_deleted_gets_no_cache_and_no_fill(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    """A Kthena Model and a ModelCache that finalizers hold in deletion: the Model requests no cache and the cache
    gets no PVC and no fill (they would outlive their owners). Before, the Model's request was still met
    (``models/going <- Model/models/tiny``: the cache annotated for a consumer that is going away)."""
    uri = s3_model(s3_server)
    holding = {"finalizers": ["example.com/hold"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
    model = tiny_model(uri, **holding)
    going = model_cache("going", uri, size="1Gi")
    going["metadata"].update(holding)
    write_with_s3(cluster_dir, s3_server, model, going)

    report = warm_caches(cluster=str(cluster_dir))

    assert not report.problems and report.rows == [] and report.ensured == []
    [held] = LocalCluster(cluster_dir).list(*MC, NS)
    assert held["metadata"]["name"] == "going" and "status" not in held
    assert LocalCluster(cluster_dir).list("v1", "PersistentVolumeClaim", NS) == []


def test_consumers_are_read_as_api_models_and_an_invalid_one_is_reported_by_its_field(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    """Issue 22: the consumers are parsed once at the boundary. ``cacheModel: "no"`` and a Kthena ``backends``
    that is not a list are refused naming the field (the AIMService marked InvalidSpec, as before) and request
    nothing; a template's ``modelSources`` entry that is not a source is a problem naming it, its other
    entries are still cached; the valid consumers are served as without them."""
    from tasks.boundary import collecting

    uri = s3_model(s3_server)
    aim = "aim.silogen.ai/v1alpha1"
    template = {
        "apiVersion": aim,
        "kind": "AIMServiceTemplate",
        "metadata": {"name": "t", "namespace": NS},
        "spec": {"model": "m", "warmCache": True},
        "status": {"status": "Available", "modelSources": [42, uri]},
    }
    good = {"apiVersion": aim, "kind": "AIMService", "metadata": {"name": "chat", "namespace": NS}}
    good["spec"] = {"model": "m", "templateRef": "t"}
    no = {"apiVersion": aim, "kind": "AIMService", "metadata": {"name": "no", "namespace": NS}}
    no["spec"] = {"model": "m", "templateRef": "t", "cacheModel": "no"}
    kthena = {
        "apiVersion": "registry.volcano.sh/v1alpha1",
        "kind": "Model",
        "metadata": {"name": "odd", "namespace": NS},
        "spec": {"backends": {"name": "vllm", "type": "vLLM", "modelURI": "hf://org/other"}},
    }
    write_with_s3(cluster_dir, s3_server, template, good, no, kthena)

    with collecting() as rejected:
        report = warm_caches(cluster=str(cluster_dir))

    assert sorted({line.split(": invalid: ")[1].split(":")[0] for line in rejected}) == [
        "spec.backends",
        "spec.cacheModel",
    ]
    assert [p.split(": ")[:2] for p in report.problems] == [  # the service caches what its template lists
        ["AIMServiceTemplate/models/t", "status.modelSources[0]"],
        ["AIMService/models/chat", "status.modelSources[0]"],
    ]
    [created] = LocalCluster(cluster_dir).list(*MC, NS)
    assert created["spec"]["sourceUri"] == uri and created["status"]["status"] == "Available"
    assert created["metadata"]["annotations"]["modelplane.io/requested-by"] == (
        "AIMServiceTemplate/models/t,AIMService/models/chat"  # in the order they asked
    )
    marked = LocalCluster(cluster_dir).get(aim, "AIMService", "no", NS)["status"]
    assert marked["status"] == "Failed" and marked["conditions"][-1]["reason"] == "InvalidSpec"
    assert marked["conditions"][-1]["message"].startswith("spec.cacheModel")


def test_a_refill_keeps_unchanged_transition_times_and_last_used(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    """The engine decides from the typed previous status (as read, then as the pass's own writes returned it):
    a condition whose status does not change keeps its lastTransitionTime and lastUsed is kept, through a
    pass that writes the cache twice (its fill count, then Progressing) before it is Available again."""
    uri = s3_model(s3_server)
    write_with_s3(cluster_dir, s3_server, model_cache("tiny", uri))
    warm_caches(cluster=str(cluster_dir))
    local = LocalCluster(cluster_dir)
    filled = cache(cluster_dir, "tiny")
    old = "2020-01-01T00:00:00Z"
    aged = [{**c, "lastTransitionTime": old} for c in filled["status"]["conditions"]]
    local.patch_status(
        ObjectRef.of(filled), {"conditions": aged, "lastUsed": "2026-01-02T03:04:05Z"}
    )  # as a rollout and earlier passes left it
    (local_volume(local, NS, "tiny-cache") / CACHE_MARKER).unlink()  # the files must be fetched again

    report = warm_caches(cluster=str(cluster_dir))

    stored = cache(cluster_dir, "tiny")
    assert [r.action for r in report.rows] == ["filled in-process (attempt 2)"]
    assert stored["status"]["status"] == "Available" and stored["status"]["lastUsed"] == "2026-01-02T03:04:05Z"
    times = {c["type"]: c["lastTransitionTime"] for c in stored["status"]["conditions"]}
    assert times["StorageReady"] == old and times["Failure"] == old  # unchanged through the whole pass
    assert times["Ready"] != old and times["Progressing"] != old  # they went through Progressing


def test_an_endpoint_in_the_uri_never_receives_the_namespace_credentials(
    prefect_harness: None, s3_server: S3Server, cluster_dir: pathlib.Path
) -> None:
    uri = s3_model(s3_server)
    with captured_listener() as listener:
        write_with_s3(
            cluster_dir,
            s3_server,
            model_cache("redirected", f"{uri}?endpoint={listener.url}", size="1Gi"),
            model_cache("same-endpoint", f"{uri}?endpoint={s3_server.endpoint}"),
        )
        report = warm_caches(cluster=str(cluster_dir))
        validated = CliRunner().invoke(app, ["validate-manifests", "--cluster", str(cluster_dir), "--json"])
    assert listener.connections == []  # no connection: no access key id, no signed request
    assert s3_server.access_key.encode() not in listener.received
    redirected = cache(cluster_dir, "redirected")
    failure = {c["type"]: c for c in redirected["status"]["conditions"]}["Failure"]
    assert redirected["status"]["status"] == "Failed"
    assert (failure["status"], failure["reason"]) == ("True", "EndpointNotAllowed")
    assert failure["message"].startswith(f"spec.sourceUri: endpoint {listener.url} is not where the S3 credentials")
    assert s3_server.access_key not in failure["message"] and s3_server.secret_key not in failure["message"]
    assert cache(cluster_dir, "same-endpoint")["status"]["status"] == "Available"  # the configured endpoint: fine
    rows = {r.name: r for r in report.rows}
    assert rows["redirected"].reason == "EndpointNotAllowed"
    assert validated.exit_code == 3, validated.output
    results = {row["name"]: row["result"] for row in json.loads(validated.stdout)}
    assert results["redirected"] == failure["message"] and results["same-endpoint"] == "valid"


@pytest.mark.parametrize(
    "ref",
    ["abc", {"name": "hf-token"}, {"key": "token"}, {"name": ["a"], "key": "token"}, {"name": "", "key": "token"}],
)
def test_an_env_reference_that_names_no_secret_and_key_is_a_failure_not_a_crash(
    cluster_dir: pathlib.Path, ref: object
) -> None:
    """Before, each of these ended the whole warm-caches pass in a traceback (TypeError, KeyError)."""
    from tasks.cache_env import resolve_env

    write(cluster_dir, "ns.yaml", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    env = [{"name": "PLAIN", "value": "x"}, {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]
    values, failure = resolve_env(LocalCluster(cluster_dir), NS, env)
    assert failure is not None and failure.reason == "CredentialsMissing"
    assert "env HF_TOKEN: valueFrom.secretKeyRef must name a Secret and a key" in failure.message
    assert values == {"PLAIN": "x"}


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        ({"name": "HF_Token", "key": "token"}, "valueFrom.secretKeyRef.name: 'HF_Token' is not a valid Secret name"),
        ({"name": "hf-token", "key": "../token"}, "valueFrom.secretKeyRef.key: '../token' is not a valid Secret key"),
    ],
)
def test_an_env_reference_no_secret_can_answer_is_refused_by_the_models_check_never_read(
    cluster_dir: pathlib.Path, ref: dict[str, str], said: str
) -> None:
    """The fill's env (a namespace config's credentials, a cache's own env) is checked as the API models check a
    ``secretKeyRef``: one check (engine.api.secrets), and no Secret is looked up by such a name."""
    from tasks.cache_env import resolve_env

    class NoReads(LocalCluster):
        def get(self, *args: object, **kwargs: object) -> dict:
            raise AssertionError(f"read {args}")

    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]
    values, failure = resolve_env(NoReads(cluster_dir), NS, env)
    assert failure is not None and failure.reason == "CredentialsMissing" and values == {}
    assert failure.message.startswith(f"env HF_TOKEN: {said}") and failure.message.endswith("; fix the reference")
