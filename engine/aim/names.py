"""Names and owner references of the objects the AIM lifecycles create, as aim-engine derives them.

``derived`` is aim-engine's ``GenerateDerivedName``: a deterministic DNS-1123 label from name parts plus a short
hash, used for auto-created templates (:func:`engine.aim.discovery.template_name`) and for the objects an
AIMService owns (:mod:`engine.aim.services`); ``owner_reference`` is what makes those objects the owner's.
Pure.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from engine.api.aim import AIMClusterModel, AIMService

__all__ = ["DNS_LABEL_MAX", "derived", "owner_reference", "sanitize_part"]

_INVALID_NAME_CHARS = re.compile(r"[^a-z0-9-]")
DNS_LABEL_MAX = 63


def _go_json(value: Any) -> str:
    """``json.Marshal`` of a string/number/bool as Go writes it (HTML characters escaped)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def sanitize_part(part: str) -> str:
    """One name part: lowercase, other characters to ``-`` (runs kept), ``-`` trimmed, at most 63."""
    text = _INVALID_NAME_CHARS.sub("-", part.lower()).strip("-")
    text = text[:DNS_LABEL_MAX].rstrip("-")
    return text or "part"


def derived(parts: Sequence[str], hash_src: Sequence[Any], hash_len: int = 8, max_len: int = DNS_LABEL_MAX) -> str:
    """A deterministic DNS-1123 name: sanitised ``parts`` joined by ``-`` plus a short hash of ``hash_src``.

    The hash is the hex sha256 of the ``|``-joined Go JSON of each source, cut to ``hash_len``. While
    the name is longer than ``max_len``, the longest part (the first on ties) loses one character.
    """
    names = [sanitize_part(p) for p in parts]
    digest = hashlib.sha256("|".join(_go_json(x) for x in hash_src).encode()).hexdigest()[:hash_len]
    while sum(len(p) + 1 for p in names) + len(digest) > max_len:
        longest = max(range(len(names)), key=lambda i: (len(names[i]), -i))
        if not names[longest]:
            raise ValueError(f"cannot fit a name with hash {digest} into {max_len} characters")
        names[longest] = names[longest][:-1].rstrip("-")
    return "-".join([*names, digest])


def owner_reference(obj: AIMClusterModel | AIMService, controller: bool = True) -> dict[str, Any]:
    """An ownerReference to ``obj`` (a stored object: it has a uid)."""
    return {
        "apiVersion": obj.api_version,
        "kind": obj.kind,
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }
