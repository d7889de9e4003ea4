"""Helpers every rollout shares: probes and graceful drain of an inference server, change detection by
revision hash, and the merge-patch that brings a live object to its rendered form.

A rendered object carries :data:`ANNOTATION_REVISION`, a hash of everything rendered except replicas
(owned by the optimizer once a workload exists): a live object with the same hash needs no write.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from engine.api.identity import identity_errors
from engine.units import parse_quantity

Manifest = dict[str, Any]

ANNOTATION_REVISION = "modelplane.io/revision"
"""Hash of the rendered object (without replicas): equal hashes mean nothing to write."""
ANNOTATION_BASE_REVISION = "modelplane.io/base-revision"
"""Hash of a workload rendered without LoRA adapters: equal while only the adapters change."""
ANNOTATION_LAST_APPLIED = "modelplane.io/last-applied"
"""The non-metadata part last rendered (JSON), so an update removes only what Modelplane rendered before; a
credential's plain env value is kept there as its hash (:func:`without_credential_values`)."""


@dataclass(frozen=True)
class FieldError:
    """One reason the Model cannot be rolled out, naming the field as people write it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


MAX_QUANTITY = 2**63 - 1
"""The largest quantity Kubernetes keeps as written (a larger one is capped to it)."""


def is_extended_resource(name: str) -> bool:
    """Whether a resource name is an extended resource (``nvidia.com/gpu``, ``amd.com/gpu``, ...): one with a
    domain outside ``kubernetes.io``, which Kubernetes counts in whole units only."""
    return "/" in name and "kubernetes.io/" not in name


def whole_count(value: str | int) -> int:
    """An extended resource's quantity as the whole number Kubernetes requires of it: any spelling of an integer
    (``2``, ``"2"``, ``"1e1"``, ``"2000m"``) is its value; ``ValueError`` saying why for a fraction (``"1.5"``,
    ``"500m"``), a negative count, one above :data:`MAX_QUANTITY` or what is not a quantity."""
    amount = parse_quantity(value)
    if not amount.is_finite() or amount != amount.to_integral_value():
        raise ValueError(f"{value!r} is not a whole number (an extended resource is counted in whole units)")
    if amount < 0:
        raise ValueError(f"{value!r} is negative")
    if amount > Decimal(MAX_QUANTITY):
        raise ValueError(f"{value!r} is above {MAX_QUANTITY}")
    return int(amount)


def resource_errors(resources: Mapping[str, str | int] | None, path: str) -> list[FieldError]:
    """Each extended resource of ``resources`` (limits or requests) that is not a whole count
    (:func:`whole_count`), naming it as ``path["name"]``: the API server would refuse the workload."""
    errors: list[FieldError] = []
    for name, value in (resources or {}).items():
        if is_extended_resource(name):
            try:
                whole_count(value)
            except ValueError as exc:
                errors.append(FieldError(f'{path}["{name}"]', str(exc)))
    return errors


def identity_problems(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """What the API server would refuse in the identity of each rendered object (its name by its kind's rule, its
    namespace, labels and annotations), as ``Kind/name: field: reason``. Checked on all of a run's objects before
    its first write, so a run that cannot write every object writes none of them."""
    return [
        f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}: {field}: {reason}"
        for obj in objects
        for field, reason in identity_errors(obj)
    ]


def without_status(manifest: Mapping[str, Any]) -> Manifest:
    """A custom resource without its ``status``: what a rollout reads of an object whose status it writes itself,
    so a malformed status (written by hand) is replaced by the next status write instead of refusing the spec."""
    return {key: value for key, value in manifest.items() if key != "status"}


def drain_script(port: int, engine: str) -> str:
    """preStop: wait until the engine has no running and no waiting requests (Kthena's graceful drain)."""
    names = (
        ("vllm:num_requests_running", "vllm:num_requests_waiting")
        if engine == "vllm"
        else ("sglang:num_running_reqs", "sglang:num_queue_reqs")
    )
    return (
        "import time, urllib.request\n"
        f"names = {names!r}\n"
        "while True:\n"
        "    try:\n"
        f"        text = urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=5).read().decode()\n"
        "    except Exception:\n"
        "        break\n"
        "    busy = [l for l in text.splitlines() if l.startswith(names) and float(l.rsplit(' ', 1)[-1]) > 0]\n"
        "    if not busy:\n"
        "        break\n"
        "    time.sleep(1)\n"
    )


def probe(path: str, port: int, period: int, failures: int) -> Manifest:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }


_SYSTEM_FIELDS = ("apiVersion", "kind", "metadata", "status")

_CREDENTIAL_NAME = re.compile(r"(^|_)KEY$|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|^AWS_")
_NOT_CREDENTIALS = frozenset({"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"})


def is_credential_name(name: str) -> bool:
    """Whether an env variable's name says it holds a credential: ``*_KEY``, ``*SECRET*``, ``*TOKEN*``,
    ``*PASSWORD*``, ``*CREDENTIAL*`` and the ``AWS_*`` names (but the region and endpoint), any case."""
    upper = name.upper()
    return upper not in _NOT_CREDENTIALS and bool(_CREDENTIAL_NAME.search(upper))


def value_digest(name: str, value: str) -> str:
    """What stands for a credential's value where it must not be copied: a hash, so a change still shows."""
    return "sha256:" + hashlib.sha256(f"{name}\0{value}".encode()).hexdigest()[:16]


def without_credential_values(node: Any) -> Any:
    """``node`` (a rendered body) with the plain ``value`` of every ``env`` entry whose name is a credential's
    (:func:`is_credential_name`) replaced by its :func:`value_digest`: what is kept in annotations."""
    if isinstance(node, list):
        return [without_credential_values(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: without_credential_values(value) for key, value in node.items()}
    if isinstance(node.get("env"), list):
        out["env"] = [_masked_env(item) for item in node["env"]]
    return out


def _masked_env(item: Any) -> Any:
    if isinstance(item, dict) and isinstance(item.get("value"), str) and is_credential_name(str(item.get("name"))):
        return {**item, "value": value_digest(str(item["name"]), item["value"])}
    return item


def rendered_body(obj: Mapping[str, Any]) -> Manifest:
    """The non-metadata part of a rendered object (``spec``, ``data``, ...) without ``spec.replicas``."""
    body: Manifest = json.loads(json.dumps({k: v for k, v in obj.items() if k not in _SYSTEM_FIELDS}, sort_keys=True))
    if isinstance(body.get("spec"), dict):
        body["spec"].pop("replicas", None)
    return body


def revision(obj: Mapping[str, Any]) -> str:
    """A stable hash of what was rendered, ignoring replicas (the optimizer owns them) and the
    bookkeeping annotations."""
    body = json.loads(json.dumps(obj, sort_keys=True))
    body.get("spec", {}).pop("replicas", None)
    annotations = body.get("metadata", {}).get("annotations", {})
    for key in (ANNOTATION_REVISION, ANNOTATION_BASE_REVISION, ANNOTATION_LAST_APPLIED):
        annotations.pop(key, None)
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def stamp(obj: Manifest, base_revision: str | None = None) -> Manifest:
    """``obj`` with its revision annotation, what was rendered (so a later update removes exactly the
    fields no longer rendered and leaves fields others set alone, as ``kubectl apply`` does), and for
    workloads the revision without LoRA adapters."""
    meta = obj.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    annotations[ANNOTATION_REVISION] = revision(obj)
    last_applied = without_credential_values(rendered_body(obj))  # a credential's value never goes into metadata
    annotations[ANNOTATION_LAST_APPLIED] = json.dumps(last_applied, sort_keys=True, separators=(",", ":"))
    if base_revision is not None:
        annotations[ANNOTATION_BASE_REVISION] = base_revision
    meta["annotations"] = annotations
    return obj


def annotation(obj: Mapping[str, Any] | None, key: str) -> str | None:
    """One annotation of ``obj`` (``None`` when absent)."""
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(key)


def merge_diff(old: Any, new: Any) -> Any:
    """The RFC 7386 merge-patch turning ``old`` into ``new`` (removed keys become ``None``)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = (
                merge_diff(old[key], value) if isinstance(old[key], dict) and isinstance(value, dict) else value
            )
    return patch


def update_patch(live: Mapping[str, Any], desired: Mapping[str, Any]) -> Manifest:
    """The merge-patch bringing ``live`` to ``desired``: our labels/annotations/owners set (others kept);
    the fields we render set, and the ones we rendered last time but no longer removed (the previous
    rendering comes from :data:`ANNOTATION_LAST_APPLIED`; without it, from the live object). Fields the
    API server or others set and we never rendered are left alone."""
    meta = desired.get("metadata") or {}
    patch: Manifest = {"metadata": {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}}
    try:
        previous = json.loads(annotation(live, ANNOTATION_LAST_APPLIED) or "null")
    except ValueError:
        previous = None
    if not isinstance(previous, dict):
        previous = rendered_body(live)
    body = rendered_body(desired)
    for key in sorted(set(previous) | set(body)):
        diff = merge_diff(previous.get(key), body.get(key))
        if diff != {}:
            patch[key] = diff
    replicas = (desired.get("spec") or {}).get("replicas")
    if replicas is not None:
        patch.setdefault("spec", {})["replicas"] = replicas
    return patch
