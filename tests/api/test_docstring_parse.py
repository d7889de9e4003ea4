"""No source is parsed for attribute docstrings when models are defined or used, only for the CRDs.

pydantic's ``use_attribute_docstrings`` runs ``ast.parse`` at class creation; on CPython 3.11.7 two threads
doing that at once raise ``SystemError: AST constructor recursion depth mismatch`` (gh-106905), which
killed a triggered optimize run. engine.api reads the docstrings only when a JSON schema is generated.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from pydantic import BaseModel

from tests.conftest import REPO

# Counts ast.parse calls made from pydantic's docstring extraction while every module of engine, tasks and
# flows is imported, the example manifests are validated into models (from 4 threads at once, as task
# threads do) and a model with use_attribute_docstrings is defined last (the check's positive control).
_PROBE = textwrap.dedent(
    """
    import ast, importlib, json, pkgutil, sys, traceback
    from concurrent.futures import ThreadPoolExecutor

    calls = []
    original = ast.parse

    def parse(*args, **kwargs):
        if any("_docs_extraction" in frame.filename for frame in traceback.extract_stack()):
            calls.append(traceback.extract_stack()[-3].filename)
        return original(*args, **kwargs)

    ast.parse = parse
    for package in ("engine", "tasks", "flows"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            importlib.import_module(info.name)
    from engine.api import registry
    from engine.api.validate import load_documents
    from tasks.manifests import read_manifest_documents

    documents, _ = read_manifest_documents(sys.argv[1])
    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda _: load_documents(documents), range(4)))
    assert all(report.valid for report in reports)
    from tasks.clients.cluster import connect  # the local backend prunes and defaults with the same schemas

    assert connect(sys.argv[1]).list(registry.LLMD_API, registry.VARIANT_AUTOSCALING)
    before = len(calls)

    from pydantic import BaseModel, ConfigDict

    class Probe(BaseModel):
        model_config = ConfigDict(use_attribute_docstrings=True)
        x: int = 0
        '''documented'''

    print(json.dumps({"during_use": calls[:before], "control": len(calls) - before}))
    """
)


def test_no_docstring_parse_when_models_are_imported_or_used(tmp_path) -> None:
    probe = tmp_path / "probe.py"  # a file, so pydantic finds the control model's source
    probe.write_text(_PROBE)
    result = subprocess.run(
        [sys.executable, str(probe), str(REPO / "deployments" / "examples")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["control"] > 0, "the probe no longer sees pydantic's docstring parse: the check proves nothing"
    assert seen["during_use"] == [], f"attribute docstrings parsed at import/use: {seen['during_use']}"


def test_no_model_asks_pydantic_for_attribute_docstrings() -> None:
    from engine.api.registry import KINDS

    models = [info.model() for info in KINDS]  # imports every API module
    found, todo = [], [BaseModel]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(type.__subclasses__(cls))
    assert models
    ours = [c for c in found if c.__module__.split(".")[0] in ("engine", "tasks", "flows")]
    assert ours
    assert [c.__qualname__ for c in ours if c.model_config.get("use_attribute_docstrings")] == []


def test_crd_descriptions_still_come_from_attribute_docstrings() -> None:
    from engine.api.llmd import VariantAutoscaling

    schema = VariantAutoscaling.model_json_schema(by_alias=True)
    spec = schema["$defs"]["VariantAutoscalingSpec"]["properties"]
    assert all(prop.get("description") for prop in spec.values()), spec
