"""An object's identity checked as the Kubernetes API server checks it, before anything is built from it.

An object's name and namespace become file paths (the local backend), REST paths (the real cluster) and the
names of the objects a rollout renders. The API server refuses an object whose identity breaks apimachinery's
rules; manifest files and hand-made dumps are not so guarded, so every object that enters Modelplane passes
:func:`identity_errors` first (``validate-manifests`` and the flows' boundary reader through
:func:`engine.api.validate.check_identity`, both backends before they address an object), and one that fails is
reported and never used.

The rules are apimachinery's (``k8s.io/apimachinery/pkg/api/validation`` and ``pkg/util/validation``):

* ``apiVersion`` and ``kind`` non-empty strings, ``metadata`` a mapping;
* ``metadata.name`` (or ``generateName``) present; a DNS-1123 subdomain (at most 253 characters) for most kinds,
  a DNS-1123 label (63) for a Namespace, a DNS-1035 label (63) for a Service, a path segment (no ``/``, ``%``,
  not ``.`` or ``..``) for the RBAC kinds;
* ``metadata.namespace`` a DNS-1123 label (63);
* label keys qualified names (an optional DNS-1123 subdomain prefix and ``/``, then at most 63 characters),
  label values at most 63 characters of the same alphabet; annotation keys qualified names and all annotations
  together at most 256 KiB;
* a reference to a Secret (:func:`secret_name_error`, :func:`secret_key_error`): its name a DNS-1123 subdomain, a key
  of its data at most 253 of ``[-._a-zA-Z0-9]``, not ``.`` or ``..`` nor starting with ``..`` (``IsConfigMapKey``);
  what a custom resource names this way is rendered into Pods and read by the flows, so its model refuses it;
* a body decodable at all (the API server's decoding refuses it before any validation): ``metadata.generation``,
  when present, an integer; of a built-in kind also its ``metadata.labels`` and ``metadata.annotations`` mappings
  of strings, its ``spec``, when present, an object, a ConfigMap's ``data`` and ``binaryData`` and a Secret's
  ``data`` and ``stringData`` mappings of strings (``map[string]string``, ``map[string][]byte``). A custom
  resource's body is its schema's to check (:mod:`engine.api.validate`), so a bad one gets its own condition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, TypeGuard

__all__ = [
    "DNS1123_SUBDOMAIN_PATTERN",
    "SECRET_KEY_PATTERN",
    "annotation_size_error",
    "annotations_size",
    "address_error",
    "body_errors",
    "identity_errors",
    "is_integer",
    "name_error",
    "secret_key_error",
    "secret_name_error",
]

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
TOTAL_ANNOTATION_SIZE = 256 * 1024
"""apimachinery's ``TotalAnnotationSizeLimitB``: keys and values of all annotations together, in bytes."""

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_PATTERN = rf"^{_LABEL}(\.{_LABEL})*$"
"""A DNS-1123 subdomain (the name of most kinds, a Secret's among them), as a CRD schema ``pattern``."""
SECRET_KEY_PATTERN = r"^([-_a-zA-Z0-9]|\.[-_a-zA-Z0-9])[-._a-zA-Z0-9]*$"
"""A key of a Secret's (or ConfigMap's) data as a CRD schema ``pattern``: ``[-._a-zA-Z0-9]+``, and neither ``.``,
``..`` nor anything starting with ``..`` (written without a look-ahead, which the API server's RE2 has not)."""
_DNS1123_LABEL = re.compile(rf"^{_LABEL}$")
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_PATTERN)
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

_RBAC_GROUP = "rbac.authorization.k8s.io"


_DNS1123_LABEL_RULE = (
    _DNS1123_LABEL,
    DNS1123_LABEL_MAX,
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')",
)
_DNS1123_SUBDOMAIN_RULE = (
    _DNS1123_SUBDOMAIN,
    DNS1123_SUBDOMAIN_MAX,
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com')",
)
_DNS1035_LABEL_RULE = (
    _DNS1035_LABEL,
    DNS1123_LABEL_MAX,
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name' or 'abc-123')",
)


def _pattern_error(value: str, rule: tuple[re.Pattern[str], int, str]) -> str | None:
    """Why ``value`` breaks a name rule ``(pattern, longest, what it must look like)``, or None."""
    pattern, limit, explanation = rule
    if len(value) > limit:
        return f"must be no more than {limit} characters"
    return None if pattern.fullmatch(value) else explanation  # Go's ``$``: the end, never before a last newline


@lru_cache(maxsize=4096)
def _dns1123_label(value: str) -> str | None:
    """Cached, as :func:`_qualified_name`: namespaces repeat from object to object."""
    return _pattern_error(value, _DNS1123_LABEL_RULE)


def _dns1123_subdomain(value: str) -> str | None:
    return _pattern_error(value, _DNS1123_SUBDOMAIN_RULE)


def _path_segment(value: str) -> str | None:
    if value in (".", ".."):
        return f"may not be '{value}'"
    for forbidden in ("/", "%"):
        if forbidden in value:
            return f"may not contain '{forbidden}'"
    return None


@lru_cache(maxsize=4096)
def _qualified_name(value: str) -> str | None:
    """Why a label or annotation key is no qualified name, or None; cached: the same keys come back in every
    object of a folder."""
    prefix, slash, name = value.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        problem = _dns1123_subdomain(prefix)
        if problem:
            return f"prefix part {problem}"
    if not name:
        return "name part must be non-empty"
    if len(name) > QUALIFIED_NAME_MAX:
        return f"name part must be no more than {QUALIFIED_NAME_MAX} characters"
    if not _QUALIFIED_PART.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc'), with an optional DNS subdomain "
            "prefix and '/' (e.g. 'example.com/MyName')"
        )
    return None


@lru_cache(maxsize=4096)
def _label_value(value: str) -> str | None:
    """Why a label value is invalid, or None; cached as :func:`_qualified_name`."""
    if len(value) > LABEL_VALUE_MAX:
        return f"must be no more than {LABEL_VALUE_MAX} characters"
    if value and not _QUALIFIED_PART.fullmatch(value):
        return (
            "a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def secret_name_error(name: str) -> str | None:
    """Why ``name`` cannot name a Secret (a DNS-1123 subdomain of at most 253 characters), or None."""
    return _dns1123_subdomain(name)


def secret_key_error(key: str) -> str | None:
    """Why ``key`` cannot be a key of a Secret's data (apimachinery's ``IsConfigMapKey``), or None."""
    if len(key.encode()) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    if not _SECRET_KEY.fullmatch(key):
        return "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name')"
    if key in (".", ".."):
        return f"must not be '{key}'"
    if key.startswith(".."):
        return "must not start with '..'"
    return None


def name_error(api_version: str, kind: str, name: str) -> str | None:
    """Why ``name`` is not a valid name for an object of ``kind``, or None (the rule of that kind, see module docs)."""
    group = api_version.rpartition("/")[0]
    if group == "" and kind == "Namespace":
        return _dns1123_label(name)
    if group == "" and kind == "Service":
        return _pattern_error(name, _DNS1035_LABEL_RULE)
    if group == _RBAC_GROUP:
        return _path_segment(name)
    return _dns1123_subdomain(name)


def address_error(api_version: str, kind: str, name: str | None, namespace: str | None) -> tuple[str, str] | None:
    """``(field, reason)`` when an object cannot be addressed by this name and namespace, else None: what a
    backend checks before it turns them into a file or REST path."""
    if namespace is not None:
        if not isinstance(namespace, str):
            return "metadata.namespace", "must be a string"
        problem = _dns1123_label(namespace) if namespace else None
        if problem:
            return "metadata.namespace", problem
    if name is not None:
        if not isinstance(name, str):
            return "metadata.name", "must be a string"
        problem = name_error(api_version, kind, name) if name else "Required value: name is required"
        if problem:
            return "metadata.name", problem
    return None


def identity_errors(manifest: Any) -> list[tuple[str, str]]:
    """Every ``(field path, reason)`` that makes ``manifest``'s identity one the API server would refuse
    (see module docs); empty when it is sound."""
    if type(manifest) is not dict and not isinstance(manifest, Mapping):  # a dict is told without the ABC's call
        return [("", "a manifest must be a mapping")]
    errors: list[tuple[str, str]] = []
    for key in ("apiVersion", "kind"):
        value = manifest.get(key)
        if not isinstance(value, str) or not value:
            errors.append((key, "Required value" if value in (None, "") else "must be a string"))
    meta = manifest.get("metadata")
    if type(meta) is not dict and not isinstance(meta, Mapping):
        errors.append(("metadata", "Required value" if meta is None else "must be a mapping"))
        return errors
    if errors:
        return errors
    errors += _name_errors(manifest["apiVersion"], manifest["kind"], meta)
    errors += _label_errors(meta.get("labels"))
    errors += _annotation_errors(meta.get("annotations"))
    errors += [error for error in body_errors(manifest) if error not in errors]
    return errors


_STRING_MAPS = {"ConfigMap": ("data", "binaryData"), "Secret": ("data", "stringData")}
"""The core (``v1``) kinds whose fields are ``map[string]string`` (or ``[]byte``, base64 text in a manifest)."""


def body_errors(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field path, reason)`` of a body the API server cannot decode: of any kind, a ``metadata.generation`` that
    is no integer (ObjectMeta's ``int64``; the local backend counts it up on every spec write); of a built-in kind
    also labels or annotations that are no map of strings, a ``spec`` that is not an object, a ConfigMap's or
    Secret's data that is no map of strings (a custom resource's body is its schema's, see module docs).
    ``manifest`` has string ``apiVersion`` and ``kind`` and a mapping ``metadata`` (:func:`identity_errors` checks
    those first; the local backend loads no document without them)."""
    meta = manifest.get("metadata") or {}
    generation = meta.get("generation")
    errors = [] if generation is None or is_integer(generation) else [("metadata.generation", "must be an integer")]
    api_version: str = manifest["apiVersion"]
    group = api_version.rpartition("/")[0]
    if "." in group and not group.endswith(".k8s.io"):
        return errors
    errors += [
        error for field in ("labels", "annotations") for error in _string_pairs(f"metadata.{field}", meta.get(field))[1]
    ]
    spec = manifest.get("spec")
    errors += [] if spec is None or isinstance(spec, Mapping) else [("spec", "must be an object")]
    if api_version == "v1":
        for field in _STRING_MAPS.get(manifest["kind"], ()):
            errors += _string_pairs(field, manifest.get(field))[1]
    return errors


def is_integer(value: object) -> TypeGuard[int]:
    """Whether ``value`` decodes as a JSON integer (a bool does not; nor does ``1.5``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _name_errors(api_version: str, kind: str, meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    name, generate_name = meta.get("name"), meta.get("generateName")
    if name in (None, "") and generate_name in (None, ""):
        return [("metadata.name", "Required value: name or generateName is required")]
    if generate_name not in (None, "") and not isinstance(generate_name, str):
        return [("metadata.generateName", "must be a string")]
    problem = address_error(api_version, kind, None if name in (None, "") else name, meta.get("namespace"))
    return [problem] if problem else []


def _string_pairs(field: str, mapping: Any) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """``(path, key, value)`` of each string entry of a labels/annotations mapping, and the errors of the rest."""
    if mapping is None:
        return [], []
    if type(mapping) is not dict and not isinstance(mapping, Mapping):
        return [], [(field, "must be a mapping of strings")]
    pairs, errors = [], []
    for key, value in mapping.items():
        where = f'{field}["{key}"]'
        if isinstance(key, str) and isinstance(value, str):
            pairs.append((where, key, value))
        else:
            errors.append((where, "keys and values must be strings"))
    return pairs, errors


def _label_errors(labels: Any) -> list[tuple[str, str]]:
    pairs, errors = _string_pairs("metadata.labels", labels)
    for where, key, value in pairs:
        for what, problem in (("key", _qualified_name(key)), ("value", _label_value(value))):
            if problem:
                errors.append((where, f"invalid label {what}: {problem}"))
    return errors


def _annotation_errors(annotations: Any) -> list[tuple[str, str]]:
    pairs, errors = _string_pairs("metadata.annotations", annotations)
    for where, key, _ in pairs:
        problem = _qualified_name(key.lower())
        if problem:
            errors.append((where, f"invalid annotation key: {problem}"))
    problem = annotation_size_error({key: value for _, key, value in pairs})
    if problem:
        errors.append(("metadata.annotations", problem))
    return errors


def _annotation_size(key: str, value: str) -> int:
    return len(key.encode()) + len(value.encode())


def annotations_size(annotations: Mapping[str, str]) -> int:
    """What apimachinery's ``ValidateAnnotationsSize`` counts of an object's annotations: the bytes of every key
    and value (UTF-8), together."""
    return sum(_annotation_size(key, value) for key, value in annotations.items())


def annotation_size_error(annotations: Mapping[str, str]) -> str | None:
    """Why the API server would refuse an object with these ``annotations`` for their size (keys and values
    together more than :data:`TOTAL_ANNOTATION_SIZE` bytes), naming the largest, or None: the one check of
    everything that writes annotations composed from input, before the write."""
    size = annotations_size(annotations)
    if size <= TOTAL_ANNOTATION_SIZE:
        return None
    largest = max(annotations, key=lambda key: _annotation_size(key, annotations[key]))
    return (
        f"Too long: must have at most {TOTAL_ANNOTATION_SIZE} bytes (256 KiB); they hold {size} bytes, the largest "
        f"{largest} {_annotation_size(largest, annotations[largest])} bytes"
    )
