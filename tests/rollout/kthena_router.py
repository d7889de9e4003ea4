"""kthena-router's choice of a ModelServer for a request, ported from its source to check rendered ModelRoutes.

Upstream volcano-sh/kthena ``pkg/kthena-router/datastore/store.go`` (HEAD 3cc05728):

* ``AddOrUpdateModelRoute`` indexes a ModelRoute by ``spec.modelName`` and by each of ``spec.loraAdapters``;
* ``MatchModelTarget`` looks the request's ``model`` up among the routes by model name first, else among the
  routes by adapter name (the request is then a LoRA request), oldest route first;
* ``selectRule`` takes the first rule that matches: a rule without ``modelMatch`` matches everything;
  ``body.model``, when set, must equal the request's model exactly; every header of ``headers`` must match
  (``req.Header.Get``: case-insensitive name, a missing header is ""); ``uri`` must match the path;
* ``matchString``: ``exact`` equality, ``prefix`` HasPrefix, ``regex`` Go ``MatchString`` (a search, not a
  full match); none set matches;
* ``selectDestination``: the targets' weights (all set, or all unset and then 1 each), one drawn by
  ``rand.Intn(total)`` walked down the list.

Gateway ``parentRefs`` are not ported: Modelplane renders none.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]


class NoRoute(LookupError):
    """kthena-router answers 404: no ModelRoute (or no rule in one) matches the request."""


@dataclass(frozen=True)
class Request:
    """What the router reads of a request: the body's ``model``, the headers and the URL path."""

    model: str
    headers: Mapping[str, str] | None = None
    path: str = "/v1/chat/completions"

    def header(self, name: str) -> str:
        """``http.Header.Get``: the first value of the header, by case-insensitive name, else ""."""
        wanted = name.lower()
        return next((v for k, v in (self.headers or {}).items() if k.lower() == wanted), "")


def match_string(match: Mapping[str, Any] | None, value: str) -> bool:
    """``matchString``: exact, then prefix, then regex; a StringMatch with none of them matches."""
    match = match or {}
    if match.get("exact") is not None:
        return value == match["exact"]
    if match.get("prefix") is not None:
        return value.startswith(match["prefix"])
    if match.get("regex") is not None:
        try:
            return re.search(match["regex"], value) is not None
        except re.error:  # upstream: an invalid regex is logged and treated as no match
            return False
    return True


def select_rule(request: Request, rules: Sequence[Manifest]) -> Manifest:
    """``selectRule``: the first rule whose ``modelMatch`` the request satisfies."""
    for rule in rules:
        match = rule.get("modelMatch")
        if match is None:
            return dict(rule)
        body_model = (match.get("body") or {}).get("model")
        if body_model is not None and request.model != body_model:
            continue
        if not all(match_string(sm, request.header(key)) for key, sm in (match.get("headers") or {}).items()):
            continue
        if match.get("uri") is not None and not match_string(match["uri"], request.path):
            continue
        return dict(rule)
    raise NoRoute("failed to find a matching rule")


def select_destination(targets: Sequence[Manifest], rng: random.Random) -> Manifest:
    """``selectDestination``: a target drawn by weight (``toWeightedSlice`` + ``selectFromWeightedSlice``)."""
    if not targets:
        raise NoRoute("no target models specified in rule")
    weighted = targets[0].get("weight") is not None
    if any((t.get("weight") is not None) != weighted for t in targets):
        raise NoRoute("the weight field in targetModel must be either fully specified or not specified")
    weights = [int(t["weight"]) if weighted else 1 for t in targets]
    total = sum(weights)
    if total == 0:
        raise NoRoute("total weight is zero")
    draw = rng.randrange(total)
    for target, weight in zip(targets, weights):
        draw -= weight
        if draw < 0:
            return dict(target)
    return dict(targets[0])


def route(routes: Sequence[Manifest], request: Request, rng: random.Random) -> tuple[str, bool]:
    """``MatchModelTarget``: the ModelServer a request goes to, and whether it is a LoRA request.
    ``routes`` are ModelRoute objects, oldest first."""
    by_model = [r for r in routes if r["spec"].get("modelName") == request.model]
    by_adapter = [r for r in routes if request.model in (r["spec"].get("loraAdapters") or [])]
    candidates, is_lora = (by_model, False) if by_model else (by_adapter, True)
    if not candidates:
        raise NoRoute(f"not found route rules for model {request.model}")
    for candidate in candidates:
        try:
            rule = select_rule(request, candidate["spec"]["rules"])
            return str(select_destination(rule["targetModels"], rng)["modelServerName"]), is_lora
        except NoRoute:
            continue
    raise NoRoute(f"no matching ModelRoute found for model {request.model}")
