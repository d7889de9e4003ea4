"""How a ``modelplane`` command's options read and parse: help a person reads (values named, never a Python type,
no source file path, flowing paragraphs), earlier flag spellings that still work, and one duration syntax
(``90s``, ``5m``, ``7d``) for every option that takes a duration."""

from __future__ import annotations

import inspect
import math
import re
import typing
from collections.abc import Callable
from typing import Any

import typer
import typer.core

from engine.units import format_duration

MAX_DURATION_S = 3650 * 86400.0
"""The longest duration any option takes (ten years): no window, lookback, interval or timeout is longer, so a longer
one is a typo or hostile input, refused in one line rather than carried into a query or a replay."""

SOURCE_PATH = re.compile(r" ?\((?:see )?(?:flows|tasks|engine|tests)/[\w/.]+\.py(?:, [^)]*)?\)")
"""A parenthesised source file path in a docstring or help text ("(flows/exitcodes.py)"): not for a person."""

METAVARS: dict[str, str] = {"int": "N", "float": "NUMBER", "str": "TEXT"}
"""An option's value as its help names it, by Python type, where the option names none itself."""


class ModelplaneCommand(typer.core.TyperCommand):
    """A ``modelplane`` command as a person reads its help and writes its flags.

    Help: paragraphs as flowing text (a docstring's line breaks are not the reader's), no source file paths,
    each option's value named (``PATH``, ``N``, ``DURATION``, its choices), never a Python type, bounds in
    words. Flags: :attr:`renamed` maps an earlier spelling to the current one, so scripts written for it keep
    working while the help shows only the current name."""

    renamed: dict[str, str] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = readable(self.help)
        for param in self.params:
            if isinstance(param, typer.core.TyperOption):
                describe_value(param)
            elif isinstance(param, typer.core.TyperArgument):
                param.help = readable(param.help)
                param.metavar = param.metavar or (param.name or "").upper()
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]  # its name says it

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, [current_spelling(arg, self.renamed) for arg in args])


def current_spelling(arg: str, renamed: dict[str, str]) -> str:
    """``arg`` with an earlier flag spelling (``--metrics``, ``--metrics=x``) replaced by the current one.

    Args:
        arg: One command line argument.
        renamed: Earlier flag spellings mapped to the current ones.

    Returns:
        The argument with its flag's current spelling.
    """
    flag, sep, value = arg.partition("=")
    return renamed[flag] + sep + value if flag in renamed else arg


def readable(text: str | None) -> str | None:
    """Help text as flowing paragraphs: line breaks inside a paragraph joined, source file paths left out, and
    what follows a form feed (``\\f``, click's marker: a command docstring's ``Args:`` for the code's readers) cut.

    Args:
        text: A command's or option's help, or None.

    Returns:
        The help as one line per paragraph; None or empty as given.
    """
    if not text:
        return text
    paragraphs = inspect.cleandoc(text.partition("\f")[0]).split("\n\n")
    return "\n\n".join(SOURCE_PATH.sub("", " ".join(p.split())) for p in paragraphs)


def describe_value(option: Any) -> None:
    """Name an option's value for its help (flags none; explicit metavars kept) and say its bounds in words.

    Args:
        option: A typer option of a command; its help and metavar are changed in place.
    """
    option.help = readable(option.help)
    if option.is_flag:
        option.metavar = ""
    elif option.metavar is None:
        descriptor = option.type_descriptor
        if descriptor.is_path:
            option.metavar = "PATH"
        else:
            annotation = descriptor.annotation
            element = typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else annotation
            option.metavar = METAVARS.get(getattr(element, "__name__", ""), "TEXT")
    low, high = getattr(option, "min", None), getattr(option, "max", None)
    if low is not None or high is not None:
        bound = (
            f"{low} to {high}"
            if low is not None and high is not None
            else f"at least {low}"
            if low is not None
            else f"at most {high}"
        )
        option.help = f"{option.help or ''} ({bound})".strip()
        option._get_number_range_help_str = lambda: None  # the bounds are in the help's words


def parse_duration_text(text: str) -> float:
    """Seconds of a duration as every option writes one: ``90s``, ``5m``, ``12h``, ``7d``, ``1h30m``, ``1d12h``, or a
    plain number of seconds (what the earlier ``-s``/``-seconds`` options took); ``ValueError`` otherwise.

    Args:
        text: The option's text.

    Returns:
        The duration in seconds.

    Raises:
        ValueError: The text is no duration, is negative, or is longer than :data:`MAX_DURATION_S`.
    """
    text = text.strip()
    seconds = _seconds(text)
    if seconds is None or not 0.0 <= seconds < math.inf:
        raise ValueError(f"{text!r} is not a duration such as 90s, 5m, 12h or 7d")
    if seconds > MAX_DURATION_S:
        raise ValueError(
            f"{text!r} is longer than {format_duration(MAX_DURATION_S)}, the longest duration an option takes"
        )
    return seconds


def _seconds(text: str) -> float | None:
    """Seconds in ``text`` as :func:`parse_duration_text` reads it, before its bounds; None when it is no duration."""
    from engine.api.meta import parse_duration

    try:
        return float(text)
    except ValueError:
        pass
    days, sep, rest = text.partition("d")
    try:
        if sep and days.replace(".", "", 1).isdigit():
            return float(days) * 86400 + (parse_duration(rest) if rest else 0.0)
        return parse_duration(text)
    except ValueError:
        return None


def duration(value: Any) -> float:
    """A duration option's parser: :func:`parse_duration_text`, seconds as a float (a default given in seconds
    passes as it is).

    Args:
        value: The option's text, or a default given in seconds.

    Returns:
        The duration in seconds.
    """
    if isinstance(value, (int, float)):
        return float(value)
    return parse_duration_text(str(value))


def duration_option(
    default: float | None, *names: str, help: str, minimum: float | None = None, maximum: float | None = None
) -> Any:
    """A duration option (:func:`duration`): ``names`` are its flag, then earlier spellings that still work; the
    help shows the default as a duration and the metavar ``DURATION``.

    Args:
        default: The default in seconds, or None for no default.
        *names: The option's flag, then its earlier spellings.
        help: The option's help; the default is appended as a duration.
        minimum: The least value accepted in seconds, or None for no bound.
        maximum: The greatest value accepted in seconds, or None for :data:`MAX_DURATION_S` alone.

    Returns:
        The typer option.
    """
    shown = f" (default: {format_duration(default)})" if default is not None else ""
    return typer.Option(
        default,
        *names,
        parser=duration,
        metavar="DURATION",
        show_default=False,
        help=help + shown,
        callback=_within(minimum, maximum, names[0]),
    )


def _within(minimum: float | None, maximum: float | None, flag: str) -> Callable[[float | None], float | None]:
    def check(value: float | None) -> float | None:
        if value is not None and minimum is not None and value < minimum:
            raise typer.BadParameter(f"at least {format_duration(minimum)}", param_hint=flag)
        if value is not None and maximum is not None and value > maximum:
            raise typer.BadParameter(f"at most {format_duration(maximum)}", param_hint=flag)
        return value

    return check
