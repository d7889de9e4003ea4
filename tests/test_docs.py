"""The documentation's commands run: every fenced shell block in README.md, CONTRIBUTING.md, DESIGN.md, docs/ and deployments/**/README.md
is marked either ```sh runnable (executed here, must exit 0) or ```sh not-runnable: <why> (needs a real
cluster, docker, Prometheus...). A runnable block runs with bash -euo pipefail in a scratch directory holding a
copy of deployments/ (the commands' relative paths resolve there, and whatever they write lands there, never
in the checkout), with this virtualenv's `modelplane` first on PATH and this test worker's Prefect API
(``prefect_api``: a command with none configured starts an ephemeral API of its own, the laptop path
tests/test_demo.py runs; here it would cost about 17 s of CPU per command)."""

from __future__ import annotations

import itertools
import os
import pathlib
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest
import yaml

from tests.prefect_db import trust_env

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        REPO / "DESIGN.md",
        *(REPO / "docs").rglob("*.md"),
        *(REPO / "deployments").rglob("README.md"),
    ]
)
SHELLS = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^```(\S*)(.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a document."""

    path: pathlib.Path
    line: int
    language: str
    info: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: pathlib.Path) -> list[Block]:
    """The fenced blocks of one Markdown file, with the line their fence opens on."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match:
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            found.append(
                Block(path, index + 1, match.group(1), match.group(2).strip(), "\n".join(lines[index + 1 : end]) + "\n")
            )
            index = end
        index += 1
    return found


ALL = [block for path in DOCS for block in blocks(path)]
SHELL = [block for block in ALL if block.language in SHELLS]
RUNNABLE = [block for block in SHELL if block.info == "runnable"]


def commands(block: Block) -> str:
    """What a block runs: its lines without comments and blank lines."""
    lines = (line.rstrip() for line in block.text.splitlines())
    return "\n".join(line for line in lines if line and not line.lstrip().startswith("#"))


def first_of_each(blocks: list[Block]) -> list[Block]:
    """The first block of each distinct command text: a command shown on several pages runs once, and what
    that run proves holds for every copy (deployments/traces/README.md's and docs/how-to/replay-traffic.md's simulate
    line are one)."""
    first: dict[str, Block] = {}
    for block in blocks:
        first.setdefault(commands(block), block)
    return list(first.values())


DISTINCT = first_of_each(RUNNABLE)


def test_every_shell_block_says_whether_it_runs() -> None:
    assert SHELL and RUNNABLE
    unmarked = [b.id for b in SHELL if b.info != "runnable" and not re.match(r"^not-runnable: \S", b.info)]
    assert not unmarked, f"mark each as ```sh runnable or ```sh not-runnable: <why>: {unmarked}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("block", DISTINCT, ids=[b.id for b in DISTINCT])
def test_runnable_block_runs(block: Block, prefect_api: str, tmp_path: pathlib.Path) -> None:
    shutil.copytree(REPO / "deployments", tmp_path / "deployments")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MODELPLANE_", "KUBE"))}
    env.update(trust_env(), PREFECT_API_URL=prefect_api)
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = os.environ.get("HOME", str(tmp_path))
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert result.returncode == 0, f"{block.id} exited {result.returncode}:\n{block.text}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def test_the_trigger_shown_in_platform_md_is_one_prefect_yaml_registers() -> None:
    """docs/platform.md shows a trigger entry: it must be prefect.yaml's own (name, event, parameters), so the
    page cannot again show parameters the deployment rejects or a trigger that is not wired."""
    from flows.deployments import deployment_entries

    shown = [
        yaml.safe_load(b.text)
        for b in ALL
        if b.path.name == "platform.md" and b.language == "yaml" and "triggers:" in b.text
    ]
    assert shown, "docs/platform.md shows an example trigger"
    registered = {t["name"]: t for entry in deployment_entries() for t in entry.get("triggers") or []}
    for document in shown:
        for trigger in document["triggers"]:
            assert trigger["name"] in registered, f"{trigger['name']} is not a trigger of prefect.yaml"
            assert trigger == registered[trigger["name"]], (trigger, registered[trigger["name"]])


def test_the_concurrency_policy_the_docs_state_is_prefect_yamls() -> None:
    """Where README.md, DESIGN.md, CONTRIBUTING.md or a page of docs/ states the deployments' collision strategy (a paragraph that
    names `concurrency_limit` or `collision_strategy` and a strategy), they state both prefect.yaml uses (ENQUEUE
    for the deployments with triggers, CANCEL_NEW for the others; the rule itself is tests/flows/test_deployments.py's),
    and every list of deployments they name there is exactly prefect.yaml's CANCEL_NEW ones."""
    from flows.deployments import deployment_entries

    entries = deployment_entries()
    strategies = {
        e["name"]: e["concurrency_limit"]["collision_strategy"] for e in entries if e.get("concurrency_limit")
    }
    cancel_new = {name for name, strategy in strategies.items() if strategy == "CANCEL_NEW"}
    assert cancel_new and set(strategies.values()) == {"ENQUEUE", "CANCEL_NEW"}
    name = r"[a-z]+(?:-[a-z]+)*"
    lists = 0
    for path in (
        REPO / "README.md",
        REPO / "DESIGN.md",
        REPO / "CONTRIBUTING.md",
        *sorted((REPO / "docs").rglob("*.md")),
    ):
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            if not re.search(r"concurrency_limit|collision_strategy", paragraph) or not re.search(
                r"ENQUEUE|CANCEL_NEW", paragraph
            ):
                continue
            where = f"{path.relative_to(REPO)}: {paragraph.strip()[:120]}..."
            assert "ENQUEUE" in paragraph and "CANCEL_NEW" in paragraph, f"state both strategies: {where}"
            for listed in re.findall(rf"\(({name}(?:, {name})*)[:)]", paragraph):
                named = set(listed.split(", "))
                if named <= set(strategies):
                    lists += 1
                    assert named == cancel_new, (
                        f"prefect.yaml's CANCEL_NEW deployments are {sorted(cancel_new)}: {where}"
                    )
    assert lists >= 2, "DESIGN.md and docs/platform.md each name the deployments that keep CANCEL_NEW"


def _map_cell_paths(cell: str) -> list[str]:
    """The paths one cell of DESIGN.md's layer map names: ``dir/`` (``a.py``, ``b.py``) means dir/a.py, dir/b.py."""
    paths: list[str] = []
    for outer, inner in re.findall(r"`([^`]+)`(?:\s*\(([^)]*)\))?", cell):
        paths.append(outer)
        paths.extend(outer + name for name in re.findall(r"`([^`]+)`", inner or "") if outer.endswith("/"))
    return paths


def test_the_design_layer_map_names_files_that_exist() -> None:
    """Every file and package DESIGN.md's "where each lifecycle lives" table names exists in its layer."""
    lines = (REPO / "DESIGN.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| lifecycle (command) |"))
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2 :]))
    missing = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        for layer, cell in zip(("flows", "tasks", "engine"), cells[1:]):
            for name in _map_cell_paths(cell):
                if not any((REPO / layer).glob(name.rstrip("/"))):
                    missing.append(f"{layer}/{name}")
    assert len(rows) >= 10 and not missing, missing


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """The README's test command is the one `.ci/run` executes (CI may add pytest options after it), so a reader
    who runs the README's command runs what CI runs."""
    readme = [commands(b) for b in blocks(REPO / "README.md") if b.language in SHELLS and "./dev.sh test" in b.text]
    ci = re.search(r"^exec (\./dev\.sh test)(?: -\S+)*$", (REPO / ".ci" / "run").read_text(), re.MULTILINE)
    assert ci is not None, ".ci/run runs ./dev.sh test"
    assert readme == [ci.group(1)], f"README.md's test command {readme} is not .ci/run's {ci.group(1)!r}"


DOCS_CITATION = re.compile(r"(docs/[\w/.-]+\.md),?\s*\(?\"([^\"]{3,100})\"")
"""A module's pointer to a passage of the docs: ``docs/FILE.md, "words found there"``."""
DOCS_PATH = re.compile(r"\b(docs/[\w/.-]+\.md)\b")


def test_the_docs_passages_the_code_cites_exist() -> None:
    """A docstring or comment that sends the reader to ``docs/FILE.md`` names a file that exists, and with
    ``docs/FILE.md, "a section"`` words it holds (a heading or a term): a rewritten page cannot leave code
    pointing at nothing."""
    cited, missing = 0, []
    for path in sorted(p for layer in ("engine", "tasks", "flows", "bench") for p in (REPO / layer).rglob("*.py")):
        text = " ".join(path.read_text().split())  # a citation may wrap over lines (and a docstring's indent)
        missing += [f"{path.relative_to(REPO)}: {doc}" for doc in DOCS_PATH.findall(text) if not (REPO / doc).is_file()]
        for doc, words in DOCS_CITATION.findall(text):
            cited += 1
            target = REPO / doc
            if not target.is_file() or words.lower() not in " ".join(target.read_text().split()).lower():
                missing.append(f"{path.relative_to(REPO)}: {doc}, {words!r}")
    assert cited >= 4 and not missing, missing
