"""The one base of the errors that say an input cannot be used as written.

A VariantAutoscaling field (:class:`engine.optimize.spec.SpecError`) and a ConfigMap entry
(:class:`engine.optimize.config.ConfigError`) fail the same way: what is wrong is a place in the input and a reason,
and the caller turns the two into a condition, an Event or an ``error:`` line naming that place. Pure.
"""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """An input cannot be used as written: ``where`` names the place (a field path, ``<configmap>/<key>``),
    ``detail`` says why; ``str()`` is ``"<where>: <detail>"``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.detail = message
