"""Shared helpers of the benchmark scripts: the machine line and the marked sections of docs/benchmarks.md.

Each benchmark owns one section between its own start/end markers, so re-running one rewrites only
its section and leaves the others as they were measured.
"""

from __future__ import annotations

import os
import pathlib
import platform
from importlib import metadata

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def machine(packages: tuple[str, ...] = ("numpy", "PuLP", "highspy", "prefect", "kubernetes")) -> str:
    """One line naming the OS, CPU, core count, Python and the package versions that matter."""
    cpu = platform.processor() or "unknown"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in packages)
    return f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {versions}"


def write_section(start: str, end: str, section: str, doc: pathlib.Path = DOC) -> None:
    """Put ``section`` between the ``start``/``end`` markers of ``doc`` (appending them if absent)."""
    block = f"{start}\n\n{section.strip()}\n\n{end}"
    if doc.exists():
        text = doc.read_text()
        if start in text and end in text:
            head, rest = text.split(start, 1)
            _, tail = rest.split(end, 1)
            text = head + block + tail
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    else:
        text = "# Benchmarks\n\n" + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
