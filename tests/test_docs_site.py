"""The documentation builds as a site: ``mkdocs build --strict`` with mkdocs.yml's validation (a broken link, a
missing anchor, an absolute link or a page left out of the nav is a warning, and strict makes any warning fail the
build); the pages outside the site (README.md, DESIGN.md, CONTRIBUTING.md) link only to files that exist;
docs/reference/cli.md and docs/reference/flow-parameters.md are what the command line and the flows' signatures
define (tests/cli_reference.py renders them)."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests import cli_reference

REPO = pathlib.Path(__file__).resolve().parents[1]
MKDOCS = [sys.executable, "-m", "mkdocs"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def build(root: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the project at ``root`` into ``site``."""
    return subprocess.run(
        [*MKDOCS, "build", "--strict", "--config-file", str(root / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def nav_pages(nav: list[object]) -> set[str]:
    """Every page a mkdocs nav names, at any depth."""
    pages: set[str] = set()
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            if isinstance(value, list):
                pages |= nav_pages(value)
            elif isinstance(value, str):
                pages.add(value)
    return pages


def test_the_site_builds_strictly(tmp_path: pathlib.Path) -> None:
    result = build(REPO, tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "WARNING" not in result.stderr, result.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_the_build_fails_on_a_broken_link_and_on_a_page_left_out_of_the_nav(tmp_path: pathlib.Path) -> None:
    """The validation the site test relies on: the same configuration refuses each mistake it is meant to catch."""
    for mistake in ("broken link", "page not in nav", "missing anchor"):
        root = tmp_path / mistake.replace(" ", "-")
        shutil.copytree(REPO / "docs", root / "docs")
        shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
        index = root / "docs" / "index.md"
        if mistake == "broken link":
            index.write_text(index.read_text() + "\nSee [nowhere](no-such-page.md).\n")
        elif mistake == "page not in nav":
            (root / "docs" / "orphan.md").write_text("# An orphan\n")
        else:
            index.write_text(index.read_text() + "\nSee [the SLO](how-to/set-an-slo.md#no-such-heading).\n")
        result = build(root, root / "site")
        assert result.returncode != 0, f"{mistake}: the build passed:\n{result.stderr[-2000:]}"


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert pages == nav_pages(config["nav"]), sorted(pages ^ nav_pages(config["nav"]))


def test_the_generated_reference_pages_are_what_the_code_defines() -> None:
    """docs/reference/cli.md and flow-parameters.md are generated; regenerate them with `python -m tests.cli_reference`."""
    stale = [str(path.relative_to(REPO)) for path, text in cli_reference.pages().items() if path.read_text() != text]
    assert not stale, f"out of date: {stale}: run python -m tests.cli_reference"


def test_the_flow_parameters_page_lists_every_deployment() -> None:
    from flows.deployments import deployment_entries

    listed = re.findall(r"^## `([a-z-]+)`", cli_reference.PARAMETERS_PAGE.read_text(), re.MULTILINE)
    assert listed == [entry["name"] for entry in deployment_entries()]


def test_the_flow_parameters_page_states_the_bounds_of_each_list_item() -> None:
    """A namespace list's items are checked by the server like a single namespace, and the page said nothing."""
    rows = [
        line for line in cli_reference.PARAMETERS_PAGE.read_text().splitlines() if line.startswith("| `namespaces`")
    ]
    assert rows and all("each item matches `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, not empty, at most 63" in r for r in rows)


def test_the_cli_reference_lists_every_command_the_help_lists() -> None:
    import typer

    from flows.cli import app

    visible = {name for name, command in typer.main.get_command(app).commands.items() if not command.hidden}
    listed = set(re.findall(r"^## `modelplane ([a-z-]+)`", cli_reference.PAGE.read_text(), re.MULTILINE))
    assert visible and listed == visible, sorted(listed ^ visible)


@pytest.mark.parametrize("page", ["README.md", "DESIGN.md", "CONTRIBUTING.md"])
def test_the_pages_outside_the_site_link_to_files_that_exist(page: str) -> None:
    missing = []
    for target in LINK.findall((REPO / page).read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (REPO / path).exists():
            missing.append(target)
    assert not missing, f"{page} links to files that do not exist: {missing}"
