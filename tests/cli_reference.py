"""The generated reference pages: docs/reference/cli.md from the ``modelplane`` command line's own definitions
(the typer app of ``flows.cli``: every command the help lists, its description, usage and options, as ``--help``
states them), docs/reference/flow-parameters.md from the flows' signatures (the parameter schema Prefect
stores for each deployment of ``deployments/prefect.yaml``, what the UI's run form shows), and
docs/reference/prometheus.md from the Prometheus client's table of environment variables.

    python -m tests.cli_reference            # rewrite every page
    python -m tests.cli_reference --check    # exit 1 when a page differs from the definitions

tests/test_docs_site.py fails when a checked-in page is not what this renders, so a changed option, parameter or
help text is a regeneration away, never a hand edit.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import sys
from typing import Any

from engine.units import format_duration
from flows.cli.options import MAX_DURATION_S

REPO = pathlib.Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reference" / "cli.md"
PARAMETERS_PAGE = REPO / "docs" / "reference" / "flow-parameters.md"
PROMETHEUS_PAGE = REPO / "docs" / "reference" / "prometheus.md"
HEADER = f"""# Command line

Every `modelplane` command, as its `--help` describes it. Each flow command runs one Prefect flow on the cluster
`--cluster` names (a folder of manifests, or your kubeconfig's cluster without it), prints a table (or `--json`)
and exits 0 (clean), 2 (could not run: one `error:` line) or 3 (ran degraded):
[exit codes](../platform.md#exit-codes-flowsexitcodespy). The same flows run as Prefect deployments with the
same parameters ([The Prefect platform](../platform.md)). An option shown as `DURATION` takes `90s`, `5m`, `12h`,
`7d`, `1h30m` or a plain number of seconds, from 0 up to `{format_duration(MAX_DURATION_S)}`.

This page is generated from the command line's own definitions (`python -m tests.cli_reference`); do not edit it
by hand.
"""


IMAGE_NAME = "Modelplane's image (`modelplane build-image` prints it)"
"""How the pages name Modelplane's own image: by what it is, never by its versioned tag (flows/image.py names it)."""


def _cell(text: str) -> str:
    """One Markdown table cell: a single line, pipes escaped, Modelplane's image by name."""
    from flows.image import IMAGE

    return " ".join(text.split()).replace("|", "\\|").replace(IMAGE, IMAGE_NAME)


def _paragraphs(text: str) -> str:
    """A command's help as Markdown paragraphs: click's no-rewrap markers dropped, each paragraph on one line."""
    blocks = [block for block in text.replace("\b\n", "").split("\n\n") if block.strip()]
    return "\n\n".join(" ".join(block.split()) for block in blocks)


def _visible(group: Any, ctx: Any) -> list[tuple[str, Any]]:
    """The commands a group's help lists, by name."""
    return sorted((name, command) for name, command in group.commands.items() if not command.hidden)


def _command_section(path: str, command: Any, ctx: Any) -> list[str]:
    """One command's section: heading, description, usage and a table of its arguments and options."""
    lines = [f"## `{path}`", ""]
    if command.help:
        lines += [_paragraphs(command.help), ""]
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines += ["```text", f"{path} {usage}".rstrip(), "```", ""]
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        rows.append(f"| `{_cell(names)}` | {_cell(help_text)} |")
    if rows:
        lines += ["| argument or option | description |", "|---|---|", *rows, ""]
    return lines


def render() -> str:
    """The whole page."""
    import typer

    from flows.cli import app

    root = typer.main.get_command(app)
    root_ctx = root.make_context("modelplane", [], resilient_parsing=True)
    lines = [HEADER]
    pending: list[tuple[str, Any, Any]] = [("modelplane", root, root_ctx)]
    while pending:
        path, group, ctx = pending.pop(0)
        for name, command in _visible(group, ctx):
            sub_ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
            if hasattr(command, "commands"):
                pending.append((f"{path} {name}", command, sub_ctx))
                continue
            lines += _command_section(f"{path} {name}", command, sub_ctx)
    return "\n".join(lines).rstrip() + "\n"


PARAMETERS_HEADER = """# Flow parameters

Every Prefect deployment of `deployments/prefect.yaml` and its parameters, as the Prefect UI's run form and
`prefect deployment run NAME -p key=value` take them. The defaults are the flow's; a deployment's own values in
`prefect.yaml` are listed under it. The server checks every value against these types and constraints before a run
exists. The `modelplane` command of the same name takes the same settings as options
([Command line](cli.md)).

This page is generated from the flows' signatures (`python -m tests.cli_reference`); do not edit it by hand.
"""

_JSON_TYPES = {"string": "text", "integer": "integer", "number": "number", "boolean": "true/false", "object": "mapping"}


def _schema_type(schema: dict[str, Any]) -> str:
    """A parameter's JSON schema as a person reads its type: ``text``, ``integer``, ``one of a, b``, ``list of text``,
    with ``or none`` where null is allowed."""
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    if "anyOf" in schema:
        kinds = [_schema_type(option) for option in schema["anyOf"] if option.get("type") != "null"]
        nullable = any(option.get("type") == "null" for option in schema["anyOf"])
        return " or ".join(dict.fromkeys(kinds)) + (" or none" if nullable else "")
    if schema.get("type") == "array":
        return "list of " + _schema_type(schema.get("items") or {})
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if schema.get("format") == "date-time":
        return "time (ISO 8601)"
    return _JSON_TYPES.get(str(schema.get("type")), str(schema.get("type", "any")))


def _constraints(schema: dict[str, Any]) -> str:
    """The bounds a parameter's schema states (``>= 1``, ``<= 3600``, a pattern, a length), and those of each item
    of a list."""
    parts: list[str] = []
    for option in [schema, *schema.get("anyOf", [])]:
        for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")):
            if key in option:
                parts.append(f"{sign} {option[key]}")
        if "pattern" in option:  # a grammar too long to read is named by its format
            pattern, form = option["pattern"], str(option.get("format", "")).replace("-", " ")
            parts.append(f"a valid {form}" if form and len(pattern) > 100 else f"matches `{pattern}`")
        if option.get("minLength") == 1:
            parts.append("not empty")
        elif option.get("minLength", 0) > 1:
            parts.append(f"at least {option['minLength']} characters")
        if "maxLength" in option:
            parts.append(f"at most {option['maxLength']} characters")
        if isinstance(option.get("items"), dict) and (each := _constraints(option["items"])):
            parts.append(f"each item {each}")
    return ", ".join(dict.fromkeys(parts))


def _default(schema: dict[str, Any], required: bool) -> str:
    """A parameter's default as the page shows it; Modelplane's own image by name, not by its versioned tag (the
    image is named in one place, flows/image.py)."""
    from flows.image import IMAGE

    if required:
        return "required"
    if "default" not in schema:
        return ""
    if schema["default"] == IMAGE:
        return IMAGE_NAME
    return f"`{json.dumps(schema['default'])}`"


def render_parameters() -> str:
    """The flow-parameters page: one section per deployment, one row per parameter."""
    from prefect.utilities.callables import parameter_schema

    from flows.deployments import deployment_entries

    lines = [PARAMETERS_HEADER]
    for entry in deployment_entries():
        module, function = entry["entrypoint"].split(":")
        flow = getattr(importlib.import_module(module.removesuffix(".py").replace("/", ".")), function)
        schema = parameter_schema(flow).model_dump_for_openapi()
        lines += [f"## `{entry['name']}`", ""]
        if entry.get("description"):
            lines += [" ".join(str(entry["description"]).split()), ""]
        intervals = [schedule["interval"] for schedule in entry.get("schedules") or [] if "interval" in schedule]
        if intervals:
            lines += ["Scheduled every " + ", ".join(f"{interval:g} s" for interval in intervals) + ".", ""]
        if entry.get("parameters"):
            given = ", ".join(f"`{key}`: `{json.dumps(value)}`" for key, value in entry["parameters"].items())
            lines += [f"The deployment sets {given}.", ""]
        lines += ["| parameter | type | default | constraints | description |", "|---|---|---|---|---|"]
        required = set(schema.get("required") or [])
        properties = sorted(schema.get("properties", {}).items(), key=lambda item: item[1].get("position", 0))
        for name, prop in properties:
            lines.append(
                f"| `{name}` | {_cell(_schema_type(prop))} | {_cell(_default(prop, name in required))} | "
                f"{_cell(_constraints(prop))} | {_cell(str(prop.get('description', '')))} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


PROMETHEUS_HEADER = """# Prometheus settings

The environment variables of the Prometheus client that optimize, tune, calibrate-profiles and the serving control
loop build from the environment ([Metrics, actuation, SLO attainment](../metrics.md)). In a cluster, set them in the
install's ConfigMap `modelplane`, and a token in a Secret `modelplane` of your own: the control loop and every
flow-run Job read both ([Install](../platform.md#install)). A token file or a CA bundle must be a path inside
those containers: the service account's token and CA (`/var/run/secrets/kubernetes.io/serviceaccount/token` and
`ca.crt`) are mounted in each of them.

This page is generated from the client's own table (`tasks.clients.metrics.settings`, `python -m
tests.cli_reference`); do not edit it by hand.

| variable | what it sets | when unset |
|---|---|---|
"""


def render_prometheus() -> str:
    """The Prometheus settings page: one row per environment variable the client reads, with the client's default."""
    import inspect

    from tasks.clients.metrics.prometheus import PrometheusMetrics
    from tasks.clients.metrics.settings import PROMETHEUS_ENVIRONMENT

    defaults = inspect.signature(PrometheusMetrics.__init__).parameters
    rows = [
        f"| `{setting.name}` | {_cell(setting.meaning)} | "
        + (f"`{defaults[setting.option].default}`" if setting.option else _cell(setting.unset))
        + " |"
        for setting in PROMETHEUS_ENVIRONMENT
    ]
    return PROMETHEUS_HEADER + "\n".join(rows) + "\n"


def pages() -> dict[pathlib.Path, str]:
    """Every generated page and what it should hold."""
    return {PAGE: render(), PARAMETERS_PAGE: render_parameters(), PROMETHEUS_PAGE: render_prometheus()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when a page differs; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path, text in pages().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}", file=sys.stderr)
    if args.check and stale:
        names = ", ".join(str(path.relative_to(REPO)) for path in stale)
        print(f"out of date: {names}: run python -m tests.cli_reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
