"""The kind registry stays the only place an apiVersion of a Modelplane API group is spelled."""

from __future__ import annotations

import ast
import pathlib
import re
import typing

import pytest

from engine.api import registry
from engine.api.registry import KINDS, KindInfo, kind_info, kinds, registered

REPO = pathlib.Path(__file__).resolve().parents[2]
GROUPS = (
    registry.LLMD_GROUP,
    registry.LLMAZ_GROUP,
    registry.KTHENA_GROUP,
    registry.AIM_GROUP,
    registry.KTHENA_WORKLOAD_GROUP,
    registry.KTHENA_NETWORKING_GROUP,
)
# A quoted apiVersion of one of the groups: "llmd.ai/v1alpha1" (label keys like "llmaz.io/model-name" are not).
_ALTERNATIVES = "|".join(re.escape(g) for g in GROUPS)
API_VERSION_LITERAL = re.compile(rf"""["']({_ALTERNATIVES})/v\d+\w*["']""")


def test_no_product_module_spells_an_api_version_of_ours() -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for top in ("engine", "tasks", "flows", "bench")
        for path in sorted((REPO / top).rglob("*.py"))
        if path != REPO / "engine" / "api" / "registry.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if API_VERSION_LITERAL.search(line)
    ]
    assert not found, "use the constants of engine/api/registry.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("constant", "alias"),
    [
        (registry.LLMD_API, registry.LlmdApiVersion),
        (registry.LLMAZ_API, registry.LlmazApiVersion),
        (registry.KTHENA_API, registry.KthenaApiVersion),
        (registry.AIM_API, registry.AimApiVersion),
    ],
)
def test_each_constant_is_its_literal(constant: str, alias: object) -> None:
    assert typing.get_args(alias) == (constant,)


@pytest.mark.parametrize("info", KINDS, ids=lambda k: k.kind)
def test_every_kind_uses_a_registry_constant_and_names_its_family(info: KindInfo) -> None:
    assert info.api_version in {registry.LLMD_API, registry.LLMAZ_API, registry.KTHENA_API, registry.AIM_API}
    assert registry.family_of(info.group) is not None
    assert info.model().model_fields["api_version"].default == info.api_version


def test_the_failed_phase_is_read_from_the_models() -> None:
    """Only kinds whose status model has a ``status`` field get ``status: Failed`` from the boundary reader."""
    assert {k.kind for k in KINDS if k.has_status_phase()} == {"AIMServiceTemplate", "AIMService", "ModelCache"}


def test_registered_adds_for_the_block_and_restores() -> None:
    extra = KindInfo("example.test/v1", "Thing", "things", "engine.api.llmd")
    with registered(extra, KINDS[0]) as table:
        assert table == kinds() == (*KINDS, extra)  # an already registered kind is not added twice
        assert kind_info("example.test/v1", "Thing") is extra
    assert kinds() == KINDS and kind_info("example.test/v1", "Thing") is None
    with pytest.raises(TypeError, match="not a KubeModel"):
        extra.model()  # engine.api.llmd has no model named Thing


def _string_literals(tree: ast.AST) -> list[ast.Constant]:
    """Every string constant of a module except its docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_no_product_module_spells_a_kind_of_ours() -> None:
    """A kind's name is spelled once, in the registry; call sites use its constant (``MODEL_CACHE``, ...)."""
    names = {info.kind for info in registry.KINDS}
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}"
        for top in ("engine", "tasks", "flows", "bench")
        for path in sorted((REPO / top).rglob("*.py"))
        # engine/api is the registry and the models, whose `kind` Literal is the wire value they validate
        if not path.is_relative_to(REPO / "engine" / "api")
        for node in _string_literals(ast.parse(path.read_text()))
        if node.value in names
    ]
    assert not found, "use the kind constants of engine/api/registry.py:\n" + "\n".join(found)
