"""mkdocs hook: the pages' shell blocks say whether the tests run them (```` ```sh runnable ```` or
```` ```sh not-runnable: <why> ````, tests/test_docs.py); Python-Markdown's fenced blocks take one word after the
fence, so the site sees ```` ```sh ```` and the marker stays in the Markdown source."""

from __future__ import annotations

import re
from typing import Any

TEST_MARKER = re.compile(r"^(```[\w+-]+)[ \t]+(?:runnable|not-runnable:[^\n]*)$", re.MULTILINE)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The page's Markdown with each fence's test marker removed."""
    return TEST_MARKER.sub(r"\1", markdown)
