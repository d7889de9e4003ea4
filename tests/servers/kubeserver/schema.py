"""The structural-schema semantics of the test server are the product's own: see :mod:`engine.api.schema`."""

from engine.api.schema import *  # noqa: F401,F403
from engine.api.schema import FieldError, apply_defaults, process, process_write, prune, validate  # noqa: F401
