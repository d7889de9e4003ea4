"""Exit codes of every ``modelplane`` flow command, so a CI pipeline can tell the three outcomes apart.

| code | name            | meaning                                                                        |
|------|-----------------|--------------------------------------------------------------------------------|
| 0    | `CLEAN`         | the cycle ran and every resource it looked at was handled                      |
| 2    | `COULD_NOT_RUN` | the cycle could not run: cluster path missing, no Kubernetes access, a flow     |
|      |                 | parameter rejected, configuration missing, or a command-line usage error (the  |
|      |                 | code click gives those); nothing was decided                                   |
| 3    | `DEGRADED`      | the cycle ran, but degraded: metrics missing, invalid resources, write errors  |

A command that exits 2 prints one line naming the cause on stderr (no traceback). A degraded cycle still
prints its table (or JSON) on stdout and its problems on stderr, so a pipeline can both publish the
preview and fail the job.
"""

from __future__ import annotations

import enum
from typing import Iterable


class ExitCode(enum.IntEnum):
    """The documented exit codes (see the module table)."""

    CLEAN = 0
    COULD_NOT_RUN = 2
    DEGRADED = 3


def outcome_code(problems: Iterable[str]) -> ExitCode:
    """``DEGRADED`` when the cycle reported any problem, else ``CLEAN``."""
    return ExitCode.DEGRADED if any(True for _ in problems) else ExitCode.CLEAN
