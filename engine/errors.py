"""The one base of the errors that say an input cannot be used as written.

A VariantAutoscaling field (:class:`engine.optimize.spec.SpecError`) and a ConfigMap entry
(:class:`engine.optimize.config.ConfigError`) fail the same way: what is wrong is a place in the input and a reason,
and the caller turns the two into a condition, an Event or an ``error:`` line naming that place. Pure.
"""

from __future__ import annotations

import reprlib

__all__ = ["InputError", "shown"]

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlevel = 3
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 6


def shown(value: object) -> str:
    """``repr(value)`` cut short (80 characters of a string, six items of a collection, three levels): how an error
    message quotes a value read from an input, which may be a 16 MB string or a thousand-item list, never whole.

    Args:
        value: The value.

    Returns:
        Its bounded repr, e.g. ``'zero'`` or ``[1, 2, 3, 4, 5, 6, ...]``.
    """
    return _SHOWN.repr(value)


class InputError(ValueError):
    """An input cannot be used as written: ``where`` names the place (a field path, ``<configmap>/<key>``),
    ``detail`` says why; ``str()`` is ``"<where>: <detail>"``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.detail = message
