"""References to Secrets checked as the API server checks them in a Pod, before anything is rendered or read with them.

A custom resource names Secrets that Modelplane renders into the Pods it creates (an AIMNamespaceConfig's
``images.imagePullSecrets`` and credentials into InferenceServices and cache-fill Jobs, a ModelCache's or a Kthena
worker's env ``secretKeyRef``) and reads from the cluster (pull secrets, a fill's credentials). A name no Secret can
have, or a key no Secret's data can hold, would be refused by the API server in the rendered Pod (or become part of a
read's path): the API models refuse it where the object is read, naming the field, with the rules of
:mod:`engine.api.identity` (:func:`~engine.api.identity.secret_name_error`,
:func:`~engine.api.identity.secret_key_error`). :class:`SecretName` and :class:`SecretKey` carry the rules into the
CRDs' schemas too; :func:`secret_key_ref_error` is the check of a free-form ``secretKeyRef`` (an env's
``valueFrom``), shared by the models and the fill's env resolution (``tasks/cache_env.py``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

from engine.api.identity import (
    DNS1123_SUBDOMAIN_MAX,
    DNS1123_SUBDOMAIN_PATTERN,
    SECRET_KEY_PATTERN,
    secret_key_error,
    secret_name_error,
)
from engine.errors import shown

__all__ = ["SecretKey", "SecretName", "check_secret_key", "check_secret_name", "secret_key_ref_error"]


def check_secret_name(value: str) -> str:
    """``value`` when it can name a Secret (:func:`engine.api.identity.secret_name_error`), else ``ValueError``
    saying why: the one check of every Secret name an object gives (its model's, and a free-form
    ``secretKeyRef``'s where it is read)."""
    problem = secret_name_error(value)
    if problem:
        raise ValueError(f"{shown(value)} is not a valid Secret name: {problem}")
    return value


def check_secret_key(value: str) -> str:
    """``value`` when it can be a key of a Secret's data (:func:`engine.api.identity.secret_key_error`), else
    ``ValueError`` saying why (as :func:`check_secret_name`)."""
    problem = secret_key_error(value)
    if problem:
        raise ValueError(f"{shown(value)} is not a valid Secret key: {problem}")
    return value


def secret_key_ref_error(ref: object) -> str | None:
    """Why ``ref``, a ``secretKeyRef`` as written (free-form JSON: an env's ``valueFrom``), is no reference the API
    server accepts in a Pod, as a phrase starting ``secretKeyRef``, or None: it must name a Secret
    (:func:`check_secret_name`) and a key of its data (:func:`check_secret_key`)."""
    if not isinstance(ref, Mapping) or not all(
        isinstance(ref.get(part), str) and ref[part] for part in ("name", "key")
    ):
        return "secretKeyRef must name a Secret and a key (strings: name, key)"
    for part, check in (("name", check_secret_name), ("key", check_secret_key)):
        try:
            check(ref[part])
        except ValueError as exc:
            return f"secretKeyRef.{part}: {exc}"
    return None


SecretName = Annotated[
    str,
    AfterValidator(check_secret_name),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": DNS1123_SUBDOMAIN_MAX, "pattern": DNS1123_SUBDOMAIN_PATTERN}
    ),
]
"""The name of a Secret: a DNS-1123 subdomain, as the API server names Secrets. It is rendered into Pods
(``imagePullSecrets``, ``secretKeyRef``) and read by the flows, so a name no Secret can have is refused where the
object is read, with the field named."""
SecretKey = Annotated[
    str,
    AfterValidator(check_secret_key),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": DNS1123_SUBDOMAIN_MAX, "pattern": SECRET_KEY_PATTERN}
    ),
]
"""A key of a Secret's data: ``[-._a-zA-Z0-9]+``, at most 253 characters, not ``.``, ``..`` or starting with
``..`` (apimachinery's ``IsConfigMapKey``, what the API server checks of a Pod's ``secretKeyRef``)."""
