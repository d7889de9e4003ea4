"""The kinds a local manifests folder serves through its own CustomResourceDefinition documents.

Installing a CRD on a cluster serves its kind; a folder of manifests that holds CRD documents does the same for
the local backend (:class:`tasks.clients.cluster.local_store.LocalStore`), in that folder only: the process-wide table
(:mod:`tasks.clients.cluster.resources`, :func:`tasks.clients.cluster.schema.register_crd`) is left alone, so another folder, or
a cluster, in the same process sees nothing of them. Built-in kinds and Modelplane's own keep their facts and
schema whatever the folder holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tasks.clients.cluster.base import Manifest
from tasks.clients.cluster.resources import ResourceInfo, lookup, resource_for
from tasks.clients.cluster.schema import ServedVersion, served_versions

CRD_KIND = "CustomResourceDefinition"


def is_crd(obj: Manifest) -> bool:
    """Whether a document is an ``apiextensions.k8s.io`` CustomResourceDefinition.

    Args:
        obj: A document of a manifest file.

    Returns:
        True for a CustomResourceDefinition.
    """
    return obj.get("kind") == CRD_KIND and str(obj.get("apiVersion", "")).startswith("apiextensions.k8s.io/")


class FolderKinds:
    """What the CRD documents of one folder serve: REST facts and schema by ``(apiVersion, kind)``."""

    def __init__(self) -> None:
        self._served: dict[tuple[str, str], ServedVersion] = {}

    def rebuild(self, documents: Iterable[tuple[Manifest, Path]]) -> list[tuple[Path, str]]:
        """Serve what the CRDs among ``documents`` (each with its file) define, instead of what was served;
        returns the files and messages of the documents that are not valid CRDs (they serve nothing)."""
        served: dict[tuple[str, str], ServedVersion] = {}
        errors: list[tuple[Path, str]] = []
        for obj, path in documents:
            if not is_crd(obj):
                continue
            try:
                versions = served_versions(obj)
            except ValidationError as exc:
                name = (obj.get("metadata") or {}).get("name")
                errors.append((path, f"{path}: CustomResourceDefinition {name!r}: {exc}"))
                continue
            for version in versions:
                if lookup(version.info.api_version, version.info.kind) is None:
                    served[(version.info.api_version, version.info.kind)] = version
        self._served = served
        return errors

    def lookup(self, api_version: str, kind: str) -> ResourceInfo | None:
        """The resource serving a kind: a built-in or Modelplane kind, else one a CRD document here serves."""
        info = lookup(api_version, kind)
        if info is None and (api_version, kind) in self._served:
            info = self._served[(api_version, kind)].info
        return info

    def resource(self, api_version: str, kind: str) -> ResourceInfo:
        """:meth:`lookup`, or ``NotFound`` (reason ``UnknownKind``) for a kind nothing here serves."""
        info = self.lookup(api_version, kind)
        return info if info is not None else resource_for(api_version, kind)

    def schema(self, obj: Manifest) -> dict[str, Any] | None:
        """The schema a CRD document here gives the object's kind (``None``: the process-wide one applies)."""
        served = self._served.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
        return served.schema if served is not None else None
