"""Refresh the checked-in CRDs: ``python -m tests.api.write_crds [directory]``.

The generator itself (:func:`engine.api.crds.render_crds`) is pure; this is the small side that
writes its output, used after changing a model. ``test_crds.py`` fails when the files drift.
"""

from __future__ import annotations

import pathlib
import sys

from engine.api.crds import render_crds

DEFAULT_DIRECTORY = pathlib.Path(__file__).resolve().parents[2] / "deployments" / "crds"


def write_crds(directory: str | pathlib.Path = DEFAULT_DIRECTORY) -> list[pathlib.Path]:
    """Write one YAML file per CRD into ``directory``; returns the paths written."""
    target = pathlib.Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_crds().items():
        path = target / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_crds(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIRECTORY):
        print(written_path)
