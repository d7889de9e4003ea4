"""Registry credentials from ``kubernetes.io/dockerconfigjson`` pull secrets, and which one an image uses."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tasks.clients.oci.references import DOCKER_HUB, DOCKER_HUB_AUTH_KEYS, ImageReference


@dataclass(frozen=True)
class Credential:
    """A username/password (or identity token) for one registry. ``repr`` hides the secret."""

    username: str
    password: str = field(repr=False)

    @property
    def basic(self) -> str:
        """The ``Authorization: Basic`` value."""
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def _registry_key(key: str) -> str:
    """A dockerconfigjson ``auths`` key as a bare host (scheme and path dropped)."""
    text = re.sub(r"^[a-z]+://", "", key.strip().lower())
    return text.split("/", 1)[0]


def parse_dockerconfigjson(text: str | bytes) -> dict[str, Credential]:
    """The credentials of a ``.dockerconfigjson`` document (a pull secret's).

    Args:
        text: The document.

    Returns:
        Registry host -> credential (``username``/``password``, ``auth`` or ``identitytoken``).

    Raises:
        ValueError: It is not a docker config; the message never quotes the content.
    """
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not a JSON docker config") from None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        raise ValueError("no 'auths' object in the docker config")
    result: dict[str, Credential] = {}
    for key, entry in auths.items():
        if not isinstance(entry, dict):
            continue
        user, password = entry.get("username"), entry.get("password")
        if entry.get("auth") and not (user and password):
            try:
                user, _, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise ValueError(f"the 'auth' of registry {_registry_key(key)} is not base64 user:password") from None
        if entry.get("identitytoken") and not password:
            user, password = user or "<token>", entry["identitytoken"]
        if user and password:
            result[_registry_key(key)] = Credential(str(user), str(password))
    return result


def credential_for(ref: ImageReference, keychain: Mapping[str, Credential]) -> Credential | None:
    """The keychain's credential for the image's registry (Docker Hub under any of its names).

    Args:
        ref: The image.
        keychain: Registry host -> credential, from the pull secrets.

    Returns:
        The credential, or None (the registry is asked anonymously).
    """
    keys = DOCKER_HUB_AUTH_KEYS if ref.host in (DOCKER_HUB, "index.docker.io") else (ref.host,)
    for key in keys:
        found = keychain.get(_registry_key(key))
        if found is not None:
            return found
    return None
